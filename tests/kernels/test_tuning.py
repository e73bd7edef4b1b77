"""Tuned configs of kernel packages: `nkihub tune-package` writes tuned.json from the sweeps kernel.json
declares, launches apply it for the exact shapes and target, the published package carries it (as data,
with the standalone kernels.tuned vendored) and its card shows it."""
from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest
import torch

from nkihub.kernels import tuned
from nkihub.cli import main
from nkihub.kernels.library import LIBRARY
from nkihub.kernels.publish import build_repo
from nkihub.kernels.tuning import parse_arg, tuning_spec
from nkihub.kernels.vendor import ROOT

MATMUL = ROOT / "nkihub" / "kernels" / "library" / "matmul"
SMALL = {"kernel": "matmul_kernel", "space": {"k_group": [1, 4], "m_tiles": [1, 4]},
         "cases": [{"args": ["256x512:bfloat16", "512x1024:bfloat16"], "check": ["256x512:bfloat16", "512x1024:bfloat16"]}]}


@pytest.fixture
def small_matmul(tmp_path, monkeypatch):
    """A copy of the matmul package whose kernel.json declares a small sweep."""
    monkeypatch.setenv("NKI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    pkg = tmp_path / "src" / "matmul"
    shutil.copytree(MATMUL, pkg, ignore=shutil.ignore_patterns("__pycache__", "tuned.json"))
    spec = json.loads((pkg / "kernel.json").read_text())
    spec["tuning"] = {"kernels": [SMALL]}
    (pkg / "kernel.json").write_text(json.dumps(spec))
    return pkg


def test_kernels_tune_then_publish_carries_the_tuned_config_to_users(small_matmul, kernels_env, tmp_path, capsys,
                                                                     monkeypatch):
    assert main(["tune-package", str(small_matmul), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "matmul_kernel trn1" in out and "matmul_kernel trn2" in out and "estimate" in out
    data = json.loads((small_matmul / "tuned.json").read_text())
    entries = data["kernels"]["matmul_kernel"]
    assert {e["target"] for e in entries} == {"trn1", "trn2"}
    for e in entries:
        assert e["tensors"] == [[[256, 512], "bfloat16"], [[512, 1024], "bfloat16"]]
        assert e["passed"] == e["candidates"] == 4
        assert e["estimate_us"] <= e["default_us"]   # the default is one of the candidates of this run

    build_repo(small_matmul, tmp_path / "repo", "neuron/matmul")
    card = (tmp_path / "repo" / "README.md").read_text()
    assert "## Tuned configurations" in card and "`matmul_kernel` | trn2 | 256x512 bfloat16, 512x1024 bfloat16" in card
    built = tmp_path / "repo" / "build" / "torch-cpu" / "matmul"
    assert (built / "tuned.json").read_text() == (small_matmul / "tuned.json").read_text()
    assert (built / "_tuned.py").is_file()

    # a user of the published package (kernels.get from the Hub) gets the tuned config of their target
    # without tuning
    from nkihub import kernels
    from nkihub.kernels.publish import publish
    publish(small_matmul, "neuron/matmul")
    pkg = kernels.get("neuron/matmul", version=1)
    assert pkg.__kernel_info__.variant == "torch-cpu"
    a = torch.randn(256, 512).to(torch.bfloat16)
    b = torch.randn(512, 1024).to(torch.bfloat16)
    for target in ("trn1", "trn2"):
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
        want = next(e["config"] for e in entries if e["target"] == target)
        got = pkg._tuned.lookup(pkg.matmul_kernel, [a, b])
        assert got == want
        c = pkg.matmul(a, b)
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
        traced = [dict((p[0], p[2]) for p in key[2] if p[1] == "C") for key in pkg.matmul_kernel._cache
                  if key[0] == target]
        assert any(all(t.get(k) == v for k, v in want.items()) for t in traced), traced
    # other shapes keep the launcher's values
    assert pkg._tuned.lookup(pkg.matmul_kernel, [a[:128], b]) is None


def test_recheck_flags_tuned_entries_that_cost_rules_made_stale(small_matmul, capsys):
    """`nkihub tune-package --recheck` re-estimates tuned.json without a sweep: figures that moved or a tuned
    config now slower than its default exit 1 with the way to regenerate."""
    from nkihub.kernels.tuning import dumps, recheck
    tensors = [[[256, 512], "bfloat16"], [[512, 1024], "bfloat16"]]

    def write(config, default, stored, stored_default):
        entry = {"target": "trn2", "tensors": tensors, "config": config, "estimate_us": stored,
                 "default": default, "default_us": stored_default, "candidates": 4, "passed": 4}
        (small_matmul / "tuned.json").write_text(dumps({"version": 1, "note": "", "kernels": {"matmul_kernel": [entry]}}))

    a, b = {"k_group": 1, "m_tiles": 1}, {"k_group": 4, "m_tiles": 4}
    write(a, b, 1.0, 1.0)
    [row] = recheck(small_matmul)
    if row["tuned_us"] > row["default_us"]:   # the faster of the two as the tuned config, whatever the rules
        a, b = b, a
        write(a, b, 1.0, 1.0)
        [row] = recheck(small_matmul)
    assert row["tuned_us"] and row["default_us"] and row["tuned_us"] != row["default_us"]
    assert main(["tune-package", "--recheck", str(small_matmul)]) == 1
    assert "estimates moved since the sweep" in capsys.readouterr().out
    fast, slow = (a, b) if row["tuned_us"] < row["default_us"] else (b, a)
    us = {str(a): row["tuned_us"], str(b): row["default_us"]}
    write(fast, slow, us[str(fast)], us[str(slow)])
    assert main(["tune-package", "--recheck", str(small_matmul)]) == 0
    assert "| ok |" in capsys.readouterr().out
    write(slow, fast, us[str(slow)], us[str(fast)])
    assert main(["tune-package", "--recheck", str(small_matmul)]) == 1
    out = capsys.readouterr().out
    assert "tuned config now slower than the default" in out and "nkihub tune-package PATH" in out


def test_configure_replaces_positional_and_keyword_values_and_skips_unknown_names(tmp_path, monkeypatch):
    src = tmp_path / "k.py"
    src.write_text("def kern(x, y, block=1, depth=2):\n    return x\n")
    x = np.zeros((4, 8), np.float32)
    (tmp_path / "tuned.json").write_text(json.dumps({"version": 1, "kernels": {"kern": [
        {"target": "trn1", "tensors": [[[4, 8], "float32"]], "config": {"block": 7, "gone": 1}}]}}))
    spec = importlib.util.spec_from_file_location("_tuned_probe", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    tuned._load.cache_clear()
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    assert tuned.configure(mod.kern, (x, 3, 5), {}) == ((x, 3, 7), {})
    assert tuned.configure(mod.kern, (x, 3), {"block": 5, "depth": 4}) == ((x, 3, 7, 4), {})
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    assert tuned.configure(mod.kern, (x, 3, 5), {}) == ((x, 3, 5), {})


@pytest.mark.parametrize("repo", sorted(LIBRARY))
def test_library_tuning_specs_name_real_kernel_parameters(repo):
    pkg = ROOT.joinpath(*LIBRARY[repo].split("."))
    import importlib
    import inspect
    kernels_mod = importlib.import_module(LIBRARY[repo] + ".nki_kernels")
    for k in tuning_spec(pkg):
        params = inspect.signature(getattr(kernels_mod, k["kernel"]).fn).parameters
        assert set(k["space"]) <= set(params), k["space"]
        for case in k["cases"]:
            n_args = len([parse_arg(a) for a in case["args"]])
            assert n_args == len(case["check"]) and n_args + len(k["space"]) <= len(params)


@pytest.mark.slow  # estimates every tuned entry of the library and its default at their shapes (nothing runs)
@pytest.mark.parametrize("repo", sorted(LIBRARY))
def test_library_tuned_configs_still_compile_and_beat_their_defaults(repo, tmp_path, monkeypatch):
    """A tuned.json older than a kernel or cost-rule change must not break a launch nor slow it: every
    entry's config traces, validates and allocates at its shapes on its target, and its estimate is at
    most its default's (within STALE, the move `nkihub tune-package --recheck` reports). When this fails,
    regenerate with `nkihub tune-package nkihub/kernels/library/NAME`."""
    from nkihub.kernels.cli.tune import STALE
    from nkihub.kernels.tuning import recheck
    monkeypatch.setenv("NKI_CACHE_DIR", str(tmp_path / "cache"))
    pkg = ROOT.joinpath(*LIBRARY[repo].split("."))
    if not (pkg / "tuned.json").is_file():
        pytest.skip(f"{repo} has no tuned.json")
    rows = recheck(pkg)
    assert {r["target"] for r in rows} == {"trn1", "trn2"}
    for r in rows:
        assert r["tuned_us"] is not None and r["default_us"] is not None, r["reason"]
        assert r["tuned_us"] <= r["default_us"] * (1 + STALE), r
