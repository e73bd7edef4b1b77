"""nki.profile / nki.benchmark: cost-model reports, target selection, no numerical execution."""
from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.simulator.executor import Executor
from nkihub.simulator.replay import Replay
from nkihub.simulator.report import Report


@nki.jit
def double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.setenv("NKI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)


def test_profile_returns_a_report_without_running_the_kernel(monkeypatch):
    def no_run(*a, **k):
        raise AssertionError("profile executed the kernel")

    monkeypatch.setattr(Executor, "run", no_run)
    monkeypatch.setattr(Replay, "run", no_run)
    r = nki.profile(double, np.zeros((128, 512), np.float32))
    assert isinstance(r, Report) and r.target == "trn2"
    assert r.latency_s > 0 and r.bottleneck in r.engine_active and r.mfu == 0.0
    assert r.engine_active["vector"] > 0


def test_target_from_argument_else_environment(monkeypatch):
    x = np.zeros((128, 512), np.float32)
    assert nki.profile(double, x, target="trn1").target == "trn1"
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    assert nki.profile(double, x).target == "trn3"
    assert nki.benchmark(double, x, target="trn2").target == "trn2"
    with pytest.raises(ValueError, match="unknown target"):
        nki.profile(double, x, target="trn9")


def test_benchmark_equals_profile():
    x = np.zeros((128, 256), np.float32)
    assert nki.benchmark(double, x).latency_s == nki.profile(double, x).latency_s


def test_profile_accepts_torch_tensors_and_plain_functions():
    torch = pytest.importorskip("torch")
    r = nki.profile(double.fn, torch.zeros(128, 64, dtype=torch.bfloat16), target="trn2")
    assert r.hbm_bytes == 2 * 128 * 64 * 2


def test_estimating_without_cost_compiles_each_launch_and_runs_nothing(monkeypatch, tmp_path):
    def no_run(*a, **k):
        raise AssertionError("the launch ran")

    monkeypatch.setattr(Executor, "run", no_run)
    monkeypatch.setattr(Replay, "run", no_run)
    with nki.estimating(("trn1",), cost=False) as est:
        out = double(np.ones((128, 64), np.float32))
    assert out.shape == (128, 64) and not out.any()
    assert [launch.kernel for launch in est.launches] == ["double"] and est.launches[0].reports == {}
    assert not list((tmp_path / "cache").glob("*"))     # nothing costed, nothing written to the disk cache

    @nki.jit
    def too_big(x):
        t = nl.ndarray((128, 60000), dtype=nl.float32, buffer=nl.sbuf)   # over trn1's 192 KiB a partition
        nisa.memset(dst=t, value=0.0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t[:, :x.shape[1]])
        return out

    with pytest.raises(nki.KernelRuleError, match="sbuf"), nki.estimating(("trn1",), cost=False):
        too_big(np.ones((128, 64), np.float32))


def test_profile_writes_no_file_until_asked_as_the_readme_says(tmp_path, monkeypatch):
    """README: nki.profile returns a report and writes nothing; save_perfetto / save_png write the files."""
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    para = readme[readme.index("`nki.profile(kernel"):readme.index("## Autotune")]
    assert "writes no file" in para and "save_perfetto" in para and "save_png" in para
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = nki.profile(double, np.zeros((128, 512), np.float32))
    assert list(work.iterdir()) == []
    r.timeline.save_perfetto(work / "t.json")
    r.timeline.save_png(work / "t.png")
    assert sorted(p.name for p in work.iterdir()) == ["t.json", "t.png"]
