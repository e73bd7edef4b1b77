"""Reductions, matmul, transpose and softmax of ``nki.language``."""
from __future__ import annotations

import builtins

import numpy as np

from nkihub.nki import isa as nisa
from nkihub.nki import tracing
from nkihub.nki.language.elementwise import result_dtype
from nkihub.nki.language.memory import in_sbuf, ndarray, psum, sbuf
from nkihub.nki.ops import nki_op
from nkihub.nki.tensor import NkiTensor
from nkihub.simulator.errors import KernelRuleError


def _axes(x: NkiTensor, axis) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    if 0 in axes:
        raise KernelRuleError("reduce-axis", "reductions run along free axes; axis 0 is the partition dim",
                              operand="x", shape=x.shape, dtype=x.spec.dtype, buffer=x.buffer,
                              loc=tracing.caller_loc())
    return axes


def reduce(op: str, x: NkiTensor, axis, dtype=None, keepdims=False, negate=False) -> NkiTensor:
    """Reduce tile x [P, F...] along free ``axis`` with ``op`` into a new SBUF tile."""
    axes = _axes(x, axis)
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keepdims else \
        tuple(s for i, s in enumerate(x.shape) if i not in axes)
    out = ndarray(shape, result_dtype(x, dtype=dtype), buffer=sbuf, name=f"reduce_{op}")
    view, axes = reduced_last(x, axes)
    nisa.tensor_reduce(out, op, view, axis=list(axes), negate=negate, keepdims=keepdims)
    return out


def reduced_last(x: NkiTensor, axes: tuple[int, ...]) -> tuple[NkiTensor, tuple[int, ...]]:
    """``x`` [P, F...] as the Vector Engine reduces it, with the reduced free ``axes`` the last, consecutive
    ones (the nki.isa.tensor_reduce page requires that): a permuted view (the kept axes in their order, then
    the reduced ones; no data moves) and the axes to name, ``(ndim - len(axes), ..., ndim - 1)``. ``x`` itself
    when its axes already are the last ones."""
    last = tuple(range(x.ndim - len(axes), x.ndim))
    if tuple(sorted(axes)) == last:
        return x, tuple(sorted(axes))
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    return x.permute(kept + tuple(sorted(axes))), last


@nki_op("maximum")
def max(x, axis, dtype=None, keepdims=False):  # noqa: A001 (NKI's name)
    """Maximum of tile x [P, F...] along free ``axis``; returns a new SBUF tile."""
    return reduce("maximum", x, axis, dtype, keepdims)


@nki_op("minimum")
def min(x, axis, dtype=None, keepdims=False):  # noqa: A001
    """Minimum of tile x [P, F...] along free ``axis``; returns a new SBUF tile."""
    return reduce("minimum", x, axis, dtype, keepdims)


@nki_op("add")
def sum(x, axis, dtype=None, keepdims=False):  # noqa: A001
    """Sum of tile x [P, F...] along free ``axis`` (fp32 accumulation); returns a new SBUF tile."""
    return reduce("add", x, axis, dtype, keepdims)


@nki_op("multiply")
def prod(x, axis, dtype=None, keepdims=False):
    """Product of tile x [P, F...] along free ``axis``; returns a new SBUF tile."""
    return reduce("multiply", x, axis, dtype, keepdims)


def mean(x, axis, dtype=None, keepdims=False):
    """Mean of tile x [P, F...] along free ``axis``: a sum then a scale; returns a new SBUF tile."""
    axes = _axes(x, axis)
    n = 1
    for a in axes:
        n *= x.shape[a]
    s = reduce("add", x, axes, np.float32, keepdims)
    out = ndarray(s.shape, result_dtype(x, dtype=dtype), buffer=sbuf, name="mean")
    nisa.tensor_scalar(out, s, "multiply", 1.0 / n)
    return out


def matmul(x, y, transpose_x=False) -> NkiTensor:
    """x @ y on the Tensor Engine into a new fp32 PSUM tile [M, N].

    ``x`` is [M, K] (or [K, M] with ``transpose_x=True``, which saves the transpose), ``y`` is [K, N];
    K, M <= 128, N <= 512. A PSUM operand is first copied to SBUF (the Tensor Engine reads only SBUF).
    """
    x, y = in_sbuf(x), in_sbuf(y)
    stationary = x
    if not transpose_x:
        t_psum = ndarray((x.shape[1], x.shape[0]), np.float32, buffer=psum, name="xT_psum")
        nisa.nc_transpose(t_psum, x, engine=nisa.engine.tensor)
        stationary = ndarray(t_psum.shape, x.dtype, buffer=sbuf, name="xT")
        nisa.tensor_copy(stationary, t_psum)
    out = ndarray((stationary.shape[1], y.shape[1]), np.float32, buffer=psum, name="matmul")
    nisa.nc_matmul(out, stationary, y, accumulate=False)
    return out


def transpose(x, dtype=None) -> NkiTensor:
    """Transpose tile x [P, F] into a new tile [F, P]: on the Vector Engine into SBUF when both dims are
    <= 32, else on the Tensor Engine into PSUM."""
    if x.ndim != 2:
        x = x.reshape((x.shape[0], x.size // x.shape[0]))
    small = builtins.max(x.shape) <= 32
    if not small:
        x = in_sbuf(x)   # the Tensor Engine reads only SBUF
    out = ndarray((x.shape[1], x.shape[0]), dtype or (x.dtype if small else np.float32),
                  buffer=sbuf if small else psum, name="transpose")
    nisa.nc_transpose(out, x, engine=nisa.engine.vector if small else nisa.engine.tensor)
    return out


def softmax(x, axis=-1, dtype=None) -> NkiTensor:
    """Softmax of tile x [P, F] along the last (free) axis: max, exp(x - max) with a fused sum on the
    Scalar Engine, reciprocal, scale. Computed in fp32; returns a new SBUF tile."""
    axes = _axes(x, axis)
    neg_max = reduce("maximum", x, axes, np.float32, keepdims=True, negate=True)
    e = ndarray(x.shape, np.float32, buffer=sbuf, name="softmax_exp")
    total = ndarray(neg_max.shape, np.float32, buffer=sbuf, name="softmax_sum")
    nisa.activation(e, "exp", x, bias=neg_max, reduce_op="add", reduce_res=total,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    inv = ndarray(total.shape, np.float32, buffer=sbuf, name="softmax_inv")
    nisa.reciprocal(inv, total)
    out = ndarray(x.shape, result_dtype(x, dtype=dtype), buffer=sbuf, name="softmax")
    nisa.tensor_scalar(out, e, "multiply", inv)
    return out
