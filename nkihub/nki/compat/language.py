"""``neuronxcc.nki.language`` (old nl): the current ``nki.language`` plus the old dialect's
``mask=`` keyword, ``nl.arange``/``nl.mgrid`` indices, ``nl.par_dim`` block dims before the partition dim,
and ``nl.nc``/``nl.spmd_dim`` launch grids. Every function translates onto the same ``nki.language`` /
``nki.isa`` calls; nothing here executes anything.
"""
from __future__ import annotations

import builtins
import functools
import inspect
import itertools
import math

import numpy as np

import nkihub.nki.language as _nl
from nkihub.nki import isa as _nisa
from nkihub.nki import placement
from nkihub.nki.compat.compiler import DirectBuffer
from nkihub.nki.language.memory import _dtname
from nkihub.nki.language.wide import per_instruction
from nkihub.nki.compat import deferred
from nkihub.nki.compat.affine import PendingView, Predicate, arange, mgrid, resolve, restrict  # noqa: F401
from nkihub.nki.language import *  # noqa: F401,F403  (the names both dialects share)
from nkihub.nki.language import (bfloat16, bool_, float8_e4m3, float8_e5m2, float16, float32, hbm, int8, int16,  # noqa: F401
                          int32, private_hbm, psum, sbuf, shared_hbm, tfloat32, tile_size, uint8, uint16,
                          uint32)
from nkihub.nki.tensor import NkiTensor

from nkihub.nki.compat.affine import affine_index as _affine_index

del range  # nl.range is the current dialect's; here ``range`` stays Python's

if _affine_index not in NkiTensor.index_hooks:
    NkiTensor.index_hooks.append(_affine_index)  # t[i_p, i_f] with nl.arange/nl.mgrid indices


class par_dim(int):
    """``nl.par_dim(128)``: marks the partition dim of a tile shape whose leading dims are block dims."""


class nc(int):
    """``nl.nc(n)``: a launch-grid dim spread over n NeuronCores (simulated one program at a time)."""


def spmd_dim(*dims) -> int:
    """``nl.spmd_dim(nl.nc(2), 4)``: one launch-grid dim of the product of its sizes."""
    n = 1
    for d in dims:
        n *= int(d)
    return n


class _Min:
    def __init__(self, dtype):
        self.min = float(np.finfo(dtype).min) if dtype != "bfloat16" else -3.3895313892515355e+38


fp32 = _Min(np.float32)
bfp16 = _Min("bfloat16")


def finfo(dtype):
    """numpy's finfo of an nl float dtype."""
    import ml_dtypes
    dt = np.dtype(dtype)
    return ml_dtypes.finfo(dt) if dt.kind == "V" or "bfloat" in dt.name or "float8" in dt.name else np.finfo(dt)


# -- tensors with block dims --------------------------------------------------------------------------------
def _split(shape):
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    k = next((i for i, s in enumerate(shape) if isinstance(s, par_dim)), 0)
    return k, (shape[k],) + shape[:k] + shape[k + 1:]


def _block_view(t: NkiTensor, k: int) -> NkiTensor:
    """The storage [P, B..., F...] seen as [B..., P, F...]; size-1 block dims get stride 0 so that
    indexing them never looks like indexing the partition dim."""
    if k == 0:
        return t
    spec = t.spec
    if spec.on_chip and math.prod(spec.shape[1:k + 1]) > 1:
        # Each block is allocated for its own live range, as the compiler allocates block tiles.
        spec.block_bytes = math.prod(spec.shape[k + 1:]) * spec.np_dtype.itemsize
    dims = t.dims
    blocks = tuple((st if n != 1 else 0, n) for st, n in dims[1:k + 1])
    return NkiTensor(t.spec, t.offset, blocks + (dims[0],) + dims[k + 1:])


def ndarray(shape, dtype, *, buffer=None, name=None, **kwargs):
    """A new tensor; ``nl.par_dim`` in ``shape`` marks the partition dim after leading block dims. A
    direct-allocation ``buffer`` (``ncc.sbuf.mod_alloc(...)`` ...) places each block itself."""
    k, storage = _split(shape)
    if isinstance(buffer, DirectBuffer):
        spec = placement.declare(tuple(int(s) for s in storage), k, _dtname(dtype), buffer.name, buffer.locate,
                                 name)
        return _block_view(NkiTensor(spec), k)
    return _block_view(_nl.ndarray(storage, dtype, buffer=buffer, name=name), k)


