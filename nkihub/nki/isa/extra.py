"""More ``nki.isa`` instructions (AWS NKI 0.3+ signatures, destination first): scans, fused Vector
operations, selection, top-8, cross-partition movement, gathers, random numbers.

Each emits one instruction of the simulator's table and returns ``dst``.
"""
from __future__ import annotations

import numpy as np

from nkihub.nki import tracing
from nkihub.nki.isa import _cmd, _engine, _scalar_or_tile, _tile, emit, engine, oob_mode, reduce_cmd, _refuse
from nkihub.nki.ops import op_name
from nkihub.nki.tensor import NkiTensor
from nkihub.simulator.errors import KernelRuleError


def _reduce(dsts: dict, attrs: dict, reduce_res, reduce_op, cmd) -> None:
    if reduce_res is not None:
        dsts["reduce_res"] = _tile(reduce_res, "reduce_res")
        attrs["reduce_op"] = op_name(reduce_op) if reduce_op is not None else "add"
        attrs["reduce_cmd"] = _cmd(cmd)


def _vector_reduce(dsts: dict, srcs: dict, attrs: dict, dst, reduce_res, reduce_op, cmd) -> None:
    """The reduction of a Vector Engine instruction through the engine's accumulator registers (the
    reduce_cmd page): ``reset_reduce`` starts them from this result, ``reduce`` folds this result into
    what the previous accumulating instruction left there; ``reduce_res`` [P, 1], when given, receives
    them. ``idle`` with a ``reduce_res`` just reduces this result into it."""
    from nkihub.nki.isa.state import _vector_accumulator
    cmd = _cmd(cmd)
    if cmd == "idle":
        _reduce(dsts, attrs, reduce_res, reduce_op, cmd)
        return
    if reduce_res is not None:
        dsts["reduce_res"] = _tile(reduce_res, "reduce_res")
    attrs["reduce_op"] = op_name(reduce_op) if reduce_op is not None else "add"
    attrs["reduce_cmd"] = cmd
    acc = _vector_accumulator(dst)
    dsts["acc"] = acc
    if cmd == "reduce":
        srcs["acc"] = acc


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
        raise _refuse("unsupported-argument", "tensor_scalar_reduce: reduce_init and reduce_res_negate are not "
                     "supported")
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
    _vector_reduce(dsts, src, attrs, dst, reduce_res, reduce_op, reduce_cmd)
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
    _vector_reduce(dsts, src, attrs, dst, reduce_res, reduce_op, reduce_cmd)
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


def topk(val_dst, idx_dst, src, n, sorted=False, name=None):  # noqa: A002 (NKI's parameter name)
    """The k largest values of each 16-partition group of bf16 ``src`` and their indices (GpSimd Engine).

    A group's data is a snake: slot s is partition s % 16, free position s // 16; the first ``n`` slots
    count. k is the free size of ``val_dst`` [P, k] (bf16); result j lands at partition j % 16, position
    j // 16 of ``val_dst`` and of ``idx_dst`` [P, k] (uint32 slot indices). Order of the k results (not
    fixed by the API pages, which nki-library does not rely on): ascending values, or descending with
    ``sorted=True``; equal values lowest slot first. Returns ``val_dst``.
    """
    _tile(val_dst, "val_dst"), _tile(idx_dst, "idx_dst"), _tile(src, "src")
    emit("topk", "gpsimd", {"val_dst": val_dst, "idx_dst": idx_dst}, {"src": src},
         {"n": int(n), "sorted": bool(sorted)})
    return val_dst


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


_DGE_MODES = ("unknown", "swdge", "hwdge", "none")   # nki.isa.dge_mode by its AWS enum value


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None, name=None):
    """dst = src with its axes permuted (default reversed) through a DMA queue. A gathering ``src`` (an
    indirect view, e.g. rows picked by an index tile) is gathered into an HBM staging tensor first: the
    same values, one more DMA pass in the cost model than the hardware's fused descriptors."""
    return transpose_in("nki", dst, src, axes=axes, dge_mode=dge_mode, oob_mode=oob_mode)


