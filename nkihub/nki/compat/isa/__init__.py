"""``neuronxcc.nki.isa`` (old nisa): tile-returning instructions (``res = nisa.nc_matmul(a, b)``) with
``mask=`` and ``dtype=``. Each allocates its result tile (SBUF, or PSUM for Tensor Engine results) and
makes the same ``nki.isa`` call the current dialect makes, on views restricted by the mask.
"""
from __future__ import annotations

from functools import partial

import numpy as np

import nkihub.nki.isa as _nisa
import nkihub.nki.language as _nl
from nkihub.nki.compat import deferred
from nkihub.nki.unsupported import not_simulated
from nkihub.nki.compat.affine import AffineExpr, PendingView, Predicate, restrict
from nkihub.nki.isa import (dge_mode, dma_engine, engine, get_nc_version, gpsimd_engine, nc_version,  # noqa: F401
                     oob_mode, reduce_cmd, scalar_engine, tensor_engine, unknown_engine, vector_engine)
from nkihub.nki.isa.extra import transpose_in
from nkihub.nki.language.elementwise import result_dtype
from nkihub.nki.tensor import NkiTensor

from nkihub.nki.compat.language import fp32  # noqa: E402,F401


def _ranges(mask):
    if mask is None:
        return {}
    if not isinstance(mask, Predicate):
        raise TypeError(f"mask= takes a predicate of index expressions (e.g. i_p < n), got {mask!r}")
    return mask.ranges()


def _r(x, ranges):
    return restrict(x, ranges) if isinstance(x, (NkiTensor, PendingView)) else x


def _new(shape, dtype, *inputs, buffer=None, name="tile"):
    tiles = [t for t in inputs if isinstance(t, (NkiTensor, PendingView))]
    dt = dtype if dtype is not None else result_dtype(*[t.view if isinstance(t, PendingView) else t for t in tiles])
    return _nl.ndarray(tuple(shape), dt, buffer=buffer or _nl.sbuf, name=name)


def _emit(fn, out, mask, *args, **kwargs):
    """Call the dst-first ``fn`` on mask-restricted views of ``out`` and every tile operand (a mask also
    covers the unmasked calls that computed the operands, see ``deferred``)."""
    ranges = _ranges(mask)
    if mask is None:
        since = deferred.mark(out)
        fn(_r(out, ranges), *[_r(a, ranges) for a in args], **{k: _r(v, ranges) for k, v in kwargs.items()})
        deferred.remember(out, since, lambda m: _emit(fn, out, m, *args, **kwargs))
        return out
    args = [deferred.under(a, mask) for a in args]
    kwargs = {k: deferred.under(v, mask) for k, v in kwargs.items()}
    fn(_r(out, ranges), *[_r(a, ranges) for a in args], **{k: _r(v, ranges) for k, v in kwargs.items()})
    return out


def _free(t) -> int:
    return t.size // max(1, t.shape[0])


