"""Elementwise functions of ``nki.language``: unary math on the Scalar Engine (activation), binary
operators on the Vector Engine (tensor_tensor, or tensor_scalar for a number or a [P, 1] column),
and ``where``. Each returns a new SBUF tile; ``dtype`` sets its dtype (default: float32 if an input
is float32, else the first tile's dtype)."""
from __future__ import annotations

import numpy as np

from nkihub.nki import isa as nisa
from nkihub.nki.language.memory import ndarray, sbuf
from nkihub.nki.language.wide import per_instruction
from nkihub.nki.ops import nki_op
from nkihub.nki.tensor import NkiTensor
from nkihub.simulator.errors import KernelRuleError
from nkihub.nki import tracing


def result_dtype(*xs, dtype=None):
    """The dtype of an elementwise result."""
    if dtype is not None:
        return dtype
    tiles = [x for x in xs if isinstance(x, NkiTensor)]
    if any(t.dtype == np.float32 for t in tiles):
        return np.float32
    return tiles[0].dtype


def _free(t: NkiTensor) -> int:
    return t.size // max(1, t.shape[0])


def unary(act: str, x: NkiTensor, dtype=None) -> NkiTensor:
    """Apply activation ``act`` to tile ``x`` into a new SBUF tile."""
    out = ndarray(x.shape, result_dtype(x, dtype=dtype), buffer=sbuf, name=act)
    return per_instruction(nisa.activation, out, act, x)


def _widen(t: NkiTensor, shape: tuple) -> NkiTensor:
    """Tile ``t`` seen with numpy-broadcast ``shape``: missing leading dims added, a single partition
    copied to every partition (a DMA, as ``nl.broadcast_to`` does: engine lanes read their own partition),
    size-1 free dims read with stride 0."""
    from nkihub.nki.language.memory import broadcast_to, in_sbuf
    view = NkiTensor(t.spec, t.offset, [(0, 1)] * (len(shape) - t.ndim) + list(t.dims))
    if view.shape[0] == 1 and shape[0] != 1:
        view = broadcast_to(in_sbuf(view), (shape[0],) + view.shape[1:])
    return NkiTensor(view.spec, view.offset, [(st if n == m else 0, m) for (st, n), m in zip(view.dims, shape)])


def binary(op: str, x, y, dtype=None) -> NkiTensor:
    """``x <op> y`` with tiles or numbers; tile shapes broadcast as numpy's do (the ``nl`` arithmetic
    pages: "x.shape and y.shape must be broadcastable to a common shape"). A [P, 1] tile is a per-partition
    scalar operand (tensor_scalar); a single partition is first copied to all partitions."""
    xt, yt = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
    if not xt and not yt:
        raise TypeError(f"nl.{op} needs at least one tile argument")
    if xt and yt:
        if x.spec.buffer == "psum" and y.spec.buffer == "psum":
            # A two-input Vector instruction reads at most one input from PSUM: the nl function copies the
            # other to SBUF first (AWS: "If the tile is in PSUM, an extra copy will be performed").
            from nkihub.nki.language.memory import in_sbuf
            y = in_sbuf(y)
        if x.shape == y.shape or (_free(x) == _free(y) and x.shape[0] == y.shape[0]):
            out = ndarray(x.shape, result_dtype(x, y, dtype=dtype), buffer=sbuf, name=op)
            return per_instruction(nisa.tensor_tensor, out, x, y, op)
        if x.shape[0] == y.shape[0] and _free(y) == 1:
            out = ndarray(x.shape, result_dtype(x, y, dtype=dtype), buffer=sbuf, name=op)
            return per_instruction(nisa.tensor_scalar, out, x, op, y)
        if x.shape[0] == y.shape[0] and _free(x) == 1:
            out = ndarray(y.shape, result_dtype(x, y, dtype=dtype), buffer=sbuf, name=op)
            return per_instruction(nisa.tensor_scalar, out, y, op, x, reverse0=True)
        try:
            shape = tuple(np.broadcast_shapes(x.shape, y.shape))
        except ValueError:
            raise KernelRuleError("shape-mismatch", f"nl.{op}: tiles of shapes {x.shape} and {y.shape} do not "
                                  "broadcast (each dim equal, or 1 in one of them)", operand="y", shape=y.shape,
                                  dtype=y.spec.dtype, buffer=y.buffer, loc=tracing.caller_loc()) from None
        out_dtype = result_dtype(x, y, dtype=dtype)
        parts = (shape[0],) + (1,) * (len(shape) - 1)
        xw = _widen(x, parts if _free(x) == 1 else shape)
        yw = _widen(y, parts if _free(y) == 1 else shape)
        out = ndarray(shape, out_dtype, buffer=sbuf, name=op)
        if _free(yw) == 1:
            return per_instruction(nisa.tensor_scalar, out, _widen(xw, shape), op, yw)
        if _free(xw) == 1:
            return per_instruction(nisa.tensor_scalar, out, yw, op, xw, reverse0=True)
        return per_instruction(nisa.tensor_tensor, out, xw, yw, op)
    if xt:
        out = ndarray(x.shape, result_dtype(x, dtype=dtype), buffer=sbuf, name=op)
        return per_instruction(nisa.tensor_scalar, out, x, op, y)
    out = ndarray(y.shape, result_dtype(y, dtype=dtype), buffer=sbuf, name=op)
    return per_instruction(nisa.tensor_scalar, out, y, op, x, reverse0=True)