def full(shape, fill_value, dtype, *, buffer=None, name=None, **kwargs):
    """A new on-chip tile (block dims allowed) filled with ``fill_value``."""
    k, storage = _split(shape)
    if isinstance(buffer, DirectBuffer):
        t = ndarray(shape, dtype, buffer=buffer, name=name)
        for idx in itertools.product(*(range(n) for n in t.shape[:k])):   # block by block: they may share bytes
            per_instruction(_nisa.memset, t[idx] if idx else t, fill_value)
        return t
    return _block_view(_nl.full(storage, fill_value, dtype, buffer=buffer, name=name), k)


def zeros(shape, dtype, *, buffer=None, name=None, **kwargs):
    """A new on-chip tile of zeros (block dims allowed)."""
    return full(shape, 0, dtype, buffer=buffer, name=name)


def ones(shape, dtype, *, buffer=None, name=None, **kwargs):
    """A new on-chip tile of ones (block dims allowed)."""
    return full(shape, 1, dtype, buffer=buffer, name=name)


def zeros_like(a, dtype=None, *, buffer=None, name=None, **kwargs):
    """Zeros with ``a``'s shape."""
    return zeros(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


def empty_like(a, dtype=None, *, buffer=None, name=None, **kwargs):
    """An uninitialised tensor with ``a``'s shape."""
    return ndarray(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name)


# -- masked calls -------------------------------------------------------------------------------------------
def _call(fn, args, kwargs, mask):
    """Run a tile-returning ``nl`` function under ``mask``: operands are restricted to the mask's ranges;
    the result is a full-size tile whose masked region holds the values (one extra copy). Unmasked, the
    call is remembered so that a masked consumer can re-run it under its mask (see ``deferred``)."""
    if mask is None:
        since = deferred.mark()
        out = fn(*[resolve(a) for a in args], **{k: resolve(v) for k, v in kwargs.items()})
        deferred.remember(out, since, lambda m: _call(fn, args, kwargs, m))
        return out
    if not isinstance(mask, Predicate):
        raise TypeError(f"mask= takes a predicate of index expressions (e.g. i_p < n), got {mask!r}")
    args = [deferred.under(a, mask) for a in args]
    kwargs = {k: deferred.under(v, mask) for k, v in kwargs.items()}
    ranges = mask.ranges()
    first = next((a for a in args if isinstance(a, (NkiTensor, PendingView))), None)
    small = fn(*[restrict(a, ranges) for a in args], **{k: restrict(v, ranges) for k, v in kwargs.items()})
    if first is None or not isinstance(small, NkiTensor):
        return small
    # The result tile has the shape the unmasked call would give (a reduction drops its axes); the axes
    # the mask cut in the first operand are cut the same way in it, and the values land in that region.
    view = first.view if isinstance(first, PendingView) else first
    cut = {k - 16 + view.ndim: (lo, hi, size) for k, (lo, hi, size) in ranges.items()
           if 0 <= k - 16 + view.ndim < view.ndim and view.dims[k - 16 + view.ndim][1] == size
           and (lo, hi) != (0, size)}
    shape, offset = list(small.shape), {}
    for j, i in enumerate(_result_axes(view.ndim, small.ndim, kwargs)):
        if i in cut and small.shape[j] == cut[i][1] - cut[i][0]:
            shape[j], offset[j] = cut[i][2], cut[i][0]
    if not offset:
        return small
    full_t = _nl.ndarray(tuple(shape), small.dtype, buffer=small.buffer, name=small.name)
    dims = full_t.dims
    region = NkiTensor(full_t.spec, builtins.sum(o * dims[j][0] for j, o in offset.items()),
                       tuple((st, n) for (st, _), n in zip(dims, small.shape)))
    _nl._assign(region, small)
    return full_t


def _result_axes(n_in: int, n_out: int, kwargs) -> list:
    """For each axis of a result, the axis of the first operand it comes from (None when unknown):
    elementwise results keep the operand's axes, reductions drop their ``axis`` ones."""
    if n_out == n_in:
        return list(range(n_in))
    axis = kwargs.get("axis")
    if axis is not None:
        dropped = {a % n_in for a in ((axis,) if isinstance(axis, int) else axis)}
        kept = [i for i in range(n_in) if i not in dropped]
        if len(kept) == n_out:
            return kept
    return [0] + [None] * (n_out - 1)


def _masked(fn):
    params = inspect.signature(fn).parameters

    @functools.wraps(fn)
    def wrapper(*args, mask=None, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k in params}  # old-only options (compute_dtype, ...)
        return _call(fn, args, kwargs, mask)
    wrapper.__doc__ = (fn.__doc__ or "") + "\n\n``mask=``: an index predicate restricting the computed region."
    del wrapper.__wrapped__  # the signature below is the old dialect's, not the wrapped function's
    wrapper.__signature__ = inspect.Signature(list(params.values()) + [
        inspect.Parameter("mask", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])
    return wrapper


NkiTensor.call_hook = staticmethod(lambda fn, args: _call(fn, args, {}, None))  # a + b under a later mask=

_g = globals()
for _name in list(_nl._UNARY) + list(_nl._BINARY) + ["reciprocal", "logical_not", "invert", "where", "max",
                                                      "min", "mean", "sum", "prod", "var", "all", "softmax",
                                                      "transpose", "matmul", "dropout", "gather_flattened",
                                                      "rms_norm"]:
    _g[_name] = _masked(getattr(_nl, _name))


def load(src, *, mask=None, dtype=None, **kwargs):
    """Load HBM view ``src`` into a new SBUF tile; with ``mask`` only the masked region is loaded."""
    if mask is None:
        return _nl.load(resolve(src), dtype=dtype)
    ranges = mask.ranges()
    t = _nl.ndarray(src.shape, dtype or src.dtype, buffer=sbuf, name="load")
    part = restrict(src, ranges)
    _nisa.dma_copy(dst=restrict(t, ranges), src=part) if not part.spec.on_chip else \
        _nisa.tensor_copy(restrict(t, ranges), part)
    return t


def store(dst, value, *, mask=None, **kwargs):
    """Store tile ``value`` into HBM view ``dst`` (only the masked region with ``mask``, which also covers
    the expression that computed ``value``)."""
    _nl.store(resolve(dst, mask), resolve(deferred.under(value, mask), mask))


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs):
    """Load 2-D HBM view src [K, M] transposed into a new SBUF tile [M, K]."""
    return _nl.load_transpose2d(resolve(src, mask), dtype=dtype)


def copy(src, *, mask=None, dtype=None, **kwargs):
    """A copy of tile ``src`` in a new SBUF tile."""
    return _call(_nl.copy, (src,), {"dtype": dtype}, mask)


def broadcast_to(src, *, shape, **kwargs):
    """Broadcast tile ``src`` to ``shape`` (a one-partition tile to many partitions: ``partition_broadcast``)."""
    return partition_broadcast(resolve(src), shape)


def partition_broadcast(x, shape):
    """``x.broadcast_to(shape)`` in the neuronxcc dialect: a one-partition float32 SBUF tile [1, F] copied to M
    partitions is a Tensor Engine matmul, "NKI invokes such matmul under the hood when
    broadcast_input.broadcast_to((M, broadcast_input.shape[1])) is called", ``nc_matmul(ones,
    broadcast_input, is_stationary_onezero=True)`` with ``ones`` a [1, M] tile of ones (NKI docs,
    Trainium/Inferentia2 architecture page, "Alternative Use Case", aws-neuron-sdk @ 4eba310). A matmul
    writes one PSUM bank ("each nc_matmul can only write to a single PSUM bank, which can only hold 512 FP32
    elements per PSUM partition", same page) and a PSUM tile's free size is at most ``psum_fmax`` = 512
    (NKI programming model, TC#2). So for F <= 512 the result is that PSUM tile, which a Vector Engine
    instruction reads at N cycles, not 2N (``nki.isa.tensor_tensor``, "Estimated instruction cost"); a wider
    row is one matmul per 512 columns, each copied into an SBUF tile [M, F] by ``tensor_copy`` on the engine
    the compiler picks "based on engine workload" (``nki.isa.tensor_copy``, ``engine``): of Vector and
    Scalar (GpSimd cannot read PSUM), the one with less estimated work so far (``_lighter_engine``).
    Other dtypes (PSUM holds float32 on trn1/trn2, and the tile keeps the source's dtype) and every other
    broadcast stay ``nl.broadcast_to``'s (a DMA into SBUF)."""
    shape = tuple(int(s) for s in shape)
    if not (isinstance(x, NkiTensor) and x.spec.buffer == "sbuf" and x.ndim == 2 and len(shape) == 2
            and x.shape[0] == 1 and 1 < shape[0] <= tile_size.pmax and x.shape[1] == shape[1]
            and _dtname(x.dtype) == "float32"):
        return _nl.broadcast_to(x, shape)
    from nkihub.nki import tracing
    b = tracing.require("broadcast_to")
    m, f = shape
    cache = b.__dict__.setdefault("_broadcast_ones", {})
    if m not in cache:   # a constant of the kernel (its trace-time value; no instruction fills it)
        spec = b.new_tensor((1, m), "float32", "sbuf", kind="constant", name="bcast_ones",
                            data=np.ones((1, m), dtype=np.float32).tobytes())
        cache[m] = NkiTensor(spec)
    bank = tile_size.psum_fmax
    if f <= bank:
        out = _nl.ndarray(shape, float32, buffer=psum, name="broadcast")
        _nisa.nc_matmul(out, cache[m], x, is_stationary_onezero=True, accumulate=False)
        # Where PSUM cannot hold every live broadcast, the allocator moves them to SBUF (as the compiler's
        # copy-out would): reorder.allocate_in_demand_order.
        b.program.meta.setdefault("psum_broadcasts", []).append(out.spec.name)
        return out
    out = _nl.ndarray(shape, float32, buffer=sbuf, name="broadcast")
    for lo in range(0, f, bank):
        hi = builtins.min(f, lo + bank)
        part = _nl.ndarray((m, hi - lo), float32, buffer=psum, name="broadcast_psum")
        _nisa.nc_matmul(part, cache[m], x[:, lo:hi], is_stationary_onezero=True, accumulate=False)
        _nisa.tensor_copy(out[:, lo:hi], part, engine=_lighter_engine(b))
    return out


def _lighter_engine(b) -> str:
    """Of the Vector and Scalar engines, the one with less estimated work (cost-model seconds) in the
    instructions traced so far (ties: Vector); kept as a running sum on the builder."""
    from nkihub.simulator.isa import opdef
    upto, load = b.__dict__.get("_engine_load", (0, {"vector": 0.0, "scalar": 0.0}))
    instructions = b.program.instructions
    for ins in instructions[upto:]:
        if ins.engine in load:
            load[ins.engine] += float(opdef(ins.opcode).cost(ins, b.program, b.target))
    b._engine_load = (len(instructions), load)
    return "scalar" if load["scalar"] < load["vector"] else "vector"


def shared_constant(constant, dtype=None, **kwargs):
    """An HBM tensor holding a host array known at trace time."""
    return _nl.shared_constant(constant, dtype=dtype)


def shared_identity_matrix(n, dtype=np.uint8, **kwargs):
    """An n x n identity matrix in HBM (the old dialect's: a shared constant; default dtype uint8)."""
    return _nl.shared_constant(np.eye(int(n)), dtype=dtype)


def rand(shape, dtype=np.float32, **kwargs):
    """A new SBUF tile of uniform random values in [0, 1)."""
    return _nl.rand(shape, dtype)


def random_seed(seed, *, mask=None, **kwargs):
    """Seed the random generator."""
    _nl.random_seed(seed)


def device_print(prefix, x, *, mask=None, **kwargs):
    """Print ``x`` when the simulator reaches this point."""
    _nl.device_print(prefix, resolve(x, mask))


def program_id(axis):
    """Index of this program instance along launch-grid ``axis``."""
    return _nl.program_id(axis)


def affine_range(*args, precise_schedule=False, **kwargs):
    """``range`` whose iterations are independent (unrolled at trace time). ``precise_schedule=True`` (not
    in the public docs; nki-samples' pipelined_attention passes it for a software-pipelined loop whose
    iterations hand values to the next) asks the compiler to keep the kernel's order: an in-order loop
    here, where iterations may carry values."""
    return _nl.sequential_range(*args) if precise_schedule else _nl.affine_range(*args)


def sequential_range(*args, **kwargs):
    """``range`` whose iterations may carry values (unrolled at trace time)."""
    return _nl.sequential_range(*args)


def static_range(*args):
    """``range`` fully unrolled."""
    return _nl.static_range(*args)


def expand_dims(data, axis):
    """A view of ``data`` with a size-1 dim inserted at ``axis``."""
    return _nl.expand_dims(resolve(data), axis)

from nkihub.nki.compat.extra import all_reduce, atomic_rmw, gemm_grid, gemm_stationary_grid, loop_reduce  # noqa: E402,F401

def static_cast(input_data, dtype):
    """``nl.static_cast(x, dtype)``: ``x`` converted to ``dtype`` with the NeuronCore's rounding (round to
    nearest even). A host array (numpy, torch) is converted on the host; a tile becomes a new SBUF tile."""
    if isinstance(input_data, (NkiTensor, PendingView)):
        return _nl.copy(resolve(input_data), dtype=dtype)
    from nkihub.nki.arrays import to_numpy
    from nkihub.nki.dtypes import dtype_of
    return np.asarray(to_numpy(input_data)).astype(dtype_of(dtype))


from nkihub.nki.compat import masks as _masks  # noqa: E402

_masks.wrap_module(globals())   # mask=True / mask=False constants

from nkihub.nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("neuronxcc.nki.language")  # AWS NKI names not simulated: a clear error
