"""More ``nki.isa`` instructions (AWS NKI 0.3+ signatures, destination first): scans, fused Vector
operations, selection, top-8, cross-partition movement, gathers, random numbers.

Each emits one instruction of the simulator's table and returns ``dst``.
"""
from __future__ import annotations

import numpy as np

from nki.isa import _cmd, _engine, _scalar_or_tile, _tile, emit, engine, reduce_cmd
from nki.ops import op_name
from nki.tensor import NkiTensor


def _reduce(dsts: dict, attrs: dict, reduce_res, reduce_op, cmd) -> None:
    if reduce_res is not None:
        dsts["reduce_res"] = _tile(reduce_res, "reduce_res")
        attrs["reduce_op"] = op_name(reduce_op) if reduce_op is not None else "add"
        attrs["reduce_cmd"] = _cmd(cmd)


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    """dst[:, i] = op1(op0(data0[:, i], dst[:, i-1]), data1[:, i]) along the free axis of [P, F] tiles,
    starting from ``initial`` (a number or a [P, 1] tile); fp32 math on the Vector Engine."""
    _tile(dst, "dst"), _tile(data0, "data0"), _tile(data1, "data1")
    src, attrs = {"data0": data0, "data1": data1}, {"op0": op_name(op0), "op1": op_name(op1),
                                                    "reverse0": bool(reverse0), "reverse1": bool(reverse1)}
    _scalar_or_tile(initial, "initial", src, attrs)
    emit("tensor_tensor_scan", "vector", {"dst": dst}, src, attrs)
    return dst


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    """dst = (data <op0> operand0) <op1> operand1: operand0 a number or [P, 1] tile, operand1 a tile."""
    _tile(dst, "dst"), _tile(data, "data"), _tile(operand1, "operand1")
    src = {"data": data, "operand1": operand1}
    attrs = {"op0": op_name(op0), "op1": op_name(op1), "reverse0": bool(reverse0), "reverse1": bool(reverse1)}
    _scalar_or_tile(operand0, "operand0", src, attrs)
    emit("scalar_tensor_tensor", "vector", {"dst": dst}, src, attrs)
    return dst


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, name=None):
    """dst = data <op0> operand0, and reduce_res [P, 1] = reduce(reduce_op) of dst along the free axes.
    ``reduce_init``/``reduce_res_negate`` are not supported (ValueError when set)."""
    if reduce_init is not None or reduce_res_negate:
        raise ValueError("tensor_scalar_reduce: reduce_init and reduce_res_negate are not supported")
    _tile(dst, "dst"), _tile(data, "data")
    src, attrs, dsts = {"data": data}, {"op0": op_name(op0), "reverse0": bool(reverse0)}, {"dst": dst}
    _scalar_or_tile(operand0, "operand0", src, attrs)
    _reduce(dsts, attrs, reduce_res, reduce_op, reduce_cmd)
    emit("tensor_scalar_reduce", "vector", dsts, src, attrs)
    return dst


def tensor_partition_reduce(dst, op, data, name=None):
    """dst[1, F] = reduce(op) of data[P, F] across partitions (GpSimd Engine)."""
    _tile(dst, "dst"), _tile(data, "data")
    emit("tensor_partition_reduce", "gpsimd", {"dst": dst}, {"data": data}, {"op": op_name(op)})
    return dst


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=np.amax, reverse_pred=False, name=None):
    """dst = on_true where predicate (!= 0) else on_false (a tile, [P, 1] tile or number); optionally
    reduced along the free axes into reduce_res [P, 1] (Vector Engine)."""
    _tile(dst, "dst"), _tile(predicate, "predicate"), _tile(on_true, "on_true")
    src, attrs, dsts = {"predicate": predicate, "on_true": on_true}, {"reverse_pred": bool(reverse_pred)}, \
        {"dst": dst}
    _scalar_or_tile(on_false, "on_false", src, attrs)
    _reduce(dsts, attrs, reduce_res, reduce_op, reduce_cmd)
    emit("select_reduce", "vector", dsts, src, attrs)
    return dst


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.reset_reduce,
                 reduce_res=None, reduce_op=np.amax, range_start=0.0, on_false_value=-3.4028235e+38, name=None):
    """dst = on_true_tile where comp_op0(i, bound0) and comp_op1(i, bound1) for free index
    i = range_start + j, else on_false_value; bounds are [P, 1] tiles or numbers (Vector Engine, v3+)."""
    _tile(dst, "dst"), _tile(on_true_tile, "on_true_tile")
    src = {"on_true_tile": on_true_tile}
    attrs = {"comp_op0": op_name(comp_op0), "comp_op1": op_name(comp_op1), "range_start": float(range_start),
             "on_false_value": float(on_false_value)}
    _scalar_or_tile(bound0, "bound0", src, attrs)
    _scalar_or_tile(bound1, "bound1", src, attrs)
    dsts = {"dst": dst}
    _reduce(dsts, attrs, reduce_res, reduce_op, reduce_cmd)
    emit("range_select", "vector", dsts, src, attrs)
    return dst