def transpose_in(dialect: str, dst, src, axes=None, dge_mode=None, oob_mode=None):
    """``nisa.dma_transpose`` as the ``dialect`` ("nki" or "neuronxcc") calls it. A transpose of a
    vector-offset view records its gather (attr ``gather``: the index tile's shape, dtype and buffer, the
    table's buffer) and the dialect (attr ``dialect``): the current page's indirect limits are the row's
    ``transpose-swdge`` rule; the 2.2x page states none."""
    _tile(dst, "dst"), _tile(src, "src")
    attrs = {"axes": list(axes) if axes else None}
    # AWS's enum values (0..3) are accepted as nki-library passes them (dge_mode=3 for none).
    mode = _DGE_MODES[dge_mode] if isinstance(dge_mode, int) and dge_mode in range(4) else \
        (None if dge_mode is None else _cmd(dge_mode))
    if mode not in (None, "unknown"):   # checked by the row (the modes a transpose takes)
        attrs.update(dge_mode=mode, indirect=src.indirect is not None)
    if src.indirect is not None:
        from nkihub.nki import indirect
        if src.indirect.mode == "vector":
            idx = src.indirect.offsets
            attrs.update(dialect=dialect, gather={"indices": list(idx.shape), "indices_dtype": str(idx.spec.dtype),
                                                  "indices_buffer": idx.buffer, "table_buffer": src.buffer})
        src = indirect.staged(src, "nisa.dma_transpose", "error" if oob_mode is None else _cmd(oob_mode))
    emit("dma_transpose", "dma", {"dst": dst}, {"src": src}, attrs)
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
    """Fill an integer dst with random bits (Vector, or GpSimd on NeuronCore-v3+); the row refuses a float dst."""
    _tile(dst, "dst")
    emit("rand", _engine(engine, "vector"), {"dst": dst}, {}, {"bits": True})
    return dst


def _accumulator(dsts: dict, srcs: dict, attrs: dict, reduce_res, cmd, fn: str) -> None:
    # The accumulator is read out only through reduce_res; with idle it would hold an unknown state.
    if reduce_res is None:
        return
    attrs["reduce_cmd"] = _cmd(cmd)
    if attrs["reduce_cmd"] == "idle":
        raise _refuse("reduce-cmd", f"{fn}: reduce_res needs a reduce_cmd other than idle (idle leaves the "
                     "accumulator unset); pass reduce_cmd=nisa.reduce_cmd.reset_reduce", "reduce_res", reduce_res)
    dsts["reduce_res"] = _tile(reduce_res, "reduce_res")
    if attrs["reduce_cmd"] == "reduce":
        srcs["reduce_res"] = reduce_res  # continuing the accumulation reads its current value


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle, reduce_init=0.0, name=None):
    """dst = exp(src - max_value) in fp32 (Vector Engine, NeuronCore-v4 / trn3+). ``max_value``: a number
    or a [P, 1] tile. With ``reduce_res`` [P, 1] the per-partition sum of dst is accumulated per
    ``reduce_cmd`` (reset_reduce, reduce onto reduce_res, load_reduce from ``reduce_init``: a number or
    [P, 1] tile) and written to reduce_res."""
    _tile(dst, "dst"), _tile(src, "src")
    srcs, attrs, dsts = {"src": src}, {}, {"dst": dst}
    _scalar_or_tile(max_value, "max_value", srcs, attrs)
    cmd = _cmd(reduce_cmd)
    if cmd != "load_reduce" and not (isinstance(reduce_init, (int, float)) and reduce_init == 0):
        raise _refuse("reduce-cmd", "exponential: reduce_init must be unset or 0.0 unless reduce_cmd is "
                     "load_reduce", "reduce_init", reduce_init)
    if cmd == "load_reduce":
        _scalar_or_tile(reduce_init, "reduce_init", srcs, attrs)
    _accumulator(dsts, srcs, attrs, reduce_res, reduce_cmd, "exponential")
    emit("exponential", "vector", dsts, srcs, attrs)
    return dst


def _alu_or_bypass(op) -> str:
    return "bypass" if op is None else op_name(op)


def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False,
              reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle, name=None):
    """dst = op((data <op0> imm0) <op1> imm1) on the Scalar Engine (NeuronCore-v4 / trn3+).

    (op0, op1) is one of (multiply, add), (multiply, subtract), (multiply, bypass), (add, bypass),
    (subtract, bypass), (bypass, bypass); ``None`` or ``"bypass"`` means bypass. ``imm0``/``imm1``:
    numbers or [P, 1] tiles; ``reverse`` puts the immediate on the left. ``relu_param`` (number or
    [P, 1] tile) is the negative slope of ``op="prelu"``. With ``reduce_res`` [P, 1] the accumulator
    folds dst with ``reduce_op`` (add (default), maximum, minimum, abs_max, abs_min) per ``reduce_cmd``
    (reset_reduce, reduce onto reduce_res, reset) and is written to reduce_res.
    """
    _tile(dst, "dst"), _tile(data, "data")
    srcs, dsts = {"data": data}, {"dst": dst}
    attrs = {"op": op if isinstance(op, str) else op_name(op), "op0": _alu_or_bypass(op0),
             "op1": _alu_or_bypass(op1), "reverse0": bool(reverse0), "reverse1": bool(reverse1)}
    _scalar_or_tile(imm0, "imm0", srcs, attrs)
    _scalar_or_tile(imm1, "imm1", srcs, attrs)
    _scalar_or_tile(relu_param, "relu_param", srcs, attrs)
    if reduce_res is not None:
        attrs["reduce_op"] = op_name(reduce_op) if reduce_op is not None else "add"
    _accumulator(dsts, srcs, attrs, reduce_res, reduce_cmd, "activate2")
    emit("activate2", "scalar", dsts, srcs, attrs)
    return dst


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """GpSimd gather per core of 16 partitions: the core's uint16 ``index`` slice is flattened
    partition-first (first ``num_valid_indices`` kept, default all) and every partition p of the core
    gets dst[p, j*E:(j+1)*E] = src_buffer[p, idx[j]:idx[j]+E] (free axes flattened; E =
    ``num_elem_per_idx`` in {1, 2, 4, 8, 16, 32}; indices are element offsets). dst has src_buffer's
    dtype and num_valid_indices * E elements per partition; partitions are a multiple of 16."""
    _tile(dst, "dst"), _tile(src_buffer, "src_buffer"), _tile(index, "index")
    attrs = {"num_elem_per_idx": int(num_elem_per_idx)}
    if num_valid_indices is not None:
        attrs["num_valid_indices"] = int(num_valid_indices)
    emit("local_gather", "gpsimd", {"dst": dst}, {"src_buffer": src_buffer, "index": index}, attrs)
    return dst


