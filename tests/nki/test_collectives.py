"""nki.collectives, nisa.core_barrier and nisa.sendrecv over the program instances of a launch grid and
over ranks (nki.multicore.run_ranks): data each participant writes before a synchronisation point is what
the others read after it; mismatched participants are an error at the kernel line; each core has its own
SBUF; collectives are costed on the DMA queues."""
from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from nkihub.nki.errors import KernelRuleError
from nkihub.nki.multicore import run_ranks

ALL4 = ncc.ReplicaGroup([[0, 1, 2, 3]])


@nki.jit
def grid_all_reduce(x):
    r = ncc.rank_id()
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape[1:], dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[r])
    s = nl.ndarray(x.shape[1:], dtype=nl.float32, buffer=nl.sbuf)
    ncc.all_reduce([t], [s], ncc.ReplicaGroup([[0, 1], [2, 3]]), nl.maximum)
    nisa.dma_copy(dst=out[r], src=s)
    return out


def test_grid_programs_are_ranks_and_subgroups_reduce_separately():
    x = np.random.default_rng(0).standard_normal((4, 16, 8)).astype(np.float32)
    got = grid_all_reduce[4](x)
    for r in range(4):
        np.testing.assert_array_equal(got[r], x[(r // 2) * 2:(r // 2) * 2 + 2].max(0))


@nki.jit
def gather_scatter(inp, rg, n):
    """inp [P, F] on each rank -> (all_gather along dim 1 in SBUF, reduce_scatter along dim 0 in HBM,
    all_to_all in HBM)."""
    p, f = inp.shape
    a = nl.ndarray((p, f), dtype=inp.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=inp)
    g = nl.ndarray((p, n * f), dtype=inp.dtype, buffer=nl.sbuf)
    ncc.all_gather([a], [g], rg, collective_dim=1)
    gathered = nl.ndarray((p, n * f), dtype=inp.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=gathered, src=g)
    scattered = nl.ndarray((p // n, f), dtype=inp.dtype, buffer=nl.shared_hbm)
    ncc.reduce_scatter([inp], [scattered], rg, collective_dim=0, op=nl.add)
    swapped = nl.ndarray((p, f), dtype=inp.dtype, buffer=nl.shared_hbm)
    ncc.all_to_all([inp], [swapped], rg, collective_dim=0)
    return gathered, scattered, swapped


def test_ranks_with_their_own_inputs():
    xs = np.random.default_rng(1).standard_normal((4, 8, 6)).astype(np.float32)
    res = run_ranks(gather_scatter, [{"inp": xs[r], "rg": ALL4, "n": 4} for r in range(4)])
    for r, (gathered, scattered, swapped) in enumerate(res):
        np.testing.assert_array_equal(gathered, np.concatenate(list(xs), axis=1))
        np.testing.assert_allclose(scattered, xs.sum(0)[2 * r:2 * r + 2], rtol=1e-6)
        np.testing.assert_array_equal(swapped, np.concatenate([x[2 * r:2 * r + 2] for x in xs]))


@nki.jit
def ring(inp, rg):
    prev = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm)
    ncc.collective_permute_implicit([[inp]], [[prev]], rg)
    summed = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm)
    ncc.collective_permute_implicit_reduce([[inp]], [[prev]], [[summed]], rg, nl.add)
    swapped = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm)
    ncc.collective_permute([inp], [swapped], [(0, 1), (1, 0), (2, 3), (3, 2)])
    order = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    ids = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
    for step in range(4):
        nisa.memset(dst=ids[:, step:step + 1], value=ncc.collective_permute_implicit_current_processing_rank_id(step, rg))
    nisa.dma_copy(dst=order, src=ids)
    return prev, summed, swapped, order


def test_ring_permutes_and_the_processing_rank():
    xs = [np.full((2, 3), r, np.float32) for r in range(4)]
    res = run_ranks(ring, [(xs[r], ALL4) for r in range(4)])
    for r, (prev, summed, swapped, order) in enumerate(res):
        p = (r - 1) % 4
        np.testing.assert_array_equal(prev, xs[p])
        np.testing.assert_array_equal(summed, xs[p] + xs[(p - 1) % 4])   # predecessor's inp + its prev
        np.testing.assert_array_equal(swapped, xs[r ^ 1])
        np.testing.assert_array_equal(order[0], [(r - s) % 4 for s in range(4)])


@nki.jit
def halves(x, barrier):
    """Core c writes half c of a shared tensor; after the barrier each core copies all of it."""
    c = nl.program_id(0)
    shared = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    h = x.shape[0] // 2
    nisa.dma_copy(dst=shared[c * h:(c + 1) * h], src=x[c * h:(c + 1) * h])
    if barrier:
        nisa.core_barrier(shared, (0, 1))
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=shared)
    out = nl.ndarray((2,) + x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[c], src=t)
    return shared, out


def test_core_barrier_orders_writes_before_reads_across_cores():
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    _, out = halves[2](x, True)
    np.testing.assert_array_equal(out[0], x)
    np.testing.assert_array_equal(out[1], x)
    with pytest.raises(KernelRuleError, match="read-uninitialized"):
        halves[2](x, False)   # core 0 reads the half core 1 has not written yet


@nki.jit
def swap(x):
    c = nl.program_id(0)
    t = nl.ndarray(x.shape[1:], dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[c])
    got = nl.ndarray(x.shape[1:], dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=got, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[c], src=got)
    return out


def test_sendrecv_exchanges_between_cores():
    x = np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(swap[2](x), x[::-1])


def test_sendrecv_moves_bits_of_wide_integers():
    # uint32 values above 2^24 (a packed MX x4 element is one) arrive bit for bit, not through fp32.
    x = (np.arange(2 * 4 * 8, dtype=np.uint32).reshape(2, 4, 8) * 7919 + 16777217).astype(np.uint32)
    np.testing.assert_array_equal(swap[2](x), x[::-1])


@nki.jit
def only_rank0_reduces(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    if nl.program_id(0) == 0:
        ncc.all_reduce([t], [t], ncc.ReplicaGroup([[0, 1]]), nl.add)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_rank_that_skips_a_collective_is_an_error_at_the_call():
    with pytest.raises(KernelRuleError, match="collective-mismatch") as exc:
        only_rank0_reduces[2](np.ones((4, 4), np.float32))
    assert "test_collectives.py" in str(exc.value)


@nki.jit
def big_tiles(x):
    # Each of the two cores holds a tile of over half an SBUF partition: only fits one SBUF per core.
    t = nl.ndarray((128, 40 * 1024), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=1.0)
    s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=s, op=nl.add, data=t, axis=1)
    out = nl.ndarray((2, 128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[nl.program_id(0)], src=s)
    return out


def test_each_core_has_its_own_sbuf():
    out = big_tiles[2](np.zeros(1, np.float32))
    assert (out == 40 * 1024).all()


def test_collectives_are_costed_on_the_dma_queues():
    x = np.ones((4, 128, 64), np.float32)
    report = nki.profile(grid_all_reduce[4], x, target="trn2")
    line = next(c for c in report.top if c.opcode == "all_reduce")
    assert line.engine == "dma" and line.time_s > 0


@nki.jit
def zero_then_fill(x):
    """Both cores zero the whole shared output, then each stores its half, then they meet at a barrier."""
    c = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    z = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.dma_copy(dst=out, src=z)
    half = x.shape[0] // 2
    t = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[c * half:(c + 1) * half])
    nisa.dma_copy(dst=out[c * half:(c + 1) * half], src=t)
    nisa.core_barrier(out, cores=[0, 1])
    return out


def test_cores_progress_together_between_synchronisation_points():
    # Core 1's early zeroing does not land after core 0's later store: the cores run side by side.
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4) + 1
    np.testing.assert_array_equal(zero_then_fill[2](x), x)


