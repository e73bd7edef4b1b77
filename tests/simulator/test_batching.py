"""The batched plan's memory (simulator.batching): renamed storage packed by liveness, windows when it would
pass NKIHUB_SIM_BATCH_MEMORY, the unbatched replay when even windows do not fit, and the reference's bits in
every case."""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.simulator import batching, config
from nkihub.simulator.batching import plan_batches, planning, renamed_write_bytes
from nkihub.simulator.dataflow import SLICE, NotBatchable
from nkihub.simulator.executor import Executor
from nkihub.simulator.isa import OPS
from nkihub.simulator.replay import Replay

P, N = 128, 512


@nki.jit
def blocked_matmul(lhsT, rhs):
    """Per column block: PSUM accumulation over K, evacuated to SBUF bf16 and stored; every tile fresh, so
    renamed writes grow with the blocks while the machine holds a few tiles at a time."""
    K, M = lhsT.shape
    _, n_all = rhs.shape
    out = nl.ndarray((M, n_all), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // P):
        for n in nl.affine_range(n_all // N):
            acc = nl.ndarray((P, N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // P):
                a = nl.ndarray((P, P), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((P, N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * P:(k + 1) * P, m * P:(m + 1) * P])
                nisa.dma_copy(dst=b, src=rhs[k * P:(k + 1) * P, n * N:(n + 1) * N])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl.ndarray((P, N), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.activation(dst=res, op=nl.exp, data=acc, scale=0.01)
            nisa.dma_copy(dst=out[m * P:(m + 1) * P, n * N:(n + 1) * N], src=res)
    return out


def _args(k=256, m=512, n=2048):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32).astype(ml_dtypes.bfloat16) for s in ((k, m), (k, n))]


def _bits(arrays):
    return [np.ascontiguousarray(a).view(np.uint8) for a in arrays]


def _same(got, want):
    return all(np.array_equal(a, b) for a, b in zip(_bits(got), _bits(want)))


@pytest.fixture
def compiled():
    args = _args()
    ck = blocked_matmul.specialize(*args)
    return ck.program, ck.target, args, Executor(ck.program, ck.target, checked=True).run(args)


def test_storage_reused_by_liveness_is_far_below_the_writes(compiled):
    program = compiled[0]
    b = plan_batches(program)
    assert b.dataflow.windows == 1
    assert 0 < b.storage_bytes < renamed_write_bytes(program)


def test_a_budget_below_the_storage_plans_in_windows_with_the_reference_bits(compiled, monkeypatch):
    program, target, args, want = compiled
    whole = plan_batches(program)
    budget = whole.storage_bytes // 3
    windowed = plan_batches(program, budget)
    assert windowed.dataflow.windows > 1 and windowed.storage_bytes <= 2 * budget
    monkeypatch.setenv("NKIHUB_SIM_BATCH_MEMORY", str(budget))
    monkeypatch.setenv("NKIHUB_SIM_CROSSCHECK", "1")   # each run against the reference, on one BLAS thread too
    for threads in ("1", "2"):
        monkeypatch.setenv("NKIHUB_SIM_THREADS", threads)
        fast = Replay(program, target, checked=True, batch=True)
        assert _same(fast.run(args), want) and _same(fast.run(args), want)
        assert fast.batch_note.startswith("batched in ") and fast.batch_note.endswith(" windows")


def test_a_whole_plan_is_kept_while_its_storage_is_within_twice_the_budget(compiled):
    program = compiled[0]
    storage = plan_batches(program).storage_bytes
    budget = storage * 2 // 3          # the storage passes the budget, not twice it
    assert renamed_write_bytes(program) <= batching.WHOLE_WRITES * budget
    assert plan_batches(program, budget).dataflow.windows == 1
    assert plan_batches(program, storage // 3).dataflow.windows > 1


def test_a_budget_nothing_fits_replays_unbatched_with_the_reference_bits(compiled, monkeypatch):
    program, target, args, want = compiled
    with pytest.raises(NotBatchable, match="twice the budget"):
        plan_batches(program, 1024)
    monkeypatch.setenv("NKIHUB_SIM_BATCH_MEMORY", "1K")
    fast = Replay(program, target, checked=True, batch=True)
    assert _same(fast.run(args), want)
    assert fast.batch_note.startswith("not batched: renamed storage")


def test_the_budget_setting(monkeypatch):
    monkeypatch.delenv("NKIHUB_SIM_BATCH_MEMORY", raising=False)
    assert config.batch_memory() == 256 << 20
    for value, want in (("64M", 64 << 20), ("1g", 1 << 30), ("512KiB", 512 << 10), ("4096", 4096)):
        monkeypatch.setenv("NKIHUB_SIM_BATCH_MEMORY", value)
        assert config.batch_memory() == want
    monkeypatch.setenv("NKIHUB_SIM_BATCH_MEMORY", "lots")
    with pytest.raises(ValueError, match="NKIHUB_SIM_BATCH_MEMORY"):
        config.batch_memory()


def test_plans_beyond_the_keep_cap_are_shed_least_recent_first_and_made_again(compiled, monkeypatch):
    program, target, args, want = compiled
    monkeypatch.setenv("NKIHUB_SIM_KEEP_MEMORY", "1G")
    first = Replay(program, target, checked=True, batch=True)
    first.run(args)
    own = first.held_bytes() + sum(ws.arena.held_bytes() for ws in first._pool)
    assert first.held_bytes() > 0
    monkeypatch.setenv("NKIHUB_SIM_KEEP_MEMORY", str(own))
    second = Replay(program, target, checked=True, batch=True)
    assert _same(second.run(args), want)
    assert first.held_bytes() == 0 and "dropped" in first.batch_note and second.held_bytes() > 0
    assert _same(first.run(args), want) and first.batch_note == "batched"


def test_calls_run_bound_on_memory_shared_by_liveness_while_the_plan_is_made(compiled, monkeypatch):
    program, target, args, want = compiled
    monkeypatch.delenv("NKIHUB_SIM_BATCH", raising=False)
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "0")     # no time for the plan: it never completes
    fast = Replay(program, target, checked=True)
    internal = sum(s.size * s.np_dtype.itemsize for s in program.tensors.values()
                   if s.kind == "internal" and s.name not in program.outputs)
    hbm = sum(s.size * s.np_dtype.itemsize for s in program.tensors.values() if not s.on_chip)
    assert fast._layout(None).released < hbm + internal / 4
    for _ in range(3):
        assert _same(fast.run(args), want) and fast._pool[0].batches is None and fast.batch_note == "planning"
    assert len(fast._pool[0].steps) == len(program.instructions)
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "inf")   # the plan is finished after the next run
    assert _same(fast.run(args), want) and fast.batch_note.startswith("batched")   # on trial (Replay._judge)
    assert _same(fast.run(args), want) and fast._pool[-1].batches is not None


def test_the_plan_made_in_slices_is_the_plan_made_at_once(compiled, monkeypatch):
    program, _, _, _ = compiled
    gen, slices = planning(program, 1 << 30), 0
    while True:
        try:
            next(gen)
            slices += 1
        except StopIteration as stop:
            sliced = stop.value
            break
    whole = plan_batches(program, 1 << 30)
    assert slices >= len(program.instructions) // SLICE
    assert [(g.level, g.members) for g in sliced.groups] == [(g.level, g.members) for g in whole.groups]
    assert sliced.storage == whole.storage and sliced.storage_bytes == whole.storage_bytes


def test_the_plan_budget_setting(monkeypatch):
    monkeypatch.delenv("NKIHUB_SIM_PLAN_BUDGET", raising=False)
    assert config.plan_budget() == 0.1
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "0.5")
    assert config.plan_budget() == 0.5
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "-1")
    with pytest.raises(ValueError, match="NKIHUB_SIM_PLAN_BUDGET"):
        config.plan_budget()


def test_a_failed_batched_run_leaves_the_engine_free_to_be_shed(monkeypatch):
    args = _args()
    ck = blocked_matmul.specialize(*args)

    good = OPS["activation"].bind

    def broken(ins, src, dst, scratch):     # fails on stacked members only
        if dst["dst"].shape[0] == 1:
            return good(ins, src, dst, scratch)

        def step(ctx):
            raise RuntimeError("a defect of the batched plan")
        return step
    monkeypatch.setitem(OPS, "activation", dataclasses.replace(OPS["activation"], bind=broken))
    fast = Replay(ck.program, ck.target, checked=True, batch=True)
    with pytest.warns(RuntimeWarning, match="replaying unbatched"):
        fast.run(args)
    assert fast.busy == 0 and all(ws.arena.busy == 0 for ws in fast._pool)


def test_a_widened_input_slice_is_cast_once_a_run_and_again_after_the_inputs_change():
    """``Scratch.widened``: a work array widened from a slice of a stable buffer is not cast again while
    it holds that slice; ``forget`` (each run, inputs reloaded) makes the next refresh cast again; a source
    outside the stable buffers is always cast."""
    from nkihub.simulator.isa.fast import Scratch
    inp = np.arange(4 * P * N, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(4 * P, N)
    other = inp.copy()
    sc = Scratch()
    sc.stable([inp])
    buf, cast = sc.widened(inp[None, :P], 0)
    buf2, cast_other = sc.widened(other[None, P:2 * P], 0)
    assert buf2 is not buf and np.shares_memory(buf, buf2)     # one work array, two sources
    cast()
    assert np.array_equal(buf[0], inp[:P].astype(np.float32))
    inp[:P] = -3
    cast()                                  # still holding this slice: not cast again
    assert not np.any(buf[0] == -3)
    sc.forget()
    cast()
    assert np.all(buf[0] == -3)
    cast_other()                            # another source into the same work array
    assert np.array_equal(buf2[0], other[P:2 * P].astype(np.float32))
    cast()                                  # so this one casts again
    assert np.all(buf[0] == -3)


def test_matmuls_widening_one_input_tile_give_the_reference_bits_as_the_inputs_change(compiled):
    """The matmuls of blocked_matmul read each input tile from HBM (its loads folded) in several
    instructions; with the widened tiles kept within a run, every run still sees its own inputs."""
    program, target, _, _ = compiled
    fast = Replay(program, target, checked=True, batch=True)
    bound = Replay(program, target, checked=True, batch=False)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        args = [(rng.standard_normal(a.shape) * (seed + 1)).astype(np.float32).astype(a.dtype) for a in _args()]
        want = Executor(program, target, checked=True).run(args)
        assert _same(fast.run(args), want) and _same(bound.run(args), want)

