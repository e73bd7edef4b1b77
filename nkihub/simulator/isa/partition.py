"""Cross-partition instructions: tensor_partition_reduce (GpSimd), nc_stream_shuffle (Vector) and
dma_transpose (DMA), nc_n_gather (GpSimd, within partitions)."""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa import alu
from nkihub.simulator.isa.base import CROSS_PARTITION, DMA, ELEMENTWISE, REDUCE, f32, free_elems, register, store
from nkihub.simulator.isa.dma import DMA_BUFFER, DMA_PARTITIONS, DMA_SIZE, _dma_cost, _dma_rules
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


documents(Documented("shape-mismatch", ("dst",), None, "dst is one partition of data's free size"),
          Documented("reduce-op", ("data",), None, "op is add, max, bitwise_or or bitwise_and"))(_pr_rules)


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


documents(Documented("shuffle-mask", ("src",), None, "shuffle_mask is 32 partition numbers in 0..31 or 255, "
                     "each naming a partition src has"),
          Documented("shape-mismatch", ("src",), None, "src and dst hold the same elements per partition"),
          Documented("dtype-mismatch", ("src",), None, "src and dst have the same dtype"))(_shuffle_rules)


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


TRANSPOSE_AXES = Documented("transpose-axes", ("src",), "nki.isa.dma_transpose",
                            "axes is one of the supported (1, 0), (2, 1, 0), (3, 1, 2, 0), for a src of that rank")
TRANSPOSE_SHAPE = Documented("transpose-shape", ("dst",), "nki.isa.dma_transpose",
                             "dst has src's shape permuted by axes (default [1, 0], [2, 1, 0], [3, 1, 2, 0])")


# The page: "The only valid dge_modes are unknown and hwdge" (direct), "unknown and swdge" (indirect);
# nki-library's published TKG kernels pass dge_mode=none (3) to direct transposes, so none is kept.
TRANSPOSE_DGE = Documented("transpose-dge-mode", ("src",), "nki.isa.dma_transpose",
                           "a direct transpose takes dge_mode unknown or hwdge (or none), an indirect one unknown "
                           "or swdge")
TRANSPOSE_HWDGE = Documented("transpose-hwdge", ("src",), "nki.isa.dma_transpose",
                             "with dge_mode=hwdge (NeuronCore-v3 and newer): src.shape[0] == 16 for 2-d, in "
                             "{1, 2, 4, 8, 16} with src.shape[0] * src.shape[-2] % 16 == 0 for 3-d/4-d; "
                             "src.shape[-1] <= 128; a 2-byte dtype")
HWDGE_ROWS = (1, 2, 4, 8, 16)
# The current page's "DMA Indirect Transpose Constraints" (a transpose of a vector_offset view, lowered to a
# software-DGE gather-transpose). The 2.2x page states none, so the old dialect's transposes are not held to them.
# The table in HBM and the indices in SBUF are the staged gather's rules (indirect-table-buffer,
# indirect-offsets-buffer), checked first.
TRANSPOSE_SWDGE = Documented("transpose-swdge", ("src",), "nki.isa.dma_transpose",
                             "an indirect transpose (current dialect): NeuronCore-v3 and newer; src.shape[-1] <= "
                             "128, a 2-byte dtype, src.shape[0] a multiple of 16, a 4-d src with dim 1 or 2 of "
                             "size 1; uint32 indices, 2-d, of 16 to 128 rows in steps of 16 (exactly 128 with more "
                             "than one column), at least src.shape[0] of them")


def _indirect_limits(ins, program, target) -> str | None:
    """Why a current-dialect transpose of a vector_offset view breaks the page's indirect limits, or None
    (attrs ``gather``: the index tile's shape, dtype, buffer; ``dialect``)."""
    g = ins.attrs.get("gather")
    if g is None or ins.attrs.get("dialect") != "nki":
        return None
    shape, spec, idx = tuple(ins.src["src"].shape), program.tensor_of(ins.src["src"]), tuple(g["indices"])
    if target.nc_version == "gen2":
        return f"an indirect transpose needs NeuronCore-v3 or newer, not {target.name}"
    if shape[-1] > 128:
        return f"src.shape[-1] = {shape[-1]}; at most 128"
    if spec.np_dtype.itemsize != 2:
        return f"src is {spec.dtype}; an indirect transpose moves 2-byte dtypes"
    if shape[0] % 16:
        return f"src.shape[0] = {shape[0]} must be a multiple of 16"
    if len(shape) == 4 and 1 not in shape[1:3]:
        return f"a 4-d src {shape} needs src.shape[1] or src.shape[2] of 1"
    if g["indices_dtype"] != "uint32":
        return f"the indices are {g['indices_dtype']}; uint32 is required"
    if len(idx) != 2:
        return f"the indices are {len(idx)}-d {idx}; 2-d is required"
    if not 16 <= idx[0] <= 128 or idx[0] % 16:
        return f"the indices have {idx[0]} rows; 16 to 128, a multiple of 16"
    if idx[1] > 1 and idx[0] != 128:
        return f"indices {idx} with more than one column need exactly 128 rows"
    if idx[0] * idx[1] < shape[0]:
        return f"{idx[0] * idx[1]} indices for src.shape[0] = {shape[0]} rows"
    return None