@nki.jit
def move_only(inp, flat, meta, rg):
    """The collectives that only move data, on uint32 tensors: all_gather and all_to_all of inp [P, F],
    all_gather_v and all_to_all_v of the flat buffer ``flat`` [F2] per ``meta``."""
    p, f = inp.shape
    n = len(rg.replica_groups[0])
    gathered = nl.ndarray((p, n * f), dtype=inp.dtype, buffer=nl.shared_hbm)
    ncc.all_gather([inp], [gathered], rg, collective_dim=1)
    swapped = nl.ndarray((p, f), dtype=inp.dtype, buffer=nl.shared_hbm)
    ncc.all_to_all([inp], [swapped], rg, collective_dim=1)
    gathered_v = nl.ndarray(flat.shape, dtype=flat.dtype, buffer=nl.shared_hbm)
    ncc.all_gather_v([flat], [gathered_v], rg, meta)
    swapped_v = nl.ndarray(flat.shape, dtype=flat.dtype, buffer=nl.shared_hbm)
    ncc.all_to_all_v([flat], [swapped_v], rg, meta)
    return gathered, swapped, gathered_v, swapped_v


def test_data_moving_collectives_copy_bits_of_wide_integers():
    # uint32 values above 2^24 (not representable in fp32) arrive bit for bit, as a DMA moves them.
    n, big = 2, np.uint32(16777217)
    xs = [(np.arange(4 * 6, dtype=np.uint32).reshape(4, 6) * 7919 + big + r) for r in range(n)]
    flats = [np.arange(8, dtype=np.uint32) * 3 + big + 100 * r for r in range(n)]
    # Rows: send counts (2 to each rank), send displacements (2 * r), recv counts (unused here).
    meta = np.array([[2] * n, [2 * r for r in range(n)], [2] * n], np.uint32)
    g = ncc.ReplicaGroup([list(range(n))])
    res = run_ranks(move_only, [(xs[r], flats[r], meta, g) for r in range(n)])
    for r, (gathered, swapped, gathered_v, swapped_v) in enumerate(res):
        np.testing.assert_array_equal(gathered, np.concatenate(xs, axis=1))
        np.testing.assert_array_equal(swapped, np.concatenate([x[:, 3 * r:3 * r + 3] for x in xs], axis=1))
        for s in range(n):   # all_gather_v: rank s's 2 elements from displacement 0 land in slot s
            np.testing.assert_array_equal(gathered_v[4 * s:4 * s + 2], flats[s][0:2])
        np.testing.assert_array_equal(swapped_v[:2 * n],
                                      np.concatenate([flats[s][2 * r:2 * r + 2] for s in range(n)]))


def test_output_elements_no_rank_writes_read_as_a_fresh_buffer_on_every_call():
    """all_gather_v fills 2 of each rank's 4 slots; the other slots are the fresh-buffer fill (uint32 max)
    from the fast engine too, call after call (it returned a pooled workspace's or a new arena's bytes; found
    with NKIHUB_SIM_CROSSCHECK=1)."""
    n, big = 2, np.uint32(16777217)
    xs = [(np.arange(4 * 6, dtype=np.uint32).reshape(4, 6) + big + r) for r in range(n)]
    meta = np.array([[2] * n, [2 * r for r in range(n)], [2] * n], np.uint32)
    g = ncc.ReplicaGroup([list(range(n))])
    for call in range(3):
        flats = [np.arange(8, dtype=np.uint32) * (call + 3) + 100 * r for r in range(n)]
        for gathered_v in (res[2] for res in run_ranks(move_only, [(xs[r], flats[r], meta, g) for r in range(n)])):
            for s in range(n):
                np.testing.assert_array_equal(gathered_v[4 * s:4 * s + 2], flats[s][0:2])
                assert (gathered_v[4 * s + 2:4 * s + 4] == np.iinfo(np.uint32).max).all(), (call, gathered_v)