def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              tile_position=(), tile_size=(), perf_mode=None, mask=None, **kwargs):
    """stationary[K, M].T @ moving[K, N] into a new fp32 PSUM tile [M, N] (accumulate with ``+=``);
    ``perf_mode="double_row_gen3"``: fp8 operands [K, 2, M] and [K, 2, N] contracted over 2K rows."""
    pair = 2 if perf_mode is not None and _nisa._cmd(perf_mode) in ("double_row", "double_row_gen3") else 1
    out = _nl.ndarray((_free(stationary) // pair, _free(moving) // pair), np.float32, buffer=_nl.psum,
                      name="matmul")
    extra = {"perf_mode": perf_mode} if perf_mode is not None else {}
    return _emit(_nisa.nc_matmul, out, mask, stationary, moving, is_stationary_onezero=is_stationary_onezero,
                 is_moving_onezero=is_moving_onezero, is_transpose=is_transpose, accumulate=False,
                 tile_position=tile_position, tile_size=tile_size, **extra)


def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """data[P, F] transposed into a new tile [F, P] (PSUM on the Tensor Engine, SBUF on the Vector)."""
    p, f = data.shape[0], _free(data)
    vec = engine == _nisa.engine.vector or (engine in (None, _nisa.engine.unknown) and max(p, f) <= 32)
    out = _new((f, p), dtype if dtype is not None else (data.dtype if vec else np.float32), data,
               buffer=_nl.sbuf if vec else _nl.psum, name="transpose")
    return _emit(_nisa.nc_transpose, out, mask, data, engine=_nisa.engine.vector if vec else _nisa.engine.tensor)


def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               mask=None, dtype=None, **kwargs):
    """op(data * scale + bias) on the Scalar Engine into a new tile."""
    out = _new(data.shape, dtype, data, name="activation")
    cmd = reduce_cmd if reduce_res is None or reduce_cmd != _nisa.reduce_cmd.idle else _nisa.reduce_cmd.reset_reduce
    return _emit(_nisa.activation, out, mask, op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                 reduce_res=reduce_res, reduce_cmd=cmd)


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    """activation with the result also reduced into ``reduce_res`` [P, 1]."""
    out = _new(data.shape, dtype, data, name="activation")
    return _emit(_nisa.activation_reduce, out, mask, op, data, reduce_op, reduce_res, bias=bias, scale=scale)


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    """reduce(op) of data along free ``axis`` into a new tile."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % data.ndim for a in axes)
    shape = tuple(1 if i in axes else s for i, s in enumerate(data.shape)) if keepdims else \
        tuple(s for i, s in enumerate(data.shape) if i not in axes)
    out = _new(shape, dtype, data, name="reduce")
    ranges = _ranges(mask)
    data = deferred.under(data, mask)
    _nisa.tensor_reduce(out, op, _r(data, ranges), axis=list(axes), negate=negate, keepdims=keepdims)
    return out


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    """reduce(op) of data[P, F] across partitions into a new tile [1, F]."""
    out = _new((1,) + tuple(data.shape[1:]), dtype, data, name="partition_reduce")
    return _emit(_nisa.tensor_partition_reduce, out, mask, op, data)


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=engine.unknown, **kwargs):
    """data1 <op> data2 elementwise into a new tile."""
    out = _new(data1.shape, dtype, data1, data2, name="tensor_tensor")
    return _emit(_nisa.tensor_tensor, out, mask, data1, data2, op, engine=engine)


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None,
                       mask=None, **kwargs):
    """The scan dst[:, i] = op1(op0(data0[:, i], dst[:, i-1]), data1[:, i]) into a new tile."""
    out = _new(data0.shape, dtype, data0, data1, name="scan")
    return _emit(_nisa.tensor_tensor_scan, out, mask, data0, data1, initial, op0, op1, reverse0=reverse0,
                 reverse1=reverse1)


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                         mask=None, **kwargs):
    """(data <op0> operand0) <op1> operand1 into a new tile."""
    out = _new(data.shape, dtype, data, operand1, name="stt")
    return _emit(_nisa.scalar_tensor_tensor, out, mask, data, op0, operand0, op1, operand1, reverse0=reverse0,
                 reverse1=reverse1)


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                  mask=None, engine=engine.unknown, **kwargs):
    """(data <op0> operand0) <op1> operand1 with number or [P, 1] operands into a new tile."""
    out = _new(data.shape, dtype, data, name="tensor_scalar")
    return _emit(_nisa.tensor_scalar, out, mask, data, op0, operand0, reverse0=reverse0, op1=op1,
                 operand1=operand1, reverse1=reverse1, engine=engine)


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None,
                         **kwargs):
    """data <op0> operand0 into a new tile, reduced with reduce_op into ``reduce_res`` [P, 1]."""
    out = _new(data.shape, dtype, data, name="tensor_scalar_reduce")
    return _emit(_nisa.tensor_scalar_reduce, out, mask, data, op0, operand0, reduce_op, reduce_res=reduce_res,
                 reverse0=reverse0)


def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=reduce_cmd.reset_reduce, *, mask=None,
                             **kwargs):
    """dst = the running op1-accumulation of op0(src, imm0) along the free axis, in place (dst is given
    in this dialect too); see ``nki.isa.tensor_scalar_cumulative``."""
    return _emit(_nisa.tensor_scalar_cumulative, dst, mask, src, op0, op1, imm0, imm1=imm1, reduce_cmd=reduce_cmd)


def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """A copy of ``src`` in a new SBUF tile."""
    out = _new(src.shape, dtype if dtype is not None else src.dtype, name="copy")
    return _emit(_nisa.tensor_copy, out, mask, src, engine=engine)


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None, **kwargs):
    """dst = src where predicate, in place."""
    _emit(_nisa.tensor_copy_predicated, dst, mask, src, predicate, reverse_pred=reverse_pred)


def reciprocal(data, *, dtype=None, mask=None, **kwargs):
    """1 / data into a new tile."""
    return _emit(_nisa.reciprocal, _new(data.shape, dtype, data, name="reciprocal"), mask, data)


def _affine_pattern(expr: AffineExpr):
    """(pattern, offset, channel_multiplier) of an index expression over a [P, F...] grid."""
    shape = expr.shape
    pattern = [[expr.coefs.get(a, 0), n] for a, n in enumerate(shape) if a > 0]
    return pattern or [[0, 1]], expr.const, expr.coefs.get(0, 0)


def iota(expr, dtype, *, mask=None, **kwargs):
    """A new tile holding the values of index expression ``expr`` (e.g. ``i_p * 2 + i_f``)."""
    if not isinstance(expr, AffineExpr):
        raise TypeError(f"iota takes an index expression of nl.arange/nl.mgrid, got {expr!r}")
    pattern, offset, cm = _affine_pattern(expr)
    out = _nl.ndarray(expr.shape, dtype, buffer=_nl.sbuf, name="iota")
    return _emit(_nisa.iota, out, mask, pattern, offset=offset, channel_multiplier=cm)


_CMP_OPS = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal",
            "ne": "not_equal"}


def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs):
    """on_true_tile where the index predicate holds, else ``on_false_value`` (e.g. a causal mask)."""
    if not isinstance(pred, Predicate) or len(pred.terms) != 1:
        raise TypeError("affine_select takes one comparison of index expressions, e.g. (i_p - i_f >= 0)")
    expr, op = pred.terms[0]
    try:
        expr = expr + AffineExpr(on_true_tile.shape, {}, 0)   # the grid of the tile
    except ValueError:
        raise _nisa._refuse("shape-mismatch", f"affine_select: the predicate's index grid {expr.shape} does not "
                           f"broadcast to on_true_tile's shape {tuple(on_true_tile.shape)}", "on_true_tile",
                           on_true_tile) from None
    pattern, offset, cm = _affine_pattern(expr)
    out = _new(on_true_tile.shape, dtype, on_true_tile, name="affine_select")
    return _emit(_nisa.affine_select, out, mask, pattern, cm, on_true_tile, on_false_value,
                 cmp_op=_CMP_OPS[op], offset=offset)


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.idle, reduce_res=None,
                 reduce_op=np.amax, range_start=0, on_false_value=0.0, mask=None, dtype=None, **kwargs):
    """on_true_tile where comp_op0(i, bound0) and comp_op1(i, bound1) for free index i, else on_false_value."""
    out = _new(on_true_tile.shape, dtype, on_true_tile, name="range_select")
    return _emit(_nisa.range_select, out, mask, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=reduce_cmd, reduce_res=reduce_res, reduce_op=reduce_op, range_start=range_start,
                 on_false_value=on_false_value)


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=np.amax, reverse_pred=False, mask=None, dtype=None, **kwargs):
    """dst = on_true where predicate else on_false (in place), optionally reduced into reduce_res."""
    _emit(_nisa.select_reduce, dst, mask, predicate, on_true, on_false, reduce_res=reduce_res,
          reduce_cmd=reduce_cmd, reduce_op=reduce_op, reverse_pred=reverse_pred)
    return dst


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, **kwargs):
    """A new tile of ``shape`` filled with ``value``."""
    out = _nl.ndarray(tuple(shape), dtype, buffer=_nl.sbuf, name="memset")
    return _emit(_nisa.memset, out, mask, value, engine=engine)


def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    """bn_stats of data [P, F<=512] into a new tile [P, 6]."""
    return _emit(_nisa.bn_stats, _new((data.shape[0], 6), dtype, data, name="bn_stats"), mask, data)


def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    """(mean, variance) from bn_stats results into a new tile [P, 2]."""
    return _emit(_nisa.bn_aggr, _new((data.shape[0], 2), dtype, data, name="bn_aggr"), mask, data)


def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown):
    """dst = src through a DMA queue; ``dst_rmw_op=np.add`` adds into dst; one side may be indexed by a
    tile of indices (``t[idx_tile, i_f]``), its out-of-bounds rows handled by ``oob_mode``."""
    ranges = _ranges(mask)
    _nisa.dma_copy(dst=_r(dst, ranges), src=_r(src, ranges), oob_mode=oob_mode, dge_mode=dge_mode,
                   dst_rmw_op=dst_rmw_op)


def dma_transpose(src, *, axes=None, mask=None, dtype=None, **kwargs):
    """src with its axes permuted (default: [1, 0], [2, 1, 0] or [3, 1, 2, 0] by rank) into a new SBUF
    tile, through DMA."""
    from nkihub.simulator.isa.partition import default_transpose_axes
    order = list(axes) if axes else default_transpose_axes(src.ndim)
    out = _nl.ndarray(tuple(src.shape[a] for a in order), dtype or src.dtype, buffer=_nl.sbuf, name="dma_t")
    return _emit(partial(transpose_in, "neuronxcc"), out, mask, src, axes=axes, dge_mode=kwargs.get("dge_mode"))


def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    """data with elements zeroed with probability ``prob`` into a new tile."""
    return _emit(_nisa.dropout, _new(data.shape, dtype, data, name="dropout"), mask, data, prob)


def max8(*, src, mask=None, dtype=None, **kwargs):
    """The 8 largest values per partition into a new tile [P, 8]."""
    return _emit(_nisa.max8, _new((src.shape[0], 8), dtype, src, name="max8"), mask, src)


def nc_find_index8(*, data, vals, mask=None, dtype=np.uint32, **kwargs):
    """Indices of vals [P, 8] in data into a new uint32 tile [P, 8]."""
    out = _nl.ndarray((data.shape[0], 8), dtype or np.uint32, buffer=_nl.sbuf, name="find_index8")
    return _emit(_nisa.nc_find_index8, out, mask, data, vals)


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    """data with the first match of each vals[p, k] replaced by ``imm``, into a new tile."""
    out = _new(data.shape, dtype, data, name="match_replace8")
    return _emit(_nisa.nc_match_replace8, out, mask, data, vals, imm, dst_idx=dst_idx)


def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs):
    """Cross-partition shuffle within 32-partition quadrants, into ``dst`` in place."""
    _emit(_nisa.nc_stream_shuffle, dst, mask, src, shuffle_mask)

from nkihub.nki.compat.extra import (builtin_custom_op, local_gather, sequence_bounds, tensor_copy_dynamic_dst,  # noqa: E402,F401
                              tensor_copy_dynamic_src)

from nkihub.nki.compat import masks as _masks  # noqa: E402

_masks.wrap_module(globals())   # mask=True / mask=False constants

from nkihub.nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("neuronxcc.nki.isa")  # AWS NKI names not simulated: a clear error
