"""The nki-library compatibility harness (benchmarks/nkilib_harness.py): its match rule, its stand-in for
the references' SDK-only dependency, and the stage a row reaches, on a tiny library snapshot made here."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import nkilib_harness  # noqa: E402
from nkilib_compat import standins  # noqa: E402
from nkilib_compat.compare import compare  # noqa: E402
from nkilib_compat.rows import ROWS, Case, row  # noqa: E402


def test_match_tolerance_scales_with_the_largest_reference_value():
    ref = np.array([100.0, 1.0, 0.0])
    ok, _ = compare(ref + np.array([0.0, 0.9, 0.9]), ref, rtol=1e-2, atol=0.0)   # within 1% of 100
    assert ok
    ok, summary = compare(ref + np.array([0.0, 1.1, 0.0]), ref, rtol=1e-2, atol=0.0)
    assert not ok and "1 of 3" in summary


def test_a_nan_where_the_reference_is_finite_never_matches():
    ok, summary = compare(np.array([1.0, np.nan]), np.array([1.0, 2.0]), rtol=1.0, atol=1.0)
    assert not ok and "finite" in summary


def test_shape_mismatch_is_reported():
    ok, summary = compare(np.zeros((2, 3)), np.zeros((4,)), 0, 0)
    assert not ok and "shape" in summary


def test_neuron_dtypes_standin_casts_like_the_hardware():
    mod = standins.install()
    assert sys.modules["neuron_dtypes"] is mod and mod.__nkihub_standin__
    assert mod.static_cast(np.array([1.5, 2.5, 300.0, -300.0]), np.int8).tolist() == [2, 2, 127, -128]
    x = np.array([1.0 + 2 ** -9], np.float32)          # ties to even in bf16
    assert mod.static_cast(x, ml_dtypes.bfloat16).astype(np.float32)[0] == 1.0
    assert mod.is_float_type(ml_dtypes.bfloat16) and not mod.is_float_type(np.int32)


@pytest.fixture
def snapshot(tmp_path):
    """A two-module stand-in for an nki-library checkout: one working kernel, one that fails to import."""
    pkg = tmp_path / "src" / "nkilib_src" / "nkilib"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "tiny.py").write_text(textwrap.dedent("""
        import nki
        import nki.language as nl

        @nki.jit
        def double(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            nl.store(out, nl.add(t, t))
            return out
    """))
    (pkg / "broken.py").write_text("import nki\nfrom nki.language import no_such_name\n")
    return tmp_path


@pytest.fixture
def rows():
    added = []

    def add(name, build):
        row(name, kernel="tiny:double", reference="2x", source="test")(build)
        added.append(name)
    yield add
    for name in added:
        ROWS.pop(name)


def test_a_kernel_that_matches_reaches_the_last_stage(snapshot, rows):
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    rows("_tiny_ok", lambda lib: Case(lib.get("tiny:double"), {"x": x}, [2 * x]))
    res = nkilib_harness.run_row(str(snapshot), "_tiny_ok")
    assert res["stage"] == "matches", res


def test_a_wrong_answer_stops_at_runs(snapshot, rows):
    x = np.ones((8, 4), np.float32)
    rows("_tiny_wrong", lambda lib: Case(lib.get("tiny:double"), {"x": x}, [3 * x], rtol=0, atol=0))
    res = nkilib_harness.run_row(str(snapshot), "_tiny_wrong")
    assert res["stage"] == "runs" and "does not match" in res["error"]


def test_an_import_failure_names_the_library_line(snapshot, rows):
    rows("_tiny_broken", lambda lib: lib.get("broken:x"))
    res = nkilib_harness.run_row(str(snapshot), "_tiny_broken")
    assert res["stage"] == "fails to import"
    assert "no_such_name" in res["error"] and "broken.py:2" in res["error"]


def test_a_multi_rank_row_compares_every_rank(snapshot, rows):
    # Each rank runs the kernel on its own input; outputs are compared rank by rank, in rank order.
    xs = [np.full((8, 4), r, np.float32) for r in range(3)]
    rows("_tiny_ranks", lambda lib: Case(lib.get("tiny:double"), {}, [2 * x for x in xs],
                                         ranks=[{"x": x} for x in xs]))
    assert nkilib_harness.run_row(str(snapshot), "_tiny_ranks")["stage"] == "matches"
    rows("_tiny_ranks_swapped", lambda lib: Case(lib.get("tiny:double"), {}, [2 * x for x in xs[::-1]],
                                                 ranks=[{"x": x} for x in xs], rtol=0, atol=0))
    res = nkilib_harness.run_row(str(snapshot), "_tiny_ranks_swapped")
    assert res["stage"] == "runs" and "output 0 does not match" in res["error"]


def test_neuron_dtypes_standin_packs_mx_x4_values():
    import nki.language as nl
    mod = standins.install()
    packed = mod.static_cast(np.array([[1.0, -2.0, 0.5, 448.0]], np.float32), nl.float8_e4m3fn_x4)
    assert packed.shape == (1, 1) and int(packed.view(np.uint32)[0, 0]) == 0x7E30C038   # element 0 lowest
    fp4 = mod.static_cast(np.array([[0.5, 1.0, -6.0, 0.0]], np.float32), nl.float4_e2m1fn_x4)
    assert int(fp4.view(np.uint16)[0, 0]) == 0x0F21


def test_references_can_import_the_library_test_utilities(snapshot, rows):
    # A torch reference importing ``test.integration.nkilib.utils.<module>`` gets the snapshot's own file,
    # while the standard library's ``test`` package is not shadowed by the snapshot's root.
    utils = snapshot / "test" / "integration" / "nkilib" / "utils"
    utils.mkdir(parents=True)
    (utils / "__init__.py").write_text("")
    (utils / "factor.py").write_text("FACTOR = 2\n")
    x = np.ones((8, 4), np.float32)

    def build(lib):
        from test.integration.nkilib.utils.factor import FACTOR
        return Case(lib.get("tiny:double"), {"x": x}, [FACTOR * x], rtol=0, atol=0)
    rows("_tiny_test_utils", build)
    res = nkilib_harness.run_row(str(snapshot), "_tiny_test_utils")
    assert res["stage"] == "matches", res
    assert str(snapshot) not in sys.path


def test_a_library_file_that_does_not_parse_is_named_as_theirs(snapshot, rows):
    (snapshot / "src" / "nkilib_src" / "nkilib" / "unparsable.py").write_text("x = 1\n    y = 2\n")
    rows("_tiny_unparsable", lambda lib: lib.get("unparsable:x"))
    res = nkilib_harness.run_row(str(snapshot), "_tiny_unparsable")
    assert res["stage"] == "fails to import"
    assert res["error"].startswith("their file does not parse: IndentationError") and "unparsable.py:2" in res["error"]