def _transpose_dge(ins, program, target) -> None:
    """The indirect (software-DGE) limits, the DGE modes of dma_transpose and the hardware-DGE limits (attrs
    ``gather``, ``dialect``, ``dge_mode``, ``indirect``)."""
    mode = ins.attrs.get("dge_mode")
    why = _indirect_limits(ins, program, target)
    if why:
        raise TRANSPOSE_SWDGE.fail(why, ins, program, "src")
    if mode is None:
        return
    allowed = ("swdge",) if ins.attrs.get("indirect") else ("hwdge", "none")
    if mode not in allowed:
        raise TRANSPOSE_DGE.fail(f"dge_mode {mode}: a{'n indirect' if ins.attrs.get('indirect') else ' direct'} "
                                 f"transpose takes unknown or {' or '.join(allowed)}", ins, program, "src")
    if mode != "hwdge":
        return
    s = ins.src["src"]
    shape, spec = tuple(s.shape), program.tensor_of(s)
    why = None
    if target.nc_version == "gen2":
        why = f"hardware DGE needs NeuronCore-v3 or newer, not {target.name}"
    elif len(shape) == 2 and shape[0] != 16:
        why = f"a 2-d src has {shape[0]} rows; hardware DGE takes 16"
    elif len(shape) > 2 and (shape[0] not in HWDGE_ROWS or shape[0] * shape[-2] % 16):
        why = (f"src.shape[0] = {shape[0]} must be one of {HWDGE_ROWS} with src.shape[0] * src.shape[-2] a "
               "multiple of 16")
    elif shape[-1] > 128:
        why = f"src.shape[-1] = {shape[-1]}; at most 128"
    elif spec.np_dtype.itemsize != 2:
        why = f"src is {spec.dtype}; hardware DGE transposes 2-byte dtypes"
    if why:
        raise TRANSPOSE_HWDGE.fail(f"dge_mode=hwdge: {why}", ins, program, "src")


@documents(DMA_BUFFER, DMA_SIZE, DMA_PARTITIONS, TRANSPOSE_AXES, TRANSPOSE_SHAPE, TRANSPOSE_DGE, TRANSPOSE_HWDGE,
           TRANSPOSE_SWDGE)
def _dma_transpose_rules(ins, program, target):
    """Supported axes, the DMA rules, the DGE modes, and dst's permuted shape."""
    s, d = ins.src["src"], ins.dst["dst"]
    axes = ins.attrs.get("axes") or default_transpose_axes(len(s.shape))
    if len(s.shape) not in (2, 3, 4) or list(axes) != default_transpose_axes(len(s.shape)):
        raise TRANSPOSE_AXES.fail(f"axes {tuple(axes)} for a {len(s.shape)}-d src; the supported axes are (1, 0), "
                                  "(2, 1, 0) and (3, 1, 2, 0)", ins, program, "src")
    _dma_rules(ins, program, target)
    _transpose_dge(ins, program, target)
    if tuple(s.shape[a] for a in axes) != tuple(d.shape):
        raise TRANSPOSE_SHAPE.fail(f"dst must have shape {tuple(s.shape[a] for a in axes)}", ins, program, "dst")


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


documents(Documented("shape-mismatch", ("dst",), None, "dst holds as many elements per partition as indices"),
          Documented("index-dtype", ("indices",), None, "indices are an integer (uint32) tile"))(_n_gather_rules)


register("nc_n_gather", engines={"gpsimd"}, execute=_n_gather,
         cost=lambda ins, p, t: cr.seconds(cr.gpsimd_cycles(free_elems(ins.dst["dst"].shape)
                                                         * cr.stride_slowdown(ins, p)), t, "gpsimd"),
         rules=COMPUTE_RULES + (exact_partitions("dst", "data", "indices"), _n_gather_rules,
                                same_dtype("data", "dst")), categories={CROSS_PARTITION, ELEMENTWISE})