def max8(dst, src, name=None):
    """dst[P, 8] = the 8 largest values of each partition of src, descending (Vector Engine)."""
    _tile(dst, "dst"), _tile(src, "src")
    emit("max8", "vector", {"dst": dst}, {"src": src})
    return dst


def nc_find_index8(dst, data, vals, name=None):
    """dst[P, 8] = index of the first element of data[p] equal to vals[p, k] (Vector Engine)."""
    _tile(dst, "dst"), _tile(data, "data"), _tile(vals, "vals")
    emit("nc_find_index8", "vector", {"dst": dst}, {"data": data, "vals": vals})
    return dst


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """dst = data with the first match of each vals[p, k] replaced by ``imm``; indices into ``dst_idx``."""
    _tile(dst, "dst"), _tile(data, "data"), _tile(vals, "vals")
    dsts = {"dst": dst}
    if dst_idx is not None:
        dsts["dst_idx"] = _tile(dst_idx, "dst_idx")
    emit("nc_match_replace8", "vector", dsts, {"data": data, "vals": vals}, {"imm": float(imm)})
    return dst


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """Within each 32-partition quadrant, dst partition i = src partition shuffle_mask[i] (255: keep)."""
    _tile(dst, "dst"), _tile(src, "src")
    emit("nc_stream_shuffle", "vector", {"dst": dst}, {"src": src},
         {"shuffle_mask": [int(m) for m in shuffle_mask]})
    return dst


def nc_n_gather(dst, data, indices, name=None):
    """dst[p, j] = data[p, indices[p, j]] with data's free axes flattened (GpSimd Engine)."""
    _tile(dst, "dst"), _tile(data, "data"), _tile(indices, "indices")
    emit("nc_n_gather", "gpsimd", {"dst": dst}, {"data": data, "indices": indices})
    return dst


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None, name=None):
    """dst = src with its axes permuted (default reversed) through a DMA queue."""
    _tile(dst, "dst"), _tile(src, "src")
    emit("dma_transpose", "dma", {"dst": dst}, {"src": src}, {"axes": list(axes) if axes else None})
    return dst


def dropout(dst, data, prob, name=None):
    """dst = data with each element zeroed with probability ``prob`` (a number or [P, 1] tile); kept
    elements are not rescaled (Vector Engine)."""
    _tile(dst, "dst"), _tile(data, "data")
    src, attrs = {"data": data}, {}
    _scalar_or_tile(prob, "prob", src, attrs)
    emit("dropout", "vector", {"dst": dst}, src, attrs)
    return dst


def rng(dst, engine=engine.unknown, name=None):
    """Fill an integer dst with random bits (Vector or GpSimd Engine)."""
    _tile(dst, "dst")
    if np.dtype(dst.dtype).kind not in "iu":
        raise ValueError(f"rng: dst must be an integer tile, got {dst.dtype}")
    emit("rand", _engine(engine, "vector"), {"dst": dst}, {})
    return dst


def set_rng_seed(src_seeds, name=None):
    """Seed the random generator from the values of tile ``src_seeds`` (or a number)."""
    if isinstance(src_seeds, NkiTensor):
        emit("set_rng_seed", "vector", {}, {"src_seeds": src_seeds})
    else:
        emit("set_rng_seed", "vector", {}, {}, {"seed": int(src_seeds)})
