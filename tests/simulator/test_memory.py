"""Memory of the fast engine's workspaces (simulator.memory): regions packed by liveness never share a byte
while both are live, arenas hand their pages back and stay usable, and what the process keeps between
runs is capped (the least recently used holder is shed first, never one in use or the one just used)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nkihub.simulator import memory
from nkihub.simulator.memory import ALIGN, Arena, pack

regions = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 20), st.integers(1, 5000)), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(regions)
def test_regions_live_at_once_never_share_a_byte(spec):
    items = [(start, start + length, nbytes) for start, length, nbytes in spec]
    offsets, total = pack(items)
    assert all(off % ALIGN == 0 and off + n <= total for off, (_, _, n) in zip(offsets, items))
    for i, (s1, e1, n1) in enumerate(items):
        for j in range(i):
            s2, e2, n2 = items[j]
            if s1 <= e2 and s2 <= e1:       # live at a common time
                assert offsets[i] + n1 <= offsets[j] or offsets[j] + n2 <= offsets[i]


def test_regions_that_are_not_live_at_once_share_bytes():
    offsets, total = pack([(0, 1, 4096), (2, 3, 4096), (4, 5, 4096), (0, 5, 64)])
    assert offsets[0] == offsets[1] == offsets[2] and total == 4096 + 64


def test_a_released_arena_reads_zeros_and_stays_usable():
    arena = Arena(4096, 8 << 20)
    kept = arena.array(0, 16, np.float32, kept=True)
    data = arena.array(0, 1 << 20, np.float32)
    kept[...], data[...] = 7, 3
    assert arena.release()
    assert (kept == 7).all() and not data.any()     # the kept part survives, the rest is fresh zeros
    data[...] = 5
    assert (data == 5).all()


class _Holder:
    def __init__(self, nbytes):
        self.busy, self.nbytes, self.shed_calls = 0, nbytes, 0

    def held_bytes(self):
        return self.nbytes

    def shed(self):
        self.shed_calls += 1
        self.nbytes = 0
        return True


def test_the_process_keeps_at_most_its_cap_shedding_the_least_recently_used_first():
    small = Arena(0, 1 << 20)      # below RELEASE_MIN_BYTES: held, never released for its own sake
    old, new = _Holder(3 << 20), _Holder(3 << 20)
    for h in (old, new):
        memory.take(small, h)
        memory.put_back(small, 10.0, 5 << 20, h)
    assert old.shed_calls == 1 and new.shed_calls == 0


def test_neither_a_holder_in_use_nor_the_one_just_used_is_shed():
    small = Arena(0, 1 << 20)
    busy, other = _Holder(3 << 20), _Holder(3 << 20)
    memory.take(small, busy, other)
    memory.put_back(small, 10.0, 1 << 20, other)     # ``busy`` is still running; ``other`` just ran
    assert busy.shed_calls == 0 and other.shed_calls == 0
    memory.done(1 << 20, busy)                        # a kernel bigger than the cap keeps its own memory
    assert busy.shed_calls == 0 and other.shed_calls == 1


def test_a_long_run_releases_its_arena_and_a_short_one_keeps_it():
    for run_s, kept in ((100.0, False), (0.001, True)):
        arena = Arena(0, memory.RELEASE_MIN_BYTES)
        memory.take(arena)
        arena.array(0, arena.releasable, np.uint8)[:: 1 << 16] = 1
        memory.put_back(arena, run_s, 1 << 40)
        assert arena.resident == kept
