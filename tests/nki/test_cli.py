"""The ``nki`` command: compile, profile, simulate, and one-line errors."""
from __future__ import annotations

import json
import textwrap

import pytest

from nkihub.cli import main

KERNEL = textwrap.dedent('''
    import numpy as np
    import nki
    import nki.language as nl

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) + nl.load(b))
        return out

    def add_ref(a, b):
        return a + b

    def wrong_ref(a, b):
        return a - b
''')


@pytest.fixture
def kfile(tmp_path, monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NKIHUB_DEBUG", raising=False)
    path = tmp_path / "kern.py"
    path.write_text(KERNEL)
    return path


def test_compile_writes_the_artifact(kfile, tmp_path, capsys):
    out = tmp_path / "add.json"
    rc = main(["compile", f"{kfile}:add", "--shape", "128x256", "--shape", "128x256", "--dtype", "bfloat16",
               "--target", "trn1", "-o", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["meta"]["compile"]["target"] == "trn1"
    assert {t["dtype"] for t in data["tensors"] if t["kind"] == "input"} == {"bfloat16"}
    assert str(out) in capsys.readouterr().out


def test_profile_prints_the_report_and_writes_trace_and_png(kfile, tmp_path, capsys):
    rc = main(["profile", f"{kfile}:add", "--shape", "128x256", "--shape", "128x256", "--out-dir",
               str(tmp_path), "--json"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "estimated latency" in text and "(estimate)" in text
    assert json.loads((tmp_path / "add.trn2.trace.json").read_text())["traceEvents"]
    assert (tmp_path / "add.trn2.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "add.trn2.report.json").read_text())["kernel"] == "add"


def test_simulate_compares_with_a_reference(kfile, capsys):
    args = ["simulate", f"{kfile}:add", "--shape", "128x64", "--shape", "128x64"]
    assert main(args + ["--reference", f"{kfile}:add_ref"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(args + ["--reference", f"{kfile}:wrong_ref"]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_errors_are_one_line_with_a_debug_hint(kfile, capsys):
    rc = main(["compile", f"{kfile}:add", "--shape", "128x256", "--shape", "64x256"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 2
    assert err[0].startswith("nkihub compile: error:") and "kern.py:" in err[0] and "shape-mismatch" in err[0]
    assert "NKIHUB_DEBUG=1" in err[1]
    assert main(["profile", f"{kfile}:nope", "--shape", "128x8"]) == 1
    assert "no 'nope'" in capsys.readouterr().err
    assert main(["simulate", "missing.py:add"]) == 1
    assert main(["compile", f"{kfile}:add", "--shape", "12xq"]) == 1


def test_debug_variable_shows_the_traceback(kfile, monkeypatch):
    monkeypatch.setenv("NKIHUB_DEBUG", "1")
    with pytest.raises(ValueError):
        main(["compile", f"{kfile}:add", "--shape", "0x3"])


@pytest.mark.parametrize("command", ["profile", "compile", "simulate"])
def test_too_few_shapes_name_the_parameter_and_how_to_give_it(kfile, capsys, command):
    assert main([command, f"{kfile}:add", "--shape", "128x256"]) == 1
    err = capsys.readouterr().err.splitlines()[0]
    assert err.startswith(f"nkihub {command}: error:")
    assert "parameter 'b' has no value" in err and "in order (a, b; 1 given)" in err
    assert "--shape 128x512" in err and "--arg b=VALUE" in err
    assert "missing a required argument" not in err


def test_too_many_shapes_say_how_many_parameters_there_are(kfile, capsys):
    assert main(["profile", f"{kfile}:add", "--shape", "128x8", "--shape", "128x8", "--shape", "128x8"]) == 1
    assert "3 --shape flags for add, which takes 2 positional parameters (a, b)" in capsys.readouterr().err
