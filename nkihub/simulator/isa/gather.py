"""GpSimd index instructions: local_gather (a gather shared by the 16 partitions of each GpSimd core),
sequence_bounds (segment start/end per element) and nonzero_with_count (indices of nonzero elements and
their count, in the first partition of each GpSimd core).

Both follow the numpy references AWS publishes beside their docs (nki/test/test_nki_isa_local_gather.py,
the sequence_bounds API page and nki/test's sequence_bounds example).
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.isa.base import CROSS_PARTITION, ELEMENTWISE, f32, free_elems, register, store
from nkihub.simulator.rules import (COMPUTE_RULES, Documented, documents, partition_step, partitions,
                                  start_partition_rule, target_gate)

CORE_PARTITIONS = 16                     # each of the 8 GpSimd cores serves 16 contiguous partitions
GATHER_ELEMS_PER_IDX = (1, 2, 4, 8, 16, 32)
GATHER_MAX_INDICES = 4096                # indices per core


def _free(ap) -> int:
    return ap.size // max(1, partitions(ap))


def _num_valid(ins) -> int:
    n = ins.attrs.get("num_valid_indices")
    return CORE_PARTITIONS * _free(ins.src["index"]) if n is None else int(n)


# -- local_gather ---------------------------------------------------------------------------------------------
def _local_gather(ins, src, dst, ctx):
    """Per GpSimd core (16 partitions): indices = the core's index slice flattened partition-first
    (column-major), first ``num_valid_indices``; every partition p of the core gets
    dst[p, j*E:(j+1)*E] = src_buffer[p, idx[j]:idx[j]+E] (free axes flattened, E = num_elem_per_idx,
    indices are element offsets). Data is copied without casting. (The docs call the indices partition
    offsets; AWS's numpy reference gathers along the free axis as here.)"""
    data, out = src["src_buffer"], dst["dst"]
    p, e, nv = data.shape[0], int(ins.attrs.get("num_elem_per_idx", 1)), _num_valid(ins)
    flat = data.reshape(p, -1)
    index = np.asarray(src["index"]).reshape(p, -1).astype(np.int64)
    res = np.empty((p, nv * e), dtype=data.dtype)
    for c in range(0, p, CORE_PARTITIONS):
        idx = index[c:c + CORE_PARTITIONS].flatten(order="F")[:nv]
        if idx.size and (idx.min() < 0 or idx.max() + e > flat.shape[1]):
            raise KernelRuleError("local-gather-index", f"local_gather: index {int(idx.max())} + {e} elements is "
                                  f"out of bounds of the {flat.shape[1]} elements per partition of src_buffer "
                                  f"(undefined on hardware; source: {_LG})", operand="index", loc=ins.loc)
        cols = (idx[:, None] + np.arange(e)[None, :]).reshape(-1)
        res[c:c + CORE_PARTITIONS] = flat[c:c + CORE_PARTITIONS][:, cols]
    out[...] = res.reshape(out.shape)


_LG = "nki.isa.local_gather"
LG_PARTITIONS = Documented("local-gather-partitions", ("index",), _LG,
                           "src_buffer, index and dst span the same partitions, a multiple of 16 (GpSimd cores)")
LG_INDEX_DTYPE = Documented("index-dtype", ("index",), _LG, "index is a uint16 tile")
LG_DTYPE = Documented("dtype-mismatch", ("dst",), _LG, "dst has src_buffer's dtype")
LG_ELEMS = Documented("num-elem-per-idx", ("index",), _LG, "num_elem_per_idx is one of 1, 2, 4, 8, 16, 32")
LG_VALID = Documented("num-valid-indices", ("index",), _LG,
                      "num_valid_indices <= index.size / (index.shape[0] / 16), and at most 4096")
LG_SHAPE = Documented("shape-mismatch", ("dst",), _LG,
                      "dst holds num_valid_indices * num_elem_per_idx elements per partition")


@documents(LG_PARTITIONS, LG_INDEX_DTYPE, LG_DTYPE, LG_ELEMS, LG_VALID, LG_SHAPE)
def _local_gather_rules(ins, program, target):
    """Partitions a multiple of 16 and equal for src_buffer/index; uint16 indices; no cast; E in
    {1, 2, 4, 8, 16, 32}; at most 4096 valid indices per core; dst holds num_valid * E per partition."""
    s, i, d = ins.src["src_buffer"], ins.src["index"], ins.dst["dst"]
    if partitions(s) != partitions(i) or partitions(s) % CORE_PARTITIONS or partitions(d) != partitions(s):
        raise LG_PARTITIONS.fail("src_buffer, index and dst span the same partitions, a multiple of "
                                 f"{CORE_PARTITIONS}", ins, program, "index")
    if program.tensor_of(i).dtype != "uint16":
        raise LG_INDEX_DTYPE.fail("index must be a uint16 tile", ins, program, "index")
    if program.tensor_of(d).dtype != program.tensor_of(s).dtype:
        raise LG_DTYPE.fail("dst has src_buffer's dtype (local_gather does not cast)", ins, program, "dst")
    e, nv = int(ins.attrs.get("num_elem_per_idx", 1)), _num_valid(ins)
    if e not in GATHER_ELEMS_PER_IDX:
        raise LG_ELEMS.fail(f"num_elem_per_idx is {e}; one of {GATHER_ELEMS_PER_IDX}", ins, program, "index")
    if not 0 < nv <= min(GATHER_MAX_INDICES, CORE_PARTITIONS * _free(i)):
        raise LG_VALID.fail(f"num_valid_indices is {nv}; at most {GATHER_MAX_INDICES} and at most the "
                            f"{CORE_PARTITIONS * _free(i)} indices of a core's index slice", ins, program, "index")
    if _free(d) != nv * e:
        raise LG_SHAPE.fail(f"dst holds num_valid_indices * num_elem_per_idx = {nv * e} elements per partition, "
                            f"not {_free(d)}", ins, program, "dst")


register("local_gather", engines={"gpsimd"}, execute=_local_gather,
         # Estimate (not published): one gathered element per partition per cycle, as nc_n_gather.
         cost=lambda ins, p, t: cr.seconds(cr.gpsimd_cycles(free_elems(ins.dst["dst"].shape)
                                                         * cr.stride_slowdown(ins, p)), t, "gpsimd"),
         rules=COMPUTE_RULES + (_local_gather_rules,), categories={CROSS_PARTITION, ELEMENTWISE},
         dynamic_reads={"src_buffer"})


# -- sequence_bounds ------------------------------------------------------------------------------------------
def sequence_bounds_of(ids: np.ndarray) -> np.ndarray:
    """[P, 2, n] bounds of [P, n] segment ids: runs of equal consecutive nonzero ids get their start and
    end (exclusive) index; id 0 (padding) gets start n and end -1."""
    p, n = ids.shape
    out = np.empty((p, 2, n), np.float64)
    for r in range(p):
        s = ids[r]
        first = np.r_[True, s[1:] != s[:-1]]
        starts = np.flatnonzero(first)
        run = np.cumsum(first) - 1
        ends = np.r_[starts[1:], n]
        pad = s == 0
        out[r, 0] = np.where(pad, n, starts[run])
        out[r, 1] = np.where(pad, -1, ends[run])
    return out


def _sequence_bounds(ins, src, dst, ctx):
    """dst[0, 0, i] / dst[0, 1, i] = start / end (exclusive) index of the run of equal segment ids holding
    element i of segment_ids (free axes flattened); padding ids (0) give n / -1 (GpSimd Engine)."""
    ids = f32(src["segment_ids"])
    out = dst["dst"]
    store(out, sequence_bounds_of(ids.reshape(ids.shape[0], -1)).reshape(out.shape))


_SB = "nki.isa.sequence_bounds"
SB_PARTITION = Documented("partition-dim", ("segment_ids", "dst"), _SB, "the partition dimension is always 1")
SB_DTYPE = Documented("dtype", ("segment_ids", "dst"), _SB, "segment_ids and dst are float32 or int32")
SB_SHAPE = Documented("shape-mismatch", ("dst",), _SB, "dst holds a start and an end per id: (1, 2, n) for (1, n)")


@documents(SB_PARTITION, SB_DTYPE, SB_SHAPE)
def _sequence_bounds_rules(ins, program, target):
    """One partition; float32/int32 operands; dst holds 2 values per segment id."""
    s, d = ins.src["segment_ids"], ins.dst["dst"]
    for role, ap in (("segment_ids", s), ("dst", d)):
        if partitions(ap) != 1:
            raise SB_PARTITION.fail(f"{role} spans {partitions(ap)} partitions; sequence_bounds works on one",
                                    ins, program, role)
        if program.tensor_of(ap).dtype not in ("float32", "int32"):
            raise SB_DTYPE.fail(f"{role} must be float32 or int32", ins, program, role)
    if _free(d) != 2 * _free(s):
        raise SB_SHAPE.fail(f"dst holds 2 * {_free(s)} elements (start and end per id), e.g. shape "
                            f"(1, 2, {_free(s)})", ins, program, "dst")


register("sequence_bounds", engines={"gpsimd"}, execute=_sequence_bounds,
         # Estimate (not published): a forward and a backward pass over the ids.
         cost=lambda ins, p, t: cr.seconds(cr.gpsimd_cycles(2 * _free(ins.src["segment_ids"])
                                                         * cr.stride_slowdown(ins, p)), t, "gpsimd"),
         rules=COMPUTE_RULES + (_sequence_bounds_rules,), categories={CROSS_PARTITION, ELEMENTWISE})


# -- nonzero_with_count ---------------------------------------------------------------------------------------
_gen3_nonzero = target_gate("gen3")   # the nonzero_with_count page: NeuronCore-v3 and newer


def _nonzero_with_count(ins, src, dst, ctx):
    """Per partition (the operands are the first partition of each GpSimd core, partitions 0, 16, ...):
    with the T source elements flattened, dst[:N] = positions of the N nonzero elements + index_offset,
    dst[N:T] = padding_val, dst[T] = N."""
    data, out = src["src"], dst["dst"]
    p = data.shape[0]
    flat = f32(data).reshape(p, -1)
    t = flat.shape[1]
    res = np.full((p, t + 1), int(ins.attrs.get("padding_val", -1)), dtype=np.int64)
    offset = int(ins.attrs.get("index_offset", 0))
    for r in range(p):
        nz = np.flatnonzero(flat[r] != 0)
        res[r, :nz.size] = nz + offset
        res[r, t] = nz.size
    store(out, res.reshape(out.shape))


_NZ = "nki.isa.nonzero_with_count"
NZ_STEP = Documented("partition-step", ("src", "dst"), _NZ,
                     "operands sit on the first partition of GpSimd cores: partitions 0, 16, 32, ...")
NZ_START = Documented("start-partition", ("src", "dst"), _NZ, "operands start on a GpSimd core's first partition")
NZ_CORES = Documented("partition-mismatch", ("dst",), _NZ, "src and dst span the same GpSimd cores")
NZ_SHAPE = Documented("shape-mismatch", ("dst",), _NZ,
                      "dst holds one element more per partition than src (the indices and the count)")
NZ_DTYPE = Documented("dtype", ("src", "dst"), _NZ, "src is float32 or int32, dst int32")
NZ_IMMEDIATES = Documented("nonzero-immediate", (), _NZ,
                           "index_offset and padding_val are int32 immediates (integers within int32 range)")
_INT32 = np.iinfo(np.int32)


def _nonzero_immediates(ins, program) -> None:
    """index_offset and padding_val: Python/numpy integers (not bools) within int32 range."""
    for name, default in (("index_offset", 0), ("padding_val", -1)):
        v = ins.attrs.get(name, default)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not _INT32.min <= v <= _INT32.max:
            raise NZ_IMMEDIATES.fail(f"{name} is {v!r}; it must be an int32 integer "
                                     f"({_INT32.min}..{_INT32.max})", ins, program)


@documents(NZ_STEP, NZ_START, NZ_CORES, NZ_SHAPE, NZ_DTYPE, NZ_IMMEDIATES)
def _nonzero_rules(ins, program, target):
    """index_offset and padding_val int32 integers; src and dst on the first partition of GpSimd cores
    (partitions 0, 16, 32, ...); dst holds one element more per partition than src (the count). (The page's "in SBUF" is the shared engine-buffer rule: GpSimd
    reaches neither HBM nor PSUM.)"""
    _nonzero_immediates(ins, program)
    s, d = ins.src["src"], ins.dst["dst"]
    for role, ap in (("src", s), ("dst", d)):
        spec = program.tensor_of(ap)
        if partitions(ap) > 1 and ap.dims[0][0] != CORE_PARTITIONS * spec.free_size:
            raise NZ_STEP.fail(f"{role} is read on partitions 0, 16, 32, ... (one per GpSimd core)",
                               ins, program, role)
        if (ap.offset // spec.free_size) % CORE_PARTITIONS:
            raise NZ_START.fail(f"{role} starts on the first partition of a GpSimd core", ins, program, role)
    if partitions(s) != partitions(d):
        raise NZ_CORES.fail("src and dst span the same GpSimd cores", ins, program, "dst")
    for role, ap, allowed in (("src", s, ("float32", "int32")), ("dst", d, ("int32",))):
        if program.tensor_of(ap).dtype not in allowed:
            raise NZ_DTYPE.fail(f"{role} must be {' or '.join(allowed)}", ins, program, role)
    if _free(d) != _free(s) + 1:
        raise NZ_SHAPE.fail(f"dst holds {_free(s) + 1} elements per partition (the {_free(s)} indices and the "
                            "count)", ins, program, "dst")


register("nonzero_with_count", engines={"gpsimd"}, execute=_nonzero_with_count,
         # Estimate (not published): one pass over the elements of a partition.
         cost=lambda ins, p, t: cr.seconds(cr.gpsimd_cycles(_free(ins.src["src"]) * cr.stride_slowdown(ins, p)),
                                           t, "gpsimd"),
         # Partition p of dst from partition p of src: no category needed; partitions step by 16 from a
         # core's first partition (16 is one), so the generic consecutive-partition and quadrant-start rules
         # are replaced by the row's own.
         rules=tuple(r for r in COMPUTE_RULES if r not in (partition_step, start_partition_rule))
         + (_gen3_nonzero, _nonzero_rules))
