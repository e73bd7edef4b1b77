"""Timelines: Perfetto/Chrome trace JSON with one thread per engine lane, and a PNG Gantt chart."""
from __future__ import annotations

import json

import pytest

import nki
from cost_kernels import arrays, make_matmul
from nkihub.simulator.costmodel import schedule
from nkihub.simulator.timeline import Timeline


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", "off")


@pytest.fixture(scope="module")
def timeline():
    prog = nki.compile(make_matmul(hoist=False), *arrays((256, 128), (256, 1024)), target="trn2", cache=False)
    return prog, schedule(prog), Timeline.from_schedule(schedule(prog))


def test_perfetto_json_has_one_thread_per_lane_and_every_instruction(timeline):
    prog, sch, tl = timeline
    trace = json.loads(json.dumps(tl.to_perfetto()))
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert sorted(names.values()) == sorted(tl.lanes)
    assert tl.lanes[0] == "tensor" and "vector" in tl.lanes and any(l.startswith("dma") for l in tl.lanes)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["args"]["instruction"] for e in slices} == set(range(len(prog.instructions)))
    for e in slices:
        i = e["args"]["instruction"]
        assert names[e["tid"]] == sch.queue[i]
        assert sch.start[i] * 1e6 - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= sch.end[i] * 1e6 + 1e-6
    assert max(e["ts"] + e["dur"] for e in slices) == pytest.approx(sch.latency_s * 1e6)
    assert "estimate" in trace["traceEvents"][0]["args"]["name"]


def test_slices_on_a_compute_lane_never_overlap(timeline):
    _, _, tl = timeline
    for lane in ("tensor", "vector"):
        spans = sorted((e[2], e[3]) for e in tl.events if e[0] == lane)
        assert all(a[1] <= b[0] + 1e-15 for a, b in zip(spans, spans[1:]))


def test_png_gantt_chart_is_written(timeline, tmp_path):
    _, _, tl = timeline
    path = tl.save_png(tmp_path / "t.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    saved = tl.save_perfetto(tmp_path / "t.json")
    assert json.loads(saved.read_text())["otherData"]["kernel"] == tl.kernel
