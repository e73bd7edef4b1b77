"""Parallel sweeps: local worker processes and a Ray cluster started on this machine (loopback only)
give the same report as one process; a Ray sweep resumes from the cache; a plain script that tunes at
its top level (no ``if __name__ == "__main__":`` guard) sweeps on workers and a second run reuses the
choice from the disk cache."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
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


# A script as people write them: the kernel decorated at module level and called there, no main guard.
PLAIN_SCRIPT = textwrap.dedent('''
    import json, os
    import numpy as np
    import nki
    import nki.language as nl

    def twice(t):                      # a helper of the script the kernel uses (travels with it)
        return nl.multiply(t, 2.0)

    @nki.autotune(space={"tile": [32, 64, 128]}, key=["x"], target=("trn1", "trn2"),
                  workers=int(os.environ["TUNE_WORKERS"]))
    @nki.jit
    def scale(x, tile=128):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // tile):
            rows = nl.ds(i * tile, tile)
            nl.store(out[rows, :], twice(nl.load(x[rows, :])))
        return out

    x = np.random.default_rng(0).standard_normal((256, 128)).astype(np.float32)
    y = scale(x)
    print(json.dumps({"right": bool(np.allclose(y, 2 * x)), "best": scale.best_config.kwargs,
                      "sweeps": [r.where for r in scale.reports],
                      "results": [[r.to_json() for r in rep.results] for rep in scale.reports]}))
''')


def run_script(path: Path, cache: Path, workers: int, **env) -> dict:
    env = {**os.environ, "NKI_CACHE_DIR": str(cache), "TUNE_WORKERS": str(workers), **env}
    env.pop("NKIHUB_SIM_CROSSCHECK", None)
    done = subprocess.run([sys.executable, str(path)], cwd=path.parent, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bootstrapping phase" not in done.stderr
    # the script's one JSON line (Ray may print notices of its own around it)
    return json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))


@pytest.fixture
def plain_script(tmp_path):
    path = tmp_path / "plain_script.py"
    path.write_text(PLAIN_SCRIPT)
    return path


def test_a_script_without_a_main_guard_tunes_on_workers_and_a_second_run_reuses_the_choice(plain_script, tmp_path):
    first = run_script(plain_script, tmp_path / "cache", workers=2)
    assert first["right"] and first["sweeps"] == ["local"]
    # the same candidates and choice as a sweep in the script's own process
    inline = run_script(plain_script, tmp_path / "cache-inline", workers=1)
    assert inline["sweeps"] == ["inline"] and inline["results"] == first["results"]
    assert inline["best"] == first["best"]
    # a second process: the choice from the disk cache, no sweep
    again = run_script(plain_script, tmp_path / "cache", workers=2)
    assert again["right"] and again["sweeps"] == [] and again["best"] == first["best"]


@pytest.mark.slow  # starting Ray takes ~5-15 s on this machine
def test_a_script_without_a_main_guard_tunes_on_a_local_ray_cluster(plain_script, tmp_path, ray_cluster):
    first = run_script(plain_script, tmp_path / "cache", workers=2, RAY_ADDRESS=ray_cluster)
    assert first["right"] and first["sweeps"] == ["ray"]
    again = run_script(plain_script, tmp_path / "cache", workers=2, RAY_ADDRESS=ray_cluster)
    assert again["right"] and again["sweeps"] == [] and again["best"] == first["best"]
