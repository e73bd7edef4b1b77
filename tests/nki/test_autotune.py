"""nki.autotune: the sweep (rules, reference check, estimates, report), the decorator and its disk cache,
exhaustive and TPE search, resuming from the cache."""
from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import numpy as np
import pytest

import nki
from nkihub.nki.autotune.candidate import INVALID, OK, WRONG

HERE = Path(__file__).parent


def load(name="autotune_kernel"):
    """A fresh copy of the test kernel module (a new process would see the same)."""
    spec = importlib.util.spec_from_file_location(f"_autotune_test_{id(object())}", HERE / "autotune_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path / "cache"


X = np.random.default_rng(0).standard_normal((512, 256)).astype(np.float32)
SPACE = {"tile": [32, 64, 128, 256], "skip": [False, True]}


def test_sweep_removes_rule_breaking_and_wrong_candidates_and_keeps_the_fastest_right_one():
    mod = load()
    report = nki.autotune.tune(mod.tiled_scale, X, space=SPACE, target="trn1,trn2", check=mod.ref, workers=1)
    assert report.search == "exhaustive" and len(report.results) == 16
    for r in report.results:
        if r.config.kwargs["tile"] == 256:
            assert r.status == INVALID and "partition" in r.reason, r
        elif r.config.kwargs["skip"]:
            assert r.status == WRONG and "differs from the reference" in r.reason, r
        else:
            assert r.status == OK and r.latency_s > 0
    for t in ("trn1", "trn2"):
        best = report.best[t]
        assert best.status == OK and not best.config.kwargs["skip"]
        ok = [r.latency_s for r in report.results if r.target == t and r.status == OK]
        assert best.latency_s == min(ok)
        # a wrong candidate is faster than every right one, and still does not win
        wrong = [r for r in report.results if r.target == t and r.status == WRONG]
        assert min(r.latency_s or np.inf for r in wrong) == np.inf
        assert report.default_result(t).latency_s >= best.latency_s
        assert report.speedup(t) >= 1.0
    text = report.table()
    assert "BEST" in text and "invalid" in text and "wrong" in text and "(default)" in text
    assert report.to_json()["best"]["trn2"]["status"] == OK


def test_wrong_candidate_is_really_faster_so_the_check_is_what_removes_it():
    mod = load()
    unchecked = [nki.profile(mod.tiled_scale, X, target="trn2", tile=128, skip=s).latency_s for s in (False, True)]
    assert unchecked[1] < unchecked[0]


def test_without_a_reference_candidates_must_match_the_default_config():
    mod = load()
    report = nki.autotune.tune(mod.tiled_scale, X, space={"tile": [64, 128], "skip": [False, True]}, workers=1)
    wrong = [r for r in report.results if r.config.kwargs["skip"]]
    assert wrong and all(r.status == WRONG and "the default config" in r.reason for r in wrong)
    assert report.best["trn2"].config.kwargs["skip"] is False


def test_decorator_tunes_once_then_uses_the_disk_cache_in_a_fresh_process(cache_dir):
    mod = load()
    out = mod.tuned_scale(X)
    np.testing.assert_allclose(out, X * 2)
    assert len(mod.tuned_scale.reports) == 1
    report = mod.tuned_scale.reports[0]
    assert report.targets == ("trn1", "trn2")
    chosen = mod.tuned_scale.best_config(X)
    assert chosen == report.best["trn2"].config
    assert (cache_dir / "autotune" / "best").is_dir()
    # a second load of the module (as another process would): the best config comes from disk, no sweep
    again = load()
    assert again.tuned_scale.best_config(X, target="trn1") == report.best["trn1"].config
    np.testing.assert_allclose(again.tuned_scale(X), X * 2)
    assert again.tuned_scale.reports == []
    # another shape is another key: a new sweep
    small = X[:256]
    np.testing.assert_allclose(again.tuned_scale(small), small * 2)
    assert len(again.tuned_scale.reports) == 1


def test_best_config_is_also_the_attribute_of_the_last_launch_as_in_triton():
    mod = load()
    tuned = nki.autotune(configs=[{"tile": 64}, {"tile": 128}], key=["x"], check=mod.ref, workers=1)(mod.tiled_scale)
    assert not tuned.best_config and tuned.best_config.kwargs == {}      # no launch yet
    assert "no launch yet" in repr(tuned.best_config)
    np.testing.assert_allclose(tuned(X), X * 2)
    chosen = tuned.config_for(X)
    assert tuned.best_config and tuned.best_config == chosen and chosen == tuned.best_config
    assert tuned.best_config.kwargs == chosen.kwargs and repr(tuned.best_config) == repr(chosen)
    assert {chosen: "x"}[tuned.best_config] == "x"                      # hashes as the config
    assert tuned.best_config(X) == chosen                               # the method form still works
    assert tuned.best_config(X, target="trn1") == tuned.config_for(X, target="trn1")
    # the attribute follows the launches: another shape, another choice recorded
    tuned(X[:64])
    assert tuned.best_config == tuned.config_for(X[:64])


def test_configs_list_and_early_prune_in_the_manner_of_triton():
    mod = load()
    seen = {}

    def prune(configs, named_args):
        seen["x"] = named_args["x"].shape
        return [c for c in configs if c.kwargs["tile"] != 32]
    tuned = nki.autotune(configs=[{"tile": 32}, nki.autotune.Config(tile=64), nki.autotune.Config({"tile": 128})],
                         key=["x"], check=mod.ref, workers=1,
                         prune_configs_by={"early_config_prune": prune})(mod.tiled_scale)
    np.testing.assert_allclose(tuned(X), X * 2)
    assert seen["x"] == X.shape
    assert {r.config.kwargs["tile"] for r in tuned.reports[0].results} == {64, 128}


def test_tpe_search_of_a_large_space_is_seeded_and_bounded():
    mod = load()
    space = {"tile": [64, 128, 256], "unroll": list(range(100))}
    runs = [nki.autotune.tune(mod.tiled_scale, X, space=space, check=mod.ref, budget=12, seed=3, workers=1,
                              use_cache=False) for _ in range(2)]
    assert runs[0].search == "tpe"
    assert len(runs[0].results) == 12
    assert [r.to_json() for r in runs[0].results] == [r.to_json() for r in runs[1].results]
    assert runs[0].results[0].config == nki.autotune.Config(tile=128, unroll=0)   # the default goes first
    assert runs[0].best["trn2"].status == OK


def test_a_sweep_resumes_from_its_cached_candidates():
    mod = load()
    first = nki.autotune.tune(mod.tiled_scale, X, space=SPACE, check=mod.ref, workers=1)
    assert not any(r.cached for r in first.results)
    again = nki.autotune.tune(load().tiled_scale, X, space=SPACE, check=mod.ref, workers=1)
    assert all(r.cached for r in again.results) and again.where == "cache"
    assert [r.to_json() for r in again.results] == [r.to_json() for r in first.results]


def test_autotuned_kernel_inside_estimating_costs_the_best_config():
    mod = load()
    best = mod.tuned_scale.best_config(X)
    with nki.estimating(("trn2",)) as est:
        mod.tuned_scale(X)
    expected = nki.profile(mod.tiled_scale, X, target="trn2", **best.kwargs).latency_s
    assert est.latency_s("trn2") == pytest.approx(expected)


@pytest.mark.parametrize("kwargs, message", [
    ({"space": SPACE, "configs": [{"tile": 64}]}, "exactly one of"),
    ({"space": {"tile": []}}, "non-empty list"),
    ({"space": {"tile": [np.zeros(2)]}}, "values are None, bool, int, float or str"),
    ({"space": SPACE, "search": "grid"}, "search='grid'"),
    ({"space": SPACE, "tile": 64}, "tile is tuned"),
])
def test_bad_arguments_name_the_problem(kwargs, message):
    mod = load()
    with pytest.raises(ValueError, match=message):
        nki.autotune.tune(mod.tiled_scale, X, workers=1, **kwargs)


def test_a_realistic_activation_is_its_own_check_input():
    mod = load()
    wide = np.random.default_rng(2).standard_normal((128, 65536)).astype(np.float32)   # 2^23 elements
    tuned = nki.autotune(space={"cols": [1024, 2048, 4096]}, key=["x"], check=mod.ref, workers=1)(mod.scale_cols)
    np.testing.assert_allclose(tuned(wide), wide * 2)
    assert {r.status for r in tuned.reports[0].results} == {OK}
    # without a reference, candidates are checked against the default config on the same inputs
    report = nki.autotune.tune(mod.scale_cols, wide, space={"cols": [1024, 4096]}, workers=1)
    assert {r.status for r in report.results} == {OK}


def test_inputs_too_large_to_simulate_are_checked_on_leading_slices_the_kernel_accepts(monkeypatch):
    from nkihub.nki.autotune import sweep

    mod = load()
    monkeypatch.setattr(sweep, "CHECK_ELEMENTS", 1 << 16)
    big = np.random.default_rng(3).standard_normal((8192, 256)).astype(np.float32)
    small, _ = sweep.check_inputs(mod.tiled_scale, (big,), {}, nki.autotune.Config(tile=128), "trn2")
    assert small[0].shape == (512, 128) and np.array_equal(small[0], big[:512, :128])
    report = nki.autotune.tune(mod.tiled_scale, big, space={"tile": [64, 128], "skip": [False, True]},
                               check=mod.ref, workers=1)
    status = {tuple(r.config.kwargs.values()): r.status for r in report.results}
    assert status == {(False, 64): OK, (False, 128): OK, (True, 64): WRONG, (True, 128): WRONG}
    # given check inputs are used as they are
    report = nki.autotune.tune(mod.tiled_scale, big, space={"tile": [64, 128]}, check=mod.ref, check_args=(X,),
                               workers=1)
    assert {r.status for r in report.results} == {OK}


def test_check_inputs_are_refused_only_when_no_smaller_shape_is_accepted_with_the_reason(monkeypatch):
    from nkihub.nki.autotune import sweep

    mod = load()
    monkeypatch.setattr(sweep, "CHECK_ELEMENTS", 1 << 16)
    wide = np.zeros((128, 65536), np.float32)
    with pytest.raises(ValueError, match="no leading slice .* only_full_width takes 65536 columns.*check_args"):
        nki.autotune.tune(mod.only_full_width, wide, space={"cols": [1024, 2048]}, check=mod.ref, workers=1)


def test_unknown_key_is_an_error():
    mod = load()
    tuned = nki.autotune(space=SPACE, key=["y"], workers=1)(mod.tiled_scale)
    with pytest.raises(ValueError, match="autotune key 'y' is not a parameter"):
        tuned(X)


def test_spmd_grid_launch_is_tuned_per_grid(tmp_path):
    src = tmp_path / "grid_kernel.py"
    src.write_text(textwrap.dedent('''
        import nki
        import nki.language as nl

        @nki.jit
        def halves(x, tile=128):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            half = x.shape[0] // 2
            base = nl.program_id(0) * half
            for i in nl.affine_range(half // tile):
                rows = nl.ds(base + i * tile, tile)
                nl.store(out[rows, :], nl.multiply(nl.load(x[rows, :]), 2.0))
            return out
    '''))
    from nkihub.nki.cli.common import load_object
    kernel = load_object(f"{src}:halves")
    tuned = nki.autotune(space={"tile": [64, 128]}, key=["x"], check=lambda x: x * 2, workers=2)(kernel)
    np.testing.assert_allclose(tuned[2](X), X * 2)
    report = tuned.reports[-1]
    assert report.where == "local" and {r.status for r in report.results} == {OK}
    assert ["grid", [2]] in [list(k) for k in report.key]