def _make_unary(name: str, act: str):
    @nki_op(act)
    def fn(x, dtype=None):
        return unary(act, x, dtype)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``{act}`` of tile x [P, F...] (computed in fp32 on the Scalar Engine); "
                  "returns a new SBUF tile of x's shape and dtype (or ``dtype``).")
    return fn


def _make_binary(name: str, op: str):
    @nki_op(op)
    def fn(x, y, dtype=None):
        return binary(op, x, y, dtype)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``x {op} y`` for tiles [P, F...] or numbers (tile shapes broadcast as numpy's), "
                  "in fp32 on the Vector Engine; returns a new SBUF tile.")
    return fn


UNARY = {n: n for n in ("exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_dx", "gelu_apprx_tanh",
                        "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "silu", "silu_dx", "rsqrt", "sqrt",
                        "square", "abs", "negative", "sign", "sin", "cos", "tan", "arctan", "erf", "erf_dx",
                        "softplus", "mish", "floor", "ceil", "trunc")}
BINARY = {n: n for n in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "mod",
                         "fmod", "abs_max", "abs_min", "equal", "not_equal", "less", "less_equal", "greater",
                         "greater_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
                         "bitwise_or", "bitwise_xor", "left_shift", "right_shift")}

_g = globals()
for _name, _act in UNARY.items():
    _g[_name] = _make_unary(_name, _act)
for _name, _op in BINARY.items():
    _g[_name] = _make_binary(_name, _op)


@nki_op("reciprocal")
def reciprocal(x, dtype=None):
    """Elementwise 1/x of tile x [P, F...] on the Vector Engine; returns a new SBUF tile."""
    out = ndarray(x.shape, result_dtype(x, dtype=dtype), buffer=sbuf, name="reciprocal")
    return per_instruction(nisa.reciprocal, out, x)


@nki_op("logical_not")
def logical_not(x, dtype=None):
    """Elementwise ``x == 0`` as 1/0 of tile x; returns a new SBUF tile."""
    return binary("equal", x, 0, dtype)


@nki_op("invert")
def invert(x, dtype=None):
    """Bitwise NOT of an integer tile x; returns a new SBUF tile."""
    return binary("bitwise_xor", x, -1, dtype)


def where(condition, x, y, dtype=None) -> NkiTensor:
    """Elementwise ``x if condition else y`` (tiles [P, F...] or numbers for x/y): y is copied, then x is
    copied where the condition tile is nonzero (Vector Engine)."""
    values = [t for t in (x, y) if isinstance(t, NkiTensor)] or [condition]
    out = ndarray(condition.shape, result_dtype(*values, dtype=dtype), buffer=sbuf, name="where")
    if isinstance(y, NkiTensor):
        per_instruction(nisa.tensor_copy, out, y)
    else:
        per_instruction(nisa.memset, out, y)
    return per_instruction(nisa.tensor_copy_predicated, out, x, condition)
