"""The report: fields kernel engineers read, JSON and table forms, a golden file for a fixed Program."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import nki
from cost_kernels import arrays, make_matmul
from nkihub.simulator.errors import SourceLoc
from nkihub.simulator.program import AccessPattern, Instruction, Program, TensorSpec
from nkihub.simulator.report import ENGINES, estimate

GOLDEN = Path(__file__).parent / "golden" / "report_small.json"


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", "off")


def _fixed_program() -> Program:
    """load -> exp -> store of a [128, 512] fp32 tile, written by hand so the golden file is stable."""
    loc = SourceLoc("kernel.py", 3, 4, None, "    y = nl.exp(x)")
    x = TensorSpec("x", (128, 512), "float32", "hbm", "input")
    out = TensorSpec("out", (128, 512), "float32", "hbm", "output")
    t = TensorSpec("t", (128, 512), "float32", "sbuf", address=0)
    u = TensorSpec("u", (128, 512), "float32", "sbuf", address=2048)
    full = lambda name: AccessPattern(name, 0, ((512, 128), (1, 512)))
    p = Program("exp_kernel", {s.name: s for s in (x, out, t, u)}, inputs=["x"], outputs=["out"],
                meta={"target": "trn2"})
    p.instructions = [Instruction("dma_copy", "dma", {"dst": full("t")}, {"src": full("x")}, loc=loc),
                      Instruction("activation", "scalar", {"dst": full("u")}, {"data": full("t")}, {"op": "exp"}, loc=loc),
                      Instruction("dma_copy", "dma", {"dst": full("out")}, {"src": full("u")}, loc=loc)]
    return p


def test_report_matches_the_golden_file():
    got = estimate(_fixed_program(), "trn2").to_json()
    if os.environ.get("NKIHUB_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert _close(got, want)


def _close(a, b) -> bool:
    a = json.loads(json.dumps(a))
    if isinstance(b, dict):
        assert set(a) == set(b)
        return all(_close(a[k], b[k]) for k in b)
    if isinstance(b, list):
        assert len(a) == len(b)
        return all(_close(x, y) for x, y in zip(a, b))
    if isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-15)
        return True
    assert a == b
    return True


def test_report_fields_kernel_engineers_read():
    r = nki.profile(make_matmul(hoist=True), *arrays((256, 128), (256, 1024)), target="trn2")
    assert r.latency_s > 0 and 0 < r.mfu <= 1
    assert set(r.engine_active) == set(ENGINES) and all(0 <= v <= 1 for v in r.engine_active.values())
    assert r.bottleneck in ENGINES
    assert r.dma_count == 2 + 2 * 2 + 2 and r.dma_avg_bytes == r.dma_bytes / r.dma_count
    assert r.instruction_count == 2 + 2 * (2 + 2 + 1 + 1)
    # The costliest lines name kernel source lines of the kernel file.
    assert r.top and all(c.source.startswith(str(Path(__file__).parent / "cost_kernels.py")) for c in r.top)
    assert sum(c.time_s for c in r.critical_path) <= r.latency_s * (1 + 1e-9)
    assert r.critical_path_s[r.bottleneck] == max(r.critical_path_s.values())


def test_every_printed_time_is_labelled_an_estimate():
    r = estimate(_fixed_program(), "trn2")
    text = r.table()
    assert "estimate" in text.splitlines()[0]
    header = ""
    for line in text.splitlines():
        if not line.startswith("   ") and (line.rstrip().endswith(":") or "busy" in line):
            header = line       # a section header: the lines below it inherit its label
        if " us" in line:
            assert "estimate" in line or "estimate" in header, line
    assert "estimate" in r.to_json()["note"]
    assert "estimate" in json.dumps(r.to_perfetto())


def test_report_is_frozen_and_json_round_trips():
    r = estimate(_fixed_program(), "trn2")
    with pytest.raises(Exception):
        r.latency_s = 0.0
    d = r.to_json()
    assert json.loads(json.dumps(d))["latency_s"] == r.latency_s
    assert "timeline" not in d


def test_str_and_print_show_the_table(capsys):
    r = nki.profile(make_matmul(hoist=True), *arrays((256, 128), (256, 1024)), target="trn2")
    assert str(r) == r.table() and "Report(" not in str(r)
    print(r)
    assert capsys.readouterr().out.strip() == r.table().strip()


def test_an_estimate_carries_its_likely_range():
    from nkihub.simulator.uncertainty import latency_band
    r = estimate(_fixed_program(), "trn2")
    # the estimate is inside its range (the trn2 band from held-out rows lies above 1, so it is an edge)
    assert r.latency_low_s <= r.latency_s <= r.latency_high_s and r.latency_low_s < r.latency_high_s
    assert (r.latency_low_s, r.latency_high_s) == latency_band(r.latency_s, "trn2")
    assert f"{r.latency_low_s * 1e6:,.2f} us - {r.latency_high_s * 1e6:,.2f} us" in r.table()
    assert "likely" in r.timeline.title() and "likely" in json.dumps(r.to_perfetto())
