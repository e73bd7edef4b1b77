"""The fast engine (simulator.replay): the reference executor's bits with and without batching, on any
number of threads, its settings, its fallbacks and its cross-check."""
from __future__ import annotations

import dataclasses
import inspect
import threading
import time

import ml_dtypes
import numpy as np
import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.simulator.batching import plan_batches
from nkihub.simulator.errors import SimulationError
from nkihub.simulator.executor import Executor
from nkihub.simulator.isa import OPS
from nkihub.simulator.program import AccessPattern, Instruction, Program, TensorSpec
from nkihub.simulator import replay as replay_module
from nkihub.simulator.replay import BATCH_MIN_INSTRUCTIONS, Replay, executor_for
from nkihub.simulator.threads import run_on_lanes

P, F = 128, 64


@nki.jit
def ring_kernel(x, scale):
    """Per 128-row tile: load into a 2-slot SBUF ring, exp(scale * x) into a second ring, row sums into
    a third, store. Slot reuse orders the tiles on the machine; renamed, they are independent."""
    n = x.shape[0] // P
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ring = nl.ndarray((P, 2, F), dtype=x.dtype, buffer=nl.sbuf)
    res = nl.ndarray((P, 2, F), dtype=x.dtype, buffer=nl.sbuf)
    acc = nl.ndarray((P, 2, 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in range(n):
        rows = slice(i * P, (i + 1) * P)
        nisa.dma_copy(dst=ring[:, i % 2, :], src=x[rows, :])
        nisa.activation(dst=res[:, i % 2, :], op=nl.exp, data=ring[:, i % 2, :], scale=scale,
                        reduce_op=nl.add, reduce_res=acc[:, i % 2, :])
        nisa.dma_copy(dst=out[rows, :], src=res[:, i % 2, :])
        nisa.dma_copy(dst=sums[rows, :], src=acc[:, i % 2, :])
    return out, sums


def _x(tiles=6, dtype=ml_dtypes.bfloat16, seed=0):
    return np.random.default_rng(seed).standard_normal((tiles * P, F)).astype(np.float32).astype(dtype)


def _bits_equal(got, want):
    return all(np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))
               for a, b in zip(got, want))


def _compiled(x, scale=0.5):
    ck = ring_kernel.specialize(x, scale)
    return ck.program, ck.target


def test_engine_setting(monkeypatch):
    prog, target = _compiled(_x(2))
    monkeypatch.delenv("NKIHUB_SIM_ENGINE", raising=False)
    assert isinstance(executor_for(prog, target), Replay)
    monkeypatch.setenv("NKIHUB_SIM_ENGINE", "reference")
    assert isinstance(executor_for(prog, target), Executor)
    monkeypatch.setenv("NKIHUB_SIM_ENGINE", "quick")
    with pytest.raises(ValueError, match="NKIHUB_SIM_ENGINE"):
        executor_for(prog, target)


def test_ring_slots_are_renamed_so_the_tiles_form_one_batch():
    x = _x(6)
    prog, target = _compiled(x)
    groups = plan_batches(prog).groups
    assert any(len(g.members) == 6 and prog.instructions[g.members[0]].opcode == "activation" for g in groups)
    assert len(groups) < len(prog.instructions) // 3
    want = Executor(prog, target).run([x])
    assert _bits_equal(Replay(prog, target, batch=True).run([x]), want)


@nki.jit
def act_kernel(x, op):
    """Per [128, W] tile: op(0.75 x) into SBUF with its row sums, both stored (renamed, one stack)."""
    n, w = x.shape[0] // P, x.shape[1]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in range(n):
        rows = slice(i * P, (i + 1) * P)
        t = nl.ndarray((P, w), dtype=x.dtype, buffer=nl.sbuf)
        res = nl.ndarray((P, w), dtype=x.dtype, buffer=nl.sbuf)
        acc = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[rows, :])
        nisa.activation(dst=res, op=op, data=t, scale=0.75, reduce_op=nl.add, reduce_res=acc)
        nisa.dma_copy(dst=out[rows, :], src=res)
        nisa.dma_copy(dst=sums[rows, :], src=acc)
    return out, sums


