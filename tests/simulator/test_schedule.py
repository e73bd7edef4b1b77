"""The lanes' sharing of a batched schedule (simulator.schedule): chunks pulled at run time, levels in
order, a failing lane stopping the others, and the reference bits on a Program with uneven levels."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.simulator.executor import Executor
from nkihub.simulator.replay import Replay
from nkihub.simulator.schedule import Schedule
from nkihub.simulator.threads import run_on_lanes

P = 128
WIDTHS = (64, 64, 64, 96, 32, 64, 512, 64)      # tiles of several shapes: groups of uneven sizes per level


def _level(schedule: Schedule, steps: list, costs: list | None = None) -> None:
    """Add a level whose chunk ``i`` runs ``steps[i]`` on any lane."""
    schedule.add_level(costs or [1] * len(steps), lambda i, lane: steps[i])


def _run(schedule: Schedule, timeout: float = 30.0):
    """Run ``schedule`` on two lanes from a helper thread; the lanes' results, or the exception raised.
    A run that does not finish within ``timeout`` fails the test rather than hanging the suite."""
    out: dict = {}

    def go():
        run = schedule.start()
        try:
            out["result"] = run_on_lanes([lambda lane=lane: schedule.run_lane(lane, run, None) for lane in range(2)])
        except BaseException as exc:
            out["error"] = exc
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the lanes hung"
    return out


def test_a_lane_that_finishes_early_takes_the_other_chunks():
    """The first chunk pulled blocks until every other chunk of its level ran: only a lane pulling the
    rest while the first is busy lets the level finish (a static share would leave some to the blocked
    lane). The serial level after it sees the whole level done, and the level after that sees it."""
    ran, rest_done = [], threading.Event()
    first_lane = []

    def first(ctx):
        first_lane.append(threading.current_thread().name)
        assert rest_done.wait(10), "no other lane took the remaining chunks"
        ran.append(0)

    def other(i, n):
        def step(ctx):
            ran.append(i)
            if len(ran) == n - 1:
                rest_done.set()
        return step

    def after(ctx):
        assert sorted(ran) == list(range(6))
        ran.append("serial")

    def last(ctx):
        assert "serial" in ran
        ran.append("last")

    s = Schedule(2, pool=1.0)
    _level(s, [first] + [other(i, 6) for i in range(1, 6)])
    _level(s, [after])
    _level(s, [last, last])
    out = _run(s)
    assert "error" not in out, out.get("error")
    assert ran[:6] != list(range(6)) and ran[6:] == ["serial", "last", "last"]


@pytest.mark.parametrize("failing_level", [0, 1])
def test_a_failing_chunk_raises_and_the_other_lane_stops(failing_level):
    """A step raising in one lane reaches the caller; the other lane, waiting for the level to finish,
    is released and runs no later level."""
    later, started = [], threading.Event()

    def boom(ctx):
        started.wait(5)         # let the other lane reach its wait first
        raise RuntimeError("lane failure")

    def fine(ctx):
        started.set()

    def never(ctx):
        later.append(1)
    s = Schedule(2, pool=1.0)
    if failing_level:
        _level(s, [fine])       # a serial level: lane 1 goes straight to the next one's wait
    _level(s, [boom, fine])
    _level(s, [never, never])
    out = _run(s)
    assert isinstance(out.get("error"), RuntimeError) and "lane failure" in str(out["error"])
    assert not later


def test_the_biggest_chunks_are_pinned_and_the_pool_is_bound_for_every_lane():
    """With a pool of 30% of the cost, the three smallest chunks (cost 2+2+1 of 20) are pulled, so bound
    for both lanes; the others are bound once, for the lane they are pinned to (least loaded first)."""
    bound, ran = [], []

    def bind(i, lane):
        bound.append((i, lane))
        return lambda ctx: ran.append(i)
    s = Schedule(2, pool=0.3)
    s.add_level([6, 5, 4, 2, 2, 1], bind)
    s.add_level([3], bind)
    assert sorted(bound[:-1]) == [(0, 0), (1, 1), (2, 1), (3, 0), (3, 1), (4, 0), (4, 1), (5, 0), (5, 1)]
    assert bound[-1] == (0, 0)      # a serial level: lane 0 only
    out = _run(s)
    assert "error" not in out, out.get("error")
    assert sorted(ran[:6]) == list(range(6)) and ran[6:] == [0]


@nki.jit
def uneven_kernel(x):
    """Tiles of several widths: exp and a row sum per tile (groups of uneven sizes in a level), then
    the row sums added up tile after tile (a chain of levels of one instruction each)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(acc, 0.0)
    start = 0
    for w in WIDTHS:
        cols = slice(start, start + w)
        t = nl.ndarray((P, w), dtype=x.dtype, buffer=nl.sbuf)
        e = nl.ndarray((P, w), dtype=x.dtype, buffer=nl.sbuf)
        s = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[:, cols])
        nisa.activation(dst=e, op=nl.exp, data=t, scale=0.25, reduce_op=nl.add, reduce_res=s)
        nisa.dma_copy(dst=out[:, cols], src=e)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=s, op=nl.add)
        start += w
    nisa.dma_copy(dst=total, src=acc)
    return out, total


def test_two_lanes_give_the_reference_bits_on_uneven_levels(monkeypatch):
    monkeypatch.setenv("NKIHUB_SIM_THREADS", "2")
    x = np.random.default_rng(5).standard_normal((P, sum(WIDTHS))).astype(np.float32)
    ck = uneven_kernel.specialize(x)
    want = Executor(ck.program, ck.target).run([x])
    fast = Replay(ck.program, ck.target, batch=True)
    for _ in range(4):
        got = fast.run([x])
        assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(got, want))
    assert fast.batch_note == "batched"
    schedule = fast._pool[0].schedule
    # levels shared by both lanes (pool chunks bound for each) and serial ones (the chain of adds)
    pools = [pool for _, pool, _, serial in schedule.levels if pool]
    serial = [pinned for pinned, _, _, serial in schedule.levels if serial]
    assert pools and all(len(chunk) == 2 for pool in pools for chunk in pool)
    assert len(serial) >= len(WIDTHS) and all(len(pinned[0]) == 1 and not pinned[1] for pinned in serial)