def sequence_bounds(dst, segment_ids, name=None):
    """dst[1, 2, n]: for each element i of segment_ids[1, n], the start and end (exclusive) index of the
    run of equal ids holding it; padding ids (0) get start n and end -1. float32 or int32 (GpSimd)."""
    _tile(dst, "dst"), _tile(segment_ids, "segment_ids")
    emit("sequence_bounds", "gpsimd", {"dst": dst}, {"segment_ids": segment_ids})
    return dst


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """GpSimd (NeuronCore-v3+), on partitions 0, 16, 32, ... only (each GpSimd core reads and writes its
    first partition; dst's other partitions keep their contents): with src's T free elements flattened,
    dst[p, :N] = positions of the N nonzero elements + ``index_offset``, dst[p, N:T] = ``padding_val``,
    dst[p, T] = N. dst has T + 1 elements per partition."""
    _tile(dst, "dst"), _tile(src, "src")
    step = _CORE_PARTITIONS
    emit("nonzero_with_count", "gpsimd", {"dst": dst[0:dst.shape[0]:step]}, {"src": src[0:src.shape[0]:step]},
         {"index_offset": _immediate(index_offset), "padding_val": _immediate(padding_val)})
    return dst


def _immediate(value):
    """An immediate attribute as the author gave it (an int, a float, a bool), numpy scalars as Python ones,
    anything else by its repr, so a row rule can refuse what the page does not allow."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    return repr(value)


_CORE_PARTITIONS = 16   # each GpSimd core serves 16 contiguous partitions


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=oob_mode.error, name=None):
    """dst = srcs[0] * scales[0] + srcs[1] * scales[1] + ... in fp32 on a DMA queue (HBM or SBUF
    tensors of equal element counts, 1 to 16 sources). The hardware supports only ``reduce_op=nl.add``
    and scales of 1.0 (default). A source may be a gathering indirect view (``t.ap(...,
    vector_offset=...)``, see ``nki.indirect.staged``), its out-of-bounds rows handled by ``oob_mode``.
    ``unique_indices`` applies to vector_offset read-modify-write destinations, which nkihub does not
    trace (such a ``dst`` is refused)."""
    _tile(dst, "dst")
    if isinstance(srcs, NkiTensor) or not srcs:
        from nkihub.simulator.isa.dma_compute import SOURCES
        raise KernelRuleError(SOURCES.rule, f"dma_compute: srcs is a list of 1 to 16 tensors (source: "
                              f"{SOURCES.source})", operand="srcs", loc=tracing.caller_loc())
    if any(isinstance(t, NkiTensor) and t.indirect is not None for t in srcs):
        from nkihub.nki import indirect
        srcs = [indirect.staged(t, "nisa.dma_compute", _cmd(oob_mode))
                if isinstance(t, NkiTensor) and t.indirect is not None else t for t in srcs]
    src = {f"src{i}": _tile(t, f"srcs[{i}]") for i, t in enumerate(srcs)}
    attrs = {"reduce_op": op_name(reduce_op)}
    if scales is not None:
        attrs["scales"] = [float(s) for s in scales]
    emit("dma_compute", "dma", {"dst": dst}, src, attrs)
    return dst


def set_rng_seed(src_seeds, name=None):
    """Seed the random generator from the values of tile ``src_seeds`` (or a number)."""
    if isinstance(src_seeds, NkiTensor):
        emit("set_rng_seed", "vector", {}, {"src_seeds": src_seeds})
    else:
        emit("set_rng_seed", "vector", {}, {}, {"seed": int(src_seeds)})