@pytest.mark.parametrize("op", [nl.gelu, nl.gelu_apprx_tanh, nl.sigmoid, nl.silu, nl.rsqrt])
def test_activations_of_many_numpy_calls_run_in_blocks_with_the_reference_bits(monkeypatch, op):
    """Stacked tiles of 6 x [128, 512] (far above ``elementwise.ACT_BLOCK``) with NaN, infinities and
    huge values among them: computed block by block, the same bits as the reference per tile."""
    from nkihub.simulator.isa import elementwise
    monkeypatch.setenv("NKIHUB_SIM_THREADS", "2")
    x = np.random.default_rng(5).standard_normal((6 * P, 512)).astype(np.float32) * 4
    specials = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 0.0, -0.0], np.float32)
    picked = x.reshape(-1)[::997]
    picked[...] = specials[np.arange(picked.size) % specials.size]
    x = x.astype(ml_dtypes.bfloat16)
    ck = act_kernel.specialize(x, op)
    groups = plan_batches(ck.program).groups
    acts = [g for g in groups if ck.program.instructions[g.members[0]].opcode == "activation"]
    assert len(acts) == 1 and len(acts[0].members) * P * 512 > 8 * elementwise.ACT_BLOCK
    want = Executor(ck.program, ck.target).run([x])
    fast = Replay(ck.program, ck.target, batch=True)
    assert _bits_equal(fast.run([x]), want) and _bits_equal(fast.run([x]), want)


@pytest.mark.parametrize("threads", ["0", "1", "2"])
def test_every_thread_setting_gives_the_reference_bits(monkeypatch, threads):
    monkeypatch.setenv("NKIHUB_SIM_THREADS", threads)
    x = _x(8, np.float32, 3)
    prog, target = _compiled(x, 1.5)
    want = Executor(prog, target).run([x])
    for batch in (False, True):
        fast = Replay(prog, target, batch=batch)
        assert _bits_equal(fast.run([x]), want) and _bits_equal(fast.run([x]), want)


def test_batching_starts_once_the_plan_made_after_the_calls_is_complete(monkeypatch):
    monkeypatch.delenv("NKIHUB_SIM_BATCH", raising=False)
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "inf")
    big, small = _x(BATCH_MIN_INSTRUCTIONS // 4 + 1), _x(2)
    for x, expect in ((big, "batched"), (small, "too few instructions")):
        rp = Replay(*_compiled(x))
        assert rp.batch_note == "not tried yet"
        rp.run([x])
        assert rp.batch_note.startswith(expect) and rp._pool[0].batches is None
        rp.run([x])
        assert rp._pool[-1].batches is (rp._batches or None)
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "0")
    rp = Replay(*_compiled(big))
    rp.run([big]), rp.run([big])
    assert rp.batch_note == "planning" and rp._pool[-1].batches is None
    monkeypatch.setenv("NKIHUB_SIM_BATCH", "0")
    rp = Replay(*_compiled(big))
    rp.run([big]), rp.run([big])
    assert rp.batch_note == "not tried yet"
    monkeypatch.setenv("NKIHUB_SIM_BATCH", "always")
    rp = Replay(*_compiled(small))
    rp.run([small])
    assert rp.batch_note == "batched"


