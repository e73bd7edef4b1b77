"""Cross-partition instructions: tensor_partition_reduce (GpSimd), nc_stream_shuffle (Vector) and
dma_transpose (DMA), nc_n_gather (GpSimd, within partitions)."""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa import alu
from nkihub.simulator.isa.base import CROSS_PARTITION, DMA, ELEMENTWISE, REDUCE, f32, free_elems, register, store
from nkihub.simulator.isa.dma import _dma_cost, _dma_rules
from nkihub.simulator.rules import (COMPUTE_RULES, Documented, documents, exact_partitions, fail, partitions,
                                     same_dtype)
from nkihub.simulator.taint import CLEAN, per_partition

QUADRANT = 32          # nc_stream_shuffle moves data within groups of 32 partitions
SHUFFLE_SKIP = 255     # a mask entry that leaves the output partition unmodified
GPSIMD_CORES = 8       # GpSimd: eight cores, each serving 16 partitions (hardware.md)


def _partition_reduce(ins, src, dst, ctx):
    """dst[0, f] = reduce(op, data[:, f]) across the partitions of data."""
    x = f32(src["data"])
    store(dst["dst"], alu.reduce(ins.attrs["op"], x, axis=0, keepdims=True).reshape(dst["dst"].shape))


def _pr_rules(ins, program, target):
    d, s = ins.dst["dst"], ins.src["data"]
    if partitions(d) != 1 or d.size != s.size // max(1, partitions(s)):
        raise fail("shape-mismatch", f"dst must be one partition of {s.size // max(1, partitions(s))} "
                   "elements (the input's free size)", ins, program, "dst")
    try:
        alu.reduce_name(ins.attrs["op"])
    except ValueError as exc:
        raise fail("reduce-op", str(exc), ins, program, "data") from None


documents(_pr_rules,
          Documented("shape-mismatch", ("dst",), None, "dst is one partition of data's free size"),
          Documented("reduce-op", ("data",), None, "op is add, max, bitwise_or or bitwise_and"))


register("tensor_partition_reduce", engines={"gpsimd"}, execute=_partition_reduce,
         # The cores fold their partitions in parallel: elements / cores steps (estimate; not published).
         cost=lambda ins, p, t: cr.seconds(cr.gpsimd_cycles(ins.src["data"].size // GPSIMD_CORES
                                                         * cr.stride_slowdown(ins, p)), t, "gpsimd"),
         rules=COMPUTE_RULES + (_pr_rules,), categories={CROSS_PARTITION, REDUCE})


def _shuffle(ins, src, dst, ctx):
    """Within each 32-partition quadrant, dst partition i = src partition shuffle_mask[i] (255 leaves it
    unmodified); the same mask applies to every quadrant."""
    s, out = f32(src["src"]).reshape(src["src"].shape[0], -1), dst["dst"]
    res = f32(out).reshape(out.shape[0], -1).copy()
    mask = ins.attrs["shuffle_mask"]
    for q in range(0, out.shape[0], QUADRANT):
        for i, m in enumerate(mask):
            if m != SHUFFLE_SKIP and q + i < out.shape[0]:
                res[q + i] = s[q + m]
    store(out, res.reshape(out.shape))


def _shuffle_rules(ins, program, target):
    mask = ins.attrs["shuffle_mask"]
    if len(mask) != QUADRANT or any(not (0 <= m < QUADRANT or m == SHUFFLE_SKIP) for m in mask):
        raise fail("shuffle-mask", f"shuffle_mask holds {QUADRANT} partition numbers in 0..{QUADRANT - 1} "
                   f"(or {SHUFFLE_SKIP})", ins, program, "src")
    d, s = ins.dst["dst"], ins.src["src"]
    # Each dst quadrant q reads src partitions q + mask[i]: a narrower src (one partition broadcast, AWS's
    # test_broadcast_partition) is fine as long as every partition read exists.
    for q in range(0, partitions(d), QUADRANT):
        for i, m in enumerate(mask):
            if m != SHUFFLE_SKIP and q + i < partitions(d) and q + m >= partitions(s):
                raise fail("shuffle-mask", f"dst partition {q + i} reads src partition {q + m}, but src spans "
                           f"{partitions(s)} partitions", ins, program, "src")
    if d.size // max(1, partitions(d)) != s.size // max(1, partitions(s)):
        raise fail("shape-mismatch", "src and dst hold the same elements per partition", ins, program, "src")
    if program.tensor_of(d).dtype != program.tensor_of(s).dtype:
        raise fail("dtype-mismatch", "src and dst have the same dtype", ins, program, "src")


def _shuffle_taint(ins, role, t, dst):
    """Partition q + i of dst takes the taint of src partition q + mask[i], or keeps its own (mask 255)."""
    mask, per = ins.attrs["shuffle_mask"], per_partition(t)
    out = np.full(dst.shape[0], CLEAN, dtype=np.int32)
    for q in range(0, dst.shape[0], QUADRANT):
        for i, m in enumerate(mask):
            if q + i >= dst.shape[0]:
                break
            if role == "src" and m != SHUFFLE_SKIP and q + m < per.size:
                out[q + i] = per[q + m]
            elif role != "src" and m == SHUFFLE_SKIP:
                out[q + i] = per[q + i]
    return np.broadcast_to(out.reshape((-1,) + (1,) * (len(dst.shape) - 1)), dst.shape)


