"""Copies folded into their readers in the batched plan (simulator.dataflow): a reader of a copy's
renamed destination reads the copy's source, the copy is dropped, and the bits stay the reference's;
and the cases where a copy must stay (its HBM source overwritten before the read, a layout the reader
would see differently, a rounding copy)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.simulator.batching import plan_batches
from nkihub.simulator.executor import Executor
from nkihub.simulator.replay import Replay

P = 128


def _rand(shape, dtype=ml_dtypes.bfloat16, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(dtype)


def _bits_equal(got, want):
    return all(np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))
               for a, b in zip(got, want))


@nki.jit
def tiled_matmul(lhsT, rhs):
    """The matmul tutorial's tiling, smaller: HBM tiles DMA'd into SBUF, each read once by a matmul;
    the fp32 PSUM result copied to SBUF fp32 (an exact copy, read by a scale) and stored."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // P):
        res = nl.ndarray((P, N), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // P):
            a = nl.ndarray((P, P), dtype=lhsT.dtype, buffer=nl.sbuf)
            b = nl.ndarray((P, N), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * P:(k + 1) * P, m * P:(m + 1) * P])
            nisa.dma_copy(dst=b, src=rhs[k * P:(k + 1) * P, :])
            nisa.nc_matmul(dst=res, stationary=a, moving=b)
        res_sb = nl.ndarray((P, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res_sb, src=res)
        scaled = nl.ndarray((P, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=scaled, data=res_sb, op0=nl.multiply, operand0=0.5)
        nisa.dma_copy(dst=out[m * P:(m + 1) * P, :], src=scaled)
    return out


def _run_both(kernel, args, arrays):
    ck = kernel.specialize(*args)
    want = Executor(ck.program, ck.target).run(arrays)
    fast = Replay(ck.program, ck.target, batch=True)
    got = fast.run(arrays)
    assert fast.batch_note == "batched"
    return ck.program, plan_batches(ck.program), got, want


def _folded(b, opcode):
    """(instruction, role, folded plan) of the folded reads of ``opcode`` instructions."""
    prog, df = b.program, b.dataflow
    return [(i, r, p) for i, plans in enumerate(df.src_plans) for r, p in plans.items()
            if p.via is not None and prog.instructions[i].opcode == opcode]


def test_hbm_loads_and_an_exact_psum_copy_fold_into_their_readers():
    lhsT, rhs = _rand((2 * P, 2 * P)), _rand((2 * P, 256), seed=1)
    prog, b, got, want = _run_both(tiled_matmul, (lhsT, rhs), [lhsT, rhs])
    assert _bits_equal(got, want)
    df = b.dataflow
    matmul_reads = _folded(b, "nc_matmul")
    # every matmul operand reads HBM in place; its DMA is gone from the plan
    assert len(matmul_reads) == 2 * sum(ins.opcode == "nc_matmul" for ins in prog.instructions)
    assert all(p.memory is not None and prog.tensors[p.memory.tensor].buffer != "sbuf" for _, _, p in matmul_reads)
    # the fp32 PSUM -> SBUF copy is exact: the scale reads the PSUM result's storage
    scale_reads = _folded(b, "tensor_scalar")
    assert len(scale_reads) == 2 and all(p.memory is None and p.boxes for _, _, p in scale_reads)
    folded_copies = {p.via for _, _, p in matmul_reads + scale_reads}
    assert df.dropped == folded_copies
    assert all(prog.instructions[c].opcode in ("dma_copy", "tensor_copy") for c in df.dropped)
    assert not df.dropped & {i for g in b.groups for i in g.members}
    # folded matmuls no longer wait for their loads
    assert min(df.levels[i] for i, _, _ in matmul_reads) == 0


@nki.jit
def overwritten_source(x, y):
    """A tile loaded from ``out`` is read after ``out`` was overwritten: the read needs the old values,
    so the load must run (and the later store must wait for it)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    old = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    t2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    res = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)            # out = x
    nisa.dma_copy(dst=old, src=out)          # old = x, through out
    nisa.dma_copy(dst=t2, src=y)
    nisa.dma_copy(dst=out, src=t2)           # out = y: old must still hold x
    nisa.tensor_scalar(dst=res, data=old, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out2, src=res)
    return out, out2


def test_a_copy_whose_hbm_source_is_overwritten_before_the_read_is_not_folded():
    x, y = _rand((P, 64)), _rand((P, 64), seed=1)
    prog, b, got, want = _run_both(overwritten_source, (x, y), [x, y])
    assert _bits_equal(got, want)
    np.testing.assert_array_equal(got[1].astype(np.float32), (x.astype(np.float32) + 1).astype(x.dtype).astype(np.float32))
    df = b.dataflow
    load_old = next(i for i, ins in enumerate(prog.instructions)
                    if ins.opcode == "dma_copy" and prog.tensors[ins.src["src"].tensor].kind == "output")
    reader = next(i for i, ins in enumerate(prog.instructions) if ins.opcode == "tensor_scalar")
    assert df.src_plans[reader]["data"].via is None
    assert load_old not in df.dropped
    # the loads of x and y fold into the stores (their sources are inputs nothing writes)
    assert all(prog.instructions[c].opcode == "dma_copy" for c in df.dropped) and len(df.dropped) == 2


@nki.jit
def layouts(x):
    """Loads that must stay: one whose HBM rows are interleaved with another tile's (the reader would see
    a different free stride), and a PSUM copy that rounds fp32 to bf16."""
    out = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((P, 2, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x.reshape((P, 32, 2)).permute((0, 2, 1)))   # free strides (1, 2) -> (32, 1)
    ps = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.tensor_scalar(dst=ps, data=a, op0=nl.multiply, operand0=3.0)
    rounded = nl.ndarray((P, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=rounded, src=ps)
    res = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=rounded, op0=nl.add, operand0=0.0)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_copies_that_change_layout_or_round_are_not_folded():
    x = _rand((P, 64))
    prog, b, got, want = _run_both(layouts, (x,), [x])
    assert _bits_equal(got, want)
    assert not _folded(b, "tensor_scalar")
    kept = {prog.instructions[i].opcode for g in b.groups for i in g.members}
    assert {"tensor_copy", "dma_copy"} <= kept


@nki.jit
def transposed_probs(x, v, through_exp):
    """p = exp(x) in bf16 (or x itself), transposed through one PSUM bank (fp32), copied back to bf16
    SBUF (a rounding copy), each transposed tile the stationary operand of a matmul accumulating p.T @ v."""
    out = nl.ndarray((P, v.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((P, 2 * P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    p = xt
    if through_exp:
        p = nl.ndarray((P, 2 * P), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.activation(dst=p, op=nl.exp, data=xt)
    pT_ps = nl.ndarray((P, 2, P), dtype=nl.float32, buffer=nl.psum)
    for i in range(2):
        nisa.nc_transpose(dst=pT_ps[:, i, :], data=p[:, i * P:(i + 1) * P])
    pT = nl.ndarray((P, 2, P), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=pT, src=pT_ps)
    vt = nl.ndarray((P, 2, v.shape[1]), dtype=v.dtype, buffer=nl.sbuf)
    for i in range(2):
        nisa.dma_copy(dst=vt[:, i, :], src=v[i * P:(i + 1) * P, :])
    acc = nl.ndarray((P, v.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for i in range(2):
        nisa.nc_matmul(dst=acc, stationary=pT[:, i, :], moving=vt[:, i, :], accumulate=i > 0)
    res = nl.ndarray((P, v.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def _with_nans(x):
    """``x`` (bf16) with a canonical NaN, a NaN with another payload, and infinities in row 0."""
    bits = x.view(np.uint16).copy()
    bits[0, :4] = [0x7FC0, 0x7FC1, 0x7F80, 0xFF80]
    return bits.view(x.dtype)


def test_a_rounding_copy_of_transposed_rounded_values_folds_into_a_widening_reader():
    """exp's bf16 results hold canonical NaNs only; transposed into fp32 PSUM they round back to
    themselves, so the matmul reads the PSUM tiles (fp32) and the rounding copy is dropped."""
    x, v = _with_nans(_rand((P, 2 * P))), _rand((2 * P, 32), seed=1)
    prog, b, got, want = _run_both(transposed_probs, (x, v, True), [x, v])
    assert _bits_equal(got, want)
    stationary = [(i, p) for i, r, p in _folded(b, "nc_matmul") if r == "stationary"]
    assert len(stationary) == 2 and all(p.dtype == np.float32 and p.boxes for _, p in stationary)
    rounding = {i for i, ins in enumerate(prog.instructions) if ins.opcode == "tensor_copy" and
                prog.tensors[ins.dst["dst"].tensor].dtype == "bfloat16"}
    assert len(rounding) == 1 and rounding <= b.dataflow.dropped


def test_a_rounding_copy_of_loaded_values_is_not_folded():
    """Loaded bf16 values may hold NaNs the round trip through fp32 rewrites (0x7fc1 -> 0x7fc0): the copy
    stays and the matmul reads its bf16 result."""
    x, v = _with_nans(_rand((P, 2 * P))), _rand((2 * P, 32), seed=1)
    prog, b, got, want = _run_both(transposed_probs, (x, v, False), [x, v])
    assert _bits_equal(got, want)
    assert not [p for i, r, p in _folded(b, "nc_matmul") if r == "stationary"]
    assert any(prog.instructions[i].opcode == "tensor_copy" for g in b.groups for i in g.members)


def test_sub_index_places_a_read_inside_a_destination_or_refuses():
    from nkihub.simulator.folding import compose, sub_index
    from nkihub.simulator.program import AccessPattern as AP
    dst = AP("t", 0, ((512, 128), (128, 4), (1, 128)))          # t[:, 0:4, :] of a [128, 4, 128] tile
    start, axes = sub_index(dst, AP("t", 2 * 128 + 3, ((512, 64), (1, 100))))   # t[:64, 2, 3:103]
    assert (start, axes) == ((0, 2, 3), (0, 2))
    assert compose((1000, 200, 1), start, axes) == (2 * 200 + 3, (1000, 1))
    assert sub_index(dst, AP("t", 3 * 128 + 100, ((512, 2), (1, 29)))) is None      # runs past the row
    assert sub_index(dst, AP("t", 0, ((512, 2), (2, 4)))) is None                   # a stride it lacks
    assert sub_index(dst, AP("u", 0, ((512, 2),))) is None
    assert sub_index(dst, AP("t", 0, ((1, 128), (512, 128)))) == ((0, 0, 0), (2, 0))   # transposed


def test_same_layout_keeps_free_strides_and_the_column_test():
    from nkihub.simulator.folding import compact, same_layout
    assert same_layout((1024, 1), (128, 1), (128, 128))         # rows further apart: the same paths
    assert not same_layout((64, 1), (128, 1), (128, 128))       # rows overlapping
    assert not same_layout((1024, 2), (128, 1), (128, 64))      # another free stride
    assert same_layout((5, 7), (1, 9), (1, 1)) and same_layout((1, 1), (1, 1), (128, 1))
    assert not same_layout((2, 1), (1, 1), (128, 1))            # a column no longer back to back
    assert compact((512, 1), (128, 100)) == (100, 1)            # astype packs a strided view
    assert compact((1, 128), (128, 100)) == (1, 128)
