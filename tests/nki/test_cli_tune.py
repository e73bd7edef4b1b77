"""``nkihub tune``: the table, the plot and the JSON report; clear errors for a bad --space."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nkihub.cli import main
from nkihub.nki.cli.tune import parse_space

KERNEL = Path(__file__).parent / "autotune_kernel.py"


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NKIHUB_DEBUG", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_tune_prints_the_table_and_writes_the_plot_and_report(tmp_path, capsys):
    rc = main(["tune", f"{KERNEL}:tiled_scale", "--shape", "512x256", "--space", "tile=64,128,256",
               "--space", "skip=False,True", "--check", f"{KERNEL}:ref", "--target", "trn1,trn2",
               "--workers", "1", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "BEST" in out and "invalid" in out and "wrong" in out and "estimate" in out
    assert "trn1: best" in out and "trn2: best" in out
    report = json.loads((tmp_path / "tiled_scale.tune.json").read_text())
    assert len(report["results"]) == 12
    assert {t: b["config"]["skip"] for t, b in report["best"].items()} == {"trn1": False, "trn2": False}
    png = (tmp_path / "tiled_scale.tune.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_tune_with_a_configs_list_and_no_reference_checks_against_the_default(tmp_path, capsys):
    rc = main(["tune", f"{KERNEL}:tiled_scale", "--shape", "256x256", "--configs",
               '[{"tile": 64}, {"tile": 128, "skip": true}]', "--workers", "1", "--no-png", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "the default config" in out


def test_no_passing_candidate_exits_1(tmp_path, capsys):
    rc = main(["tune", f"{KERNEL}:tiled_scale", "--shape", "512x256", "--space", "tile=64,256", "--workers", "1",
               "--no-png", "--out-dir", str(tmp_path), "--check", f"{KERNEL}:wrong_ref"])
    out = capsys.readouterr().out
    assert rc == 1 and "no candidate passed" in out and "BEST" not in out


@pytest.mark.parametrize("bad", ["tile", "tile=", "{not json"])
def test_bad_space_is_a_one_line_error(bad, capsys):
    rc = main(["tune", f"{KERNEL}:tiled_scale", "--shape", "256x256", "--space", bad])
    err = capsys.readouterr().err
    assert rc == 1 and "--space" in err


def test_parse_space_reads_literals_and_json():
    assert parse_space(["a=1,2", "b=True,None,'x'"]) == {"a": [1, 2], "b": [True, None, "x"]}
    assert parse_space(['{"a": [1, 2]}']) == {"a": [1, 2]}


def test_large_shapes_are_checked_on_their_own_inputs_or_on_check_shape_inputs(tmp_path, capsys):
    args = ["tune", f"{KERNEL}:tiled_scale", "--shape", "8192x256", "--space", "tile=64,128", "--check",
            f"{KERNEL}:ref", "--workers", "1", "--no-png", "--out-dir", str(tmp_path)]
    assert main(args) == 0
    assert main(args + ["--check-shape", "256x256"]) == 0
    assert "BEST" in capsys.readouterr().out
