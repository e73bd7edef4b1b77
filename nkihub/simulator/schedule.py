"""How the lanes share a batched schedule at run time: each level's chunks pinned to a lane, then a
shared pool of the smallest ones pulled from one counter.

A ``Schedule`` holds the steps of a batched plan (``simulator.batching.bind_batches``) level by level;
chunks of one level are independent. Sharing them out by an estimate of their cost alone leaves a lane
idle whenever the estimate misprices a step (an exp costs more per element than a copy) or a lane is
slowed at run time (it waits for the GIL, or loses its core to another process). So only the biggest
chunks, ``1 - pool`` of a level's estimated cost, are pinned (to the least loaded lane, biggest first);
the rest, the smallest chunks, form the level's pool: a lane done with its pinned chunks pulls the next
pool chunk, biggest first, until none is left. A pinned chunk is bound for its lane only; a pool chunk
for every lane (its work arrays live in that lane's ``Scratch``; binding is paid once per Program, see
docs/simulator.md), so whichever lane runs it computes the same values into the same storage.

A lane starts a level once every chunk of the level before is done. A level of one chunk ("serial")
is run by lane 0 alone, so a run of serial levels costs no waiting.
"""
from __future__ import annotations

import itertools
import threading

# The share of a level's estimated cost left to the pool (1.0: every chunk is pulled; 0.0: a static
# share by the estimate). Measured in docs/simulator.md "Engines and speed".
POOL = 0.5


class Schedule:
    """The steps of a batched plan for ``lanes`` lanes, level by level (``add_level``). ``pool``: the
    share of each level's estimated cost pulled at run time (default ``POOL``)."""

    def __init__(self, lanes: int, pool: float | None = None):
        self.lanes = lanes
        self.pool = POOL if pool is None else pool
        # per level: (pinned steps per lane, pool chunks [steps per lane], chunks in all, serial)
        self.levels: list = []
        self.bound = 0      # steps bound (a pool chunk once per lane)

    def add_level(self, costs: list, bind) -> None:
        """Append a level of ``len(costs)`` chunks with estimated ``costs`` (biggest first); ``bind(i,
        lane)`` returns chunk ``i``'s step bound for ``lane``, called once per lane that may run it."""
        n = len(costs)
        self.bound += n
        if n == 1 or self.lanes == 1:
            self.levels.append(([[bind(i, 0) for i in range(n)]] + [[] for _ in range(self.lanes - 1)], [], n,
                                n == 1))
            return
        budget, start = self.pool * sum(costs), n
        while start > 0 and costs[start - 1] <= budget:
            start -= 1
            budget -= costs[start]
        pinned: list = [[] for _ in range(self.lanes)]
        load = [0] * self.lanes
        for i in range(start):
            lane = load.index(min(load))
            pinned[lane].append(bind(i, lane))
            load[lane] += costs[i]
        pool = [[bind(i, lane) for lane in range(self.lanes)] for i in range(start, n)]
        self.bound += (self.lanes - 1) * (n - start)
        self.levels.append((pinned, pool, n, False))

    def steps(self) -> list:
        """Every step in run order on one lane (valid for a one-lane schedule)."""
        assert self.lanes == 1
        return [step for pinned, _, _, _ in self.levels for step in pinned[0]]

    def start(self) -> "_Run":
        """The shared state of one run (counters and completion events, one set per level)."""
        return _Run(len(self.levels))

    def run_lane(self, lane: int, run: "_Run", ctx) -> None:
        """Run lane ``lane``'s share of ``run``. A step's exception propagates from the lane that raised
        it; the other lanes stop at their next level without raising (so the caller sees the error)."""
        try:
            for li, (pinned, pool, n, serial) in enumerate(self.levels):
                if serial and lane:
                    continue
                # the level before done means every earlier one is (its chunks waited in turn)
                if li and not run.wait(li - 1):
                    return
                done = run.dones[li]
                for step in pinned[lane]:
                    step(ctx)
                    if next(done) == n:
                        run.ready[li].set()
                if pool:
                    pull, m = run.pulls[li], len(pool)
                    i = next(pull)
                    while i < m:
                        pool[i][lane](ctx)
                        if next(done) == n:
                            run.ready[li].set()
                        i = next(pull)
        except BaseException:
            run.abort()
            raise


class _Run:
    """Counters of one run: ``pulls[l]`` hands out level l's pool chunks, ``dones[l]`` counts its finished
    chunks (from 1, so the lane finishing the last one sees the level's size), ``ready[l]`` is set then.
    ``next`` on an ``itertools.count`` is one C call, atomic under the GIL."""

    def __init__(self, levels: int):
        self.pulls = [itertools.count() for _ in range(levels)]
        self.dones = [itertools.count(1) for _ in range(levels)]
        self.ready = [threading.Event() for _ in range(levels)]
        self.failed = False

    def wait(self, level: int) -> bool:
        """Wait until every chunk of ``level`` is done; False when a lane failed meanwhile."""
        self.ready[level].wait()
        return not self.failed

    def abort(self) -> None:
        """A lane failed: release every lane waiting for a level."""
        self.failed = True
        for ev in self.ready:
            ev.set()