def test_the_call_that_binds_plans_nothing_and_a_slice_past_its_budget_is_paid_by_the_next_calls(monkeypatch):
    monkeypatch.delenv("NKIHUB_SIM_BATCH", raising=False)
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "0.1")
    x = _x(BATCH_MIN_INSTRUCTIONS // 4 + 1)
    rp = Replay(*_compiled(x))
    rp.run([x])
    assert rp.batch_note == "planning" and inspect.getgeneratorstate(rp._planner) == inspect.GEN_CREATED
    clock, slices = [0.0], []

    def planner():      # every slice takes 3 s of a clock the test moves
        while True:
            clock[0] += 3.0
            slices.append(clock[0])
            yield
    monkeypatch.setattr(replay_module.time, "perf_counter", lambda: clock[0])
    rp._planner = planner()
    rp._advance(1.0, bound=True)
    assert slices == []
    rp._advance(1.0)            # one slice: 2 s past the budget
    assert len(slices) == 1
    rp._advance(1.0)            # pays 1 s of the debt
    rp._advance(1.0)            # pays the rest
    assert len(slices) == 1
    rp._advance(1.0)
    assert len(slices) == 2


@pytest.mark.parametrize("slower", ["batched", "unbatched"])
def test_a_completed_plan_is_kept_only_when_its_runs_beat_the_unbatched_steps(monkeypatch, slower):
    """The plan made after the calls is tried for TRIAL_RUNS runs against the unbatched runs before it; the
    slower side is dropped, and falling back reuses the unbatched workspace (nothing bound again)."""
    monkeypatch.delenv("NKIHUB_SIM_BATCH", raising=False)
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "0")     # no time for the plan while the unbatched runs are timed
    x = _x(BATCH_MIN_INSTRUCTIONS // 4 + 1)
    prog, target = _compiled(x)
    want = Executor(prog, target).run([x])
    rp = Replay(prog, target)
    plain_run = rp._run

    def run(ws, inputs, ctx):     # the slower side waits 50 ms more than its run
        if (ws.batches is None) == (slower == "unbatched"):
            time.sleep(0.05)
        return plain_run(ws, inputs, ctx)
    monkeypatch.setattr(rp, "_run", run)
    for _ in range(1 + replay_module.TRIAL_RUNS):       # the first call binds and is not timed
        assert _bits_equal(rp.run([x]), want) and rp.batch_note == "planning" and rp.settling
    unbatched = rp._pool[0]
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "inf")
    assert _bits_equal(rp.run([x]), want)
    assert rp.batch_note == "batched" + replay_module.ON_TRIAL
    for n in range(replay_module.TRIAL_RUNS):
        assert _bits_equal(rp.run([x]), want)
        on_trial = n < replay_module.TRIAL_RUNS - 1
        assert (unbatched in rp._pool) is (on_trial or slower == "batched")
        assert rp.batch_note.endswith(replay_module.ON_TRIAL) is on_trial and rp.settling is on_trial
    runs = unbatched.runs
    assert _bits_equal(rp.run([x]), want)
    if slower == "batched":
        assert rp.batch_note.startswith("not batched: its best run of 3 took ")
        assert "the unbatched steps' " in rp.batch_note and rp._batches is False
        assert rp._pool == [unbatched] and unbatched.runs == runs + 1 and rp.held_bytes() == unbatched.step_bytes
    else:
        assert rp.batch_note == "batched" and all(w.batches is rp._batches for w in rp._pool)


