"""The calibration set (benchmarks/calibration): its rows file is complete and checked, a kernel is read from
a git snapshot at the row's commit and imported from a scratch folder, Autocomp traces are read without
being evaluated, and the bench's summary computes MAPE and the band count as stated."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

from bench_calibration import held_out_band, summary  # noqa: E402
from calibration.rows import (KINDS, RowError, Snapshots, arguments, candidate_code,  # noqa: E402
                              doc_code_block, jit_function_name, load)


def test_the_rows_file_is_complete():
    rows = load()
    assert len(rows) >= 20
    assert {r.target for r in rows} >= {"trn1", "trn2"}
    assert {r.kind for r in rows} == set(KINDS)
    held = [r for r in rows if r.split == "held-out"]
    assert held and len(held) < len(rows)
    for r in rows:   # a precise address: a pinned commit for the code, a link for the number
        assert r.source.startswith("https://") and len(r.kernel["commit"]) == 40, r.id


def _write(tmp_path, text: str) -> Path:
    p = tmp_path / "rows.toml"
    p.write_text(text)
    return p


GOOD = '''[[rows]]
id = "x"
kind = "matmul"
target = "trn1"
split = "fit"
measured_us = 10.0
statistic = "p50"
source = "https://example.invalid"
where = "table"
kernel = { repo = "o/r", commit = "c", path = "k.py", function = "f" }
args = [["bfloat16", [128, 64]], 0.5]
kwargs = { pad = [[0, 0], [1, 1]] }
'''


def test_a_row_is_read_with_its_arguments(tmp_path):
    (row,) = load(_write(tmp_path, GOOD))
    args, kwargs = arguments(row)
    assert args[0].shape == (128, 64) and args[0].dtype.name == "bfloat16" and args[1] == 0.5
    assert kwargs == {"pad": ((0, 0), (1, 1))}


@pytest.mark.parametrize("edit, rule", [
    (lambda s: s.replace('kind = "matmul"', 'kind = "conv"'), "kind 'conv' is not one of"),
    (lambda s: s.replace('split = "fit"', 'split = "train"'), "split 'train'"),
    (lambda s: s.replace('measured_us = 10.0\n', ''), "missing measured_us"),
    (lambda s: s.replace(', path = "k.py", function = "f"', ''), "kernel needs repo, commit and path"),
    (lambda s: s + "\n" + s, "id 'x' is used twice"),
])
def test_a_broken_row_names_itself_and_the_rule(tmp_path, edit, rule):
    with pytest.raises(RowError, match=rule) as err:
        load(_write(tmp_path, edit(GOOD)))
    assert "row 1 (x)" in str(err.value) or "row 2 (x)" in str(err.value)


TRACE = '''CodeCandidate(parent=CodeCandidate(parent=None, plan=None,
code=\'\'\'@nki.jit
def first(a):
  return a
\'\'\', score=2.0), plan='p', code=\'\'\'@nki.jit
def better(a):
  return a
\'\'\', score=1.0)'''


def test_trace_candidates_are_read_not_run():
    assert jit_function_name(candidate_code(TRACE, 0)) == "first"
    assert jit_function_name(candidate_code(TRACE, 1)) == "better"
    with pytest.raises(RowError, match="no candidate 2"):
        candidate_code(TRACE, 2)
    with pytest.raises(ValueError):   # anything but literals in the expression is refused
        candidate_code("CodeCandidate(parent=None, code=__import__('os').getcwd())", 0)


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def test_a_kernel_is_read_at_its_commit_and_imported_from_scratch(tmp_path):
    repo = tmp_path / "snaps" / "someone+kernels"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    kernel = ("import nki\nimport nki.language as nl\n\n@nki.jit\ndef twice(x):\n"
              "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
              "    nl.store(out, nl.add(nl.load(x), nl.load(x)))\n    return out\n")
    (repo / "k.py").write_text(kernel)
    _git(repo, "add", "k.py")
    _git(repo, "commit", "-q", "-m", "k")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (repo / "k.py").write_text("raise SystemExit('the working tree is not what runs')\n")
    rows = load(_write(tmp_path, GOOD.replace('repo = "o/r", commit = "c", path = "k.py", function = "f"',
                                              f'repo = "someone/kernels", commit = "{commit}", path = "k.py", '
                                              'function = "twice"')))
    snaps = Snapshots([tmp_path / "snaps"], tmp_path / "scratch")
    fn = snaps.kernel(rows[0])
    copied = tmp_path / "scratch" / f"someone+kernels@{commit[:12]}" / "k.py"
    assert copied.read_text() == kernel
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(fn(x), 2 * x)
    with pytest.raises(FileNotFoundError, match="clone https://github.com/o/r"):
        Snapshots([tmp_path / "none"], tmp_path / "scratch").text("o/r", "c", "k.py")


def test_summary_is_mape_and_the_band_count():
    res = [{"target": "trn1", "split": "fit", "ratio": r} for r in (0.5, 1.0, 1.2)]
    res += [{"target": "trn1", "split": "held-out", "ratio": 2.0}, {"target": "trn2", "split": "fit", "ratio": None}]
    s = summary(res)
    assert s["trn1/fit"]["rows"] == 3 and s["trn1/fit"]["mape"] == pytest.approx((0.5 + 0 + 0.2) / 3)
    assert s["trn1/fit"]["within_band"] == 2 and s["trn1/all"]["rows"] == 4
    assert s["trn1/held-out"]["log_ratio_quantiles"]["p50"] == pytest.approx(math.log(2.0))
    assert "trn2/fit" not in s


def test_at_least_a_third_of_each_targets_rows_is_held_out_on_trn2():
    trn2 = [r for r in load() if r.target == "trn2" and not r.excluded]
    held = [r for r in trn2 if r.split == "held-out"]
    assert len(held) * 3 >= len(trn2), [r.id for r in held]


DOC = """Some prose.

.. code-block:: python

    import nki

    @nki.jit
    def k(a):
      return a

More prose at the margin.

.. code-block:: bash

    echo no
"""


def test_a_doc_code_block_is_its_dedented_body():
    code = doc_code_block(DOC, 3)
    assert code == "import nki\n\n@nki.jit\ndef k(a):\n  return a\n"
    assert jit_function_name(code) == "k"
    with pytest.raises(RowError, match="line 14 .* not a '.. code-block:: python'"):
        doc_code_block(DOC, 14)   # a bash block is not a kernel


def test_the_uncertainty_band_comes_from_held_out_rows_only():
    rows = ([{"target": "trn2", "split": "fit", "ratio": 3.0}] +
            [{"target": "trn2", "split": "held-out", "ratio": x} for x in (0.9, 1.1, 1.2)] +
            [{"target": "trn1", "split": "fit", "ratio": 1.0}, {"target": "trn1", "split": "held-out", "ratio": None}])
    band = held_out_band(rows)
    assert band == {"trn2": {"band": (0.9, 1.2), "rows": 3, "from": "min..max"}}   # the fit row's 3.0 is not in it
    many = [{"target": "trn1", "split": "held-out", "ratio": 0.5 + 0.1 * k} for k in range(11)]   # 0.5..1.5
    b = held_out_band(many)["trn1"]
    assert b["from"] == "p10..p90" and b["band"] == (0.6, 1.4)
