"""Parallel sweeps: local worker processes and a Ray cluster started on this machine (loopback only)
give the same report as one process; a Ray sweep resumes from the cache."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nki
from nkihub.nki.cli.common import load_object

KERNEL = Path(__file__).parent / "autotune_kernel.py"
X = np.random.default_rng(1).standard_normal((512, 256)).astype(np.float32)
SPACE = {"tile": [32, 64, 128, 256], "skip": [False, True]}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path / "cache"


def sweep(**kw):
    kernel, ref = load_object(f"{KERNEL}:tiled_scale"), load_object(f"{KERNEL}:ref")
    return nki.autotune.tune(kernel, X, space=SPACE, target="trn1,trn2", check=ref, **kw)


def same(a, b):
    return [r.to_json() for r in a.results] == [r.to_json() for r in b.results] and \
        {t: r.to_json() for t, r in a.best.items()} == {t: r.to_json() for t, r in b.best.items()}


def test_local_worker_processes_give_the_same_report_as_one_process():
    one = sweep(workers=1, use_cache=False)
    two = sweep(workers=2, use_cache=False)
    assert one.where == "inline" and two.where == "local" and two.workers == 2
    assert same(one, two)


@pytest.fixture(scope="module")
def ray_cluster():
    """A Ray head on loopback (2 CPUs), stopped at the end by its own pid."""
    pytest.importorskip("ray")
    from nkihub.nki.autotune.localray import local_cluster
    with local_cluster(num_cpus=2) as address:
        yield address


@pytest.mark.slow  # starting Ray takes ~15 s on this machine
def test_a_local_ray_cluster_gives_the_same_report_and_resumes_from_the_cache(ray_cluster, monkeypatch):
    local = sweep(workers=1, use_cache=False)
    on_ray = sweep(ray=ray_cluster)
    assert on_ray.where == "ray" and on_ray.workers == 2
    assert same(local, on_ray)
    # RAY_ADDRESS is honoured too; every candidate is in the cache now, so nothing is sent to the cluster
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster)
    again = sweep()
    assert again.where == "cache" and all(r.cached for r in again.results)
    assert same(local, again)
