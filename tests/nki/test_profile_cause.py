"""A profile that points at the cause: the per-line table, what each wait waited for, the critical path's
counts, and the scheduler's record of blockers leaving every estimated time as it was."""
from __future__ import annotations

import numpy as np
import pytest

import nki
from new_user_kernel import axpy, axpy_args as _args, line_of as _line
from nkihub.nki.compile import _compile
from nkihub.simulator.costmodel import schedule
from nkihub.simulator.report import summarize
from nkihub.simulator.targets import get_target


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", "off")
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)


def test_the_new_users_kernel_computes_what_it_says():
    x, y, a = _args(64, 256)
    np.testing.assert_allclose(np.asarray(axpy(x, y, a)), x + a * y, rtol=1e-6)


def test_profile_names_the_alpha_load_as_the_bottleneck_line_waiting_for_the_x_and_y_loads():
    r = nki.profile(axpy, *_args(), target="trn1")
    top = r.lines[0]
    assert top.source.endswith(f":{_line('src=alpha[')}") and "alpha" in top.text
    assert top.path_s == max(c.path_s for c in r.lines) and top.wait_s > 0.5 * top.path_s
    # It waits for the DMA bandwidth the x and y loads of the same iterations took first.
    assert top.waits_for.startswith("DMA bandwidth held by ")
    assert f"load of x (line {_line('src=x[')})" in top.waits_for
    assert f"load of y (line {_line('src=y[')})" in top.waits_for
    # The table opens with it, before the whole-kernel figures.
    head = r.table().splitlines()[1:4]
    assert top.source in head[0] and "alpha" in head[1] and "load of x" in head[2] and "load of y" in head[2]
    # Its busy time is small: the line costs latency by waiting, not by moving data.
    assert top.busy_s < 0.01 * top.path_s


def test_the_vector_line_waits_for_the_alpha_load_it_needs():
    r = nki.profile(axpy, *_args(), target="trn1")
    stt = next(c for c in r.lines if c.opcode == "scalar_tensor_tensor")
    assert stt.count == 8 and stt.busy_s > 0
    assert stt.waits_for.startswith(f"load of alpha (line {_line('src=alpha[')})")


def test_critical_path_and_line_counts_agree_with_the_instructions():
    tgt = get_target("trn1")
    program, sch = _compile(axpy, _args(), {}, tgt, True)
    sch = sch if sch is not None else schedule(program, tgt)
    r = summarize(sch)
    path = sch.critical_path()
    left_seg, left_n, left_s = r.critical_path_left_out
    assert r.critical_path_count == len(path)
    assert sum(c.count for c in r.critical_path) + left_n == len(path)
    assert sum(c.time_s for c in r.critical_path) + left_s == pytest.approx(
        sum(sch.end[i] - sch.start[i] for i in path))
    assert sum(c.count for c in r.lines) == r.instruction_count == len(program.instructions)
    assert sum(c.path_s for c in r.lines) == pytest.approx(sum(sch.end[i] - sch.start[i] for i in path))
    text = r.table()
    if left_seg:
        assert f"{left_n}x left out: {left_seg} shorter segments" in text
    else:
        assert "left out" not in text
    assert f"{len(path)} instructions" in text


def test_every_bandwidth_holder_moved_data_before_and_during_the_wait():
    tgt = get_target("trn1")
    program, sch = _compile(axpy, _args(), {}, tgt, True)
    sch = sch if sch is not None else schedule(program, tgt)
    waited = [i for i, w in enumerate(sch.bandwidth_wait_s) if w > 0 and sch.bandwidth_holders[i]]
    assert waited
    for i in waited:
        for j, overlap in sch.bandwidth_holders[i]:
            assert sch.queue[j].startswith("dma") and j != i and overlap > 0
            assert sch.xfer_start[j] < sch.end[i] and sch.end[j] > sch.start[i]
    assert all(w == 0 for i, w in enumerate(sch.dep_wait_s) if sch.queue[i].startswith("dma"))


# Latencies at the branch point (main f73f681), before the blockers were recorded: recording them must
# change no estimated time. (If the cost rules change later, these move with them: re-measure there.)
BRANCH_POINT = {("trn1", 64): 2.1218731092436982e-05, ("trn1", 2048): 0.00013913847899159663}


@pytest.mark.parametrize("target,f", sorted(BRANCH_POINT))
def test_recording_blockers_changes_no_estimated_time(target, f):
    tgt = get_target(target)
    program, _ = _compile(axpy, _args(f), {}, tgt, True)
    assert schedule(program, tgt).latency_s == BRANCH_POINT[(target, f)]