documents(_shuffle_rules,
          Documented("shuffle-mask", ("src",), None, "shuffle_mask is 32 partition numbers in 0..31 or 255, "
                     "each naming a partition src has"),
          Documented("shape-mismatch", ("src",), None, "src and dst hold the same elements per partition"),
          Documented("dtype-mismatch", ("src",), None, "src and dst have the same dtype"))


register("nc_stream_shuffle", engines={"vector"}, execute=_shuffle,
         cost=lambda ins, p, t: cr.seconds(cr.vector_cycles(free_elems(ins.src["src"].shape)
                                                         * cr.stride_slowdown(ins, p)), t, "vector"),
         rules=COMPUTE_RULES + (_shuffle_rules,), categories={CROSS_PARTITION, ELEMENTWISE},
         reads_dst=lambda ins: SHUFFLE_SKIP in ins.attrs["shuffle_mask"], taint=_shuffle_taint)


def default_transpose_axes(ndim: int) -> list[int]:
    """dma_transpose's permutation when ``axes`` is not given (the dma_transpose page): [1, 0] for 2-d,
    [2, 1, 0] for 3-d, [3, 1, 2, 0] for 4-d (the first and last dims swap, the middle two stay)."""
    return [3, 1, 2, 0] if ndim == 4 else list(reversed(range(ndim)))


def _dma_transpose(ins, src, dst, ctx):
    """dst = src with its axes permuted by ``axes`` (default: ``default_transpose_axes``), through a DMA
    queue."""
    s, out = src["src"], dst["dst"]
    axes = ins.attrs.get("axes") or default_transpose_axes(s.ndim)
    t = np.transpose(s, axes)
    if s.dtype == out.dtype:
        out[...] = t.reshape(out.shape)
    else:
        store(out, f32(t).reshape(out.shape))


def _dma_transpose_rules(ins, program, target):
    _dma_rules(ins, program, target)
    s, d = ins.src["src"], ins.dst["dst"]
    axes = ins.attrs.get("axes") or default_transpose_axes(len(s.shape))
    if sorted(axes) != list(range(len(s.shape))):
        raise fail("transpose-axes", f"axes {axes} is not a permutation of the src's {len(s.shape)} dims",
                   ins, program, "src")
    if tuple(s.shape[a] for a in axes) != tuple(d.shape):
        raise fail("transpose-shape", f"dst must have shape {tuple(s.shape[a] for a in axes)}", ins, program, "dst")


def _dma_transpose_cost(ins, program, target):
    """v3+ (the DMA engines transpose; ``Target.dge_instances``): ``cost_rules.dma_transpose_s`` of the bytes
    it writes, from HBM or from SBUF. The published rate is for hardware-friendly outputs (partitions a
    multiple of 128, innermost free size a multiple of 16); other shapes are slower by an amount not
    published, so their estimate is optimistic. v2: a copy's cost (``_dma_cost``)."""
    d, s = ins.dst["dst"], ins.src["src"]
    sd, ss = program.tensor_of(d), program.tensor_of(s)
    if target.dge_instances and sd.on_chip:
        return cr.dma_transpose_s(d.size * sd.np_dtype.itemsize, not ss.on_chip, target)
    return _dma_cost(ins, program, target)


register("dma_transpose", engines={"dma"}, execute=_dma_transpose,
         cost=_dma_transpose_cost, rules=(_dma_transpose_rules,), categories={CROSS_PARTITION, DMA})


def _n_gather(ins, src, dst, ctx):
    """dst[p, j] = data[p, indices[p, j]] with data's free axes flattened (GpSimd Engine)."""
    data, out = src["data"], dst["dst"]
    flat = data.reshape(data.shape[0], -1)
    idx = np.asarray(src["indices"]).reshape(data.shape[0], -1).astype(np.int64)
    res = np.take_along_axis(flat, np.clip(idx, 0, flat.shape[1] - 1), axis=1)
    out[...] = res.reshape(out.shape).astype(out.dtype, copy=False)


def _n_gather_rules(ins, program, target):
    d, i = ins.dst["dst"], ins.src["indices"]
    if d.size // max(1, partitions(d)) != i.size // max(1, partitions(i)):
        raise fail("shape-mismatch", "dst holds as many elements per partition as indices", ins, program, "dst")
    if program.tensor_of(i).dtype not in ("uint32", "int32", "uint16"):
        raise fail("index-dtype", "indices must be an integer tile (uint32)", ins, program, "indices")


documents(_n_gather_rules,
          Documented("shape-mismatch", ("dst",), None, "dst holds as many elements per partition as indices"),
          Documented("index-dtype", ("indices",), None, "indices are an integer (uint32) tile"))


register("nc_n_gather", engines={"gpsimd"}, execute=_n_gather,
         cost=lambda ins, p, t: cr.seconds(cr.gpsimd_cycles(free_elems(ins.dst["dst"].shape)
                                                         * cr.stride_slowdown(ins, p)), t, "gpsimd"),
         rules=COMPUTE_RULES + (exact_partitions("dst", "data", "indices"), _n_gather_rules,
                                same_dtype("data", "dst")), categories={CROSS_PARTITION, ELEMENTWISE})