def test_a_plan_made_before_any_timed_unbatched_run_is_not_tried(monkeypatch):
    monkeypatch.delenv("NKIHUB_SIM_BATCH", raising=False)
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "inf")     # the binding call plans it all
    x = _x(BATCH_MIN_INSTRUCTIONS // 4 + 1)
    rp = Replay(*_compiled(x))
    for _ in range(2 + replay_module.TRIAL_RUNS):
        rp.run([x])
        assert rp.batch_note == "batched" and rp._trial is None


def test_the_call_completing_a_large_plan_makes_the_collectors_full_pass(monkeypatch):
    """A plan's objects would otherwise meet the cyclic collector's next full pass in a later, batched run."""
    import gc
    from nkihub.simulator import replay
    monkeypatch.delenv("NKIHUB_SIM_BATCH", raising=False)
    monkeypatch.setenv("NKIHUB_SIM_PLAN_BUDGET", "inf")
    x = _x(BATCH_MIN_INSTRUCTIONS // 4 + 1)
    full = []

    def seen(phase, info):
        if phase == "stop" and info["generation"] == 2:
            full.append(info)
    gc.callbacks.append(seen)
    try:
        for threshold, expect in ((10 ** 9, False), (1, True)):
            monkeypatch.setattr(replay, "FULL_PASS_INSTRUCTIONS", threshold)
            rp = Replay(*_compiled(x))
            full.clear()
            thresholds = gc.get_threshold()
            gc.set_threshold(10 ** 9)     # no pass of the collector's own during the call
            try:
                rp.run([x])
            finally:
                gc.set_threshold(*thresholds)
            assert rp.batch_note.startswith("batched") and bool(full) is expect
    finally:
        gc.callbacks.remove(seen)


def test_concurrent_runs_from_python_threads():
    xs = [_x(4, np.float32, s) for s in range(6)]
    prog, target = _compiled(xs[0])
    want = [Executor(prog, target).run([x]) for x in xs]
    fast, errors = Replay(prog, target, batch=True), []

    def work(i):
        for _ in range(3):
            if not _bits_equal(fast.run([xs[i]]), want[i]):
                errors.append(i)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def _failing_program() -> Program:
    """An unchecked Program whose second DMA moves 6 elements into 8 (a defect only a run finds)."""
    p = Program("bad")
    for t in (TensorSpec("x", (2, 4), "float32", "hbm", "input"), TensorSpec("t", (2, 4), "float32", "sbuf"),
              TensorSpec("o", (2, 4), "float32", "hbm", "output")):
        p.add_tensor(t)
    p.inputs, p.outputs = ["x"], ["o"]
    whole = AccessPattern.row_major
    p.instructions = [Instruction("dma_copy", "dma", {"dst": whole("t", (2, 4))}, {"src": whole("x", (2, 4))}),
                      Instruction("dma_copy", "dma", {"dst": whole("o", (2, 4))}, {"src": whole("t", (2, 3))})]
    return p


def test_a_failing_batched_run_is_replayed_unbatched_to_locate_the_error():
    rp = Replay(_failing_program(), batch=True)
    with pytest.raises(SimulationError, match="dma_copy failed in the simulator"):
        rp.run([np.ones((2, 4), np.float32)])
    assert "replaying unbatched" in rp.batch_note


def test_crosscheck_catches_a_bind_that_differs(monkeypatch):
    x = _x(2, np.float32)
    prog, target = _compiled(x)

    def wrong(ins, src, dst, scratch):
        return lambda ctx: dst["dst"].fill(0)
    monkeypatch.setitem(OPS, "activation", dataclasses.replace(OPS["activation"], bind=wrong))
    monkeypatch.setenv("NKIHUB_SIM_CROSSCHECK", "1")
    with pytest.raises(SimulationError, match="differs from the reference executor in output 'out'"):
        Replay(prog, target, batch=False).run([x])    # unbatched: bound from the first call


def test_a_bind_meets_an_attribute_it_does_not_know_and_execute_runs():
    x = _x(2, np.float32)
    prog, target = _compiled(x)
    prog = dataclasses.replace(prog, instructions=[
        dataclasses.replace(i, attrs={**i.attrs, "new_knob": 1}) if i.opcode == "activation" else i
        for i in prog.instructions])
    assert _bits_equal(Replay(prog, target, batch=True).run([x]), Executor(prog, target).run([x]))


def test_unchecked_programs_see_fresh_nan_every_run():
    """Run 1 writes an internal tile; run 2 skips the write (predicate false) and must see NaN again."""
    p = Program("t")
    for t in (TensorSpec("pred", (1, 4), "float32", "sbuf", "input"), TensorSpec("tmp", (1, 4), "float32", "sbuf"),
              TensorSpec("o", (1, 4), "float32", "sbuf", "output")):
        p.add_tensor(t)
    p.inputs, p.outputs = ["pred"], ["o"]
    whole = AccessPattern.row_major("tmp", (1, 4))
    p.instructions = [Instruction("tensor_copy_predicated", "vector", {"dst": whole},
                                  {"predicate": AccessPattern.row_major("pred", (1, 4))}, {"value": 7.0}),
                      Instruction("tensor_copy", "vector", {"dst": AccessPattern.row_major("o", (1, 4))},
                                  {"src": whole})]
    for batch in (False, True):
        rp = Replay(p, batch=batch)
        assert (rp.run([np.ones((1, 4), np.float32)])[0] == 7).all()
        assert np.isnan(rp.run([np.zeros((1, 4), np.float32)])[0]).all()


def test_lanes_run_tasks_with_one_torch_thread_and_report_errors():
    assert run_on_lanes([torch.get_num_threads, torch.get_num_threads]) == [1, 1]

    def boom():
        raise RuntimeError("lane failure")
    with pytest.raises(RuntimeError, match="lane failure"):
        run_on_lanes([lambda: 1, boom])
