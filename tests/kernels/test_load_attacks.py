"""Attacks on the load path: the cache is edited, bytecode is planted, files change after the check.

Each load here runs in a fresh process (as a user's next `python` would), so nothing verified in an
earlier load is reused from memory. A load must run exactly the bytes the Hub recorded, or refuse
with an error naming the file.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nkihub.kernels.publish import publish

REPO = "neuron/toy-kernel"
MARK = "PWNED"


def load_in_subprocess(*, offline: bool = False, version: int = 1, expect_ok: bool = True) -> subprocess.CompletedProcess:
    """Run ``kernels.get(REPO).scale(ones(1))`` in a new interpreter with the test's environment."""
    script = textwrap.dedent(f"""
        import torch; from nkihub import kernels
        m = kernels.get({REPO!r}, version={version})
        print("RESULT", m.scale(torch.ones(1)).item())
    """)
    env = dict(os.environ)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180)
    if expect_ok:
        assert r.returncode == 0, r.stderr[-2000:]
    return r


def variant_dir(cache: Path) -> Path:
    snaps = list((cache / "kernels--neuron--toy-kernel" / "snapshots").iterdir())
    assert len(snaps) == 1
    return snaps[0] / "build" / "torch-cpu"


def evil_source() -> str:
    return (f"import pathlib\npathlib.Path({os.environ['KERNELS_CACHE']!r}).joinpath({MARK!r}).write_text('ran')\n"
            "def scale(x, factor=2.0):\n    return x * 1000\n")


def sed_in_place(path: Path, text: str) -> None:
    """What ``sed -i`` or an editor's save does: write a new file and rename it over the old name."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def b64sha(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


@pytest.fixture
def loaded_once(kernels_env, make_kernel):
    publish(make_kernel("1.0.0", 2.0), REPO)
    r = load_in_subprocess()
    assert "RESULT 2.0" in r.stdout
    return Path(os.environ["KERNELS_CACHE"])


def tamper_file_and_metadata(cache: Path) -> None:
    vdir = variant_dir(cache)
    evil = evil_source()
    sed_in_place(vdir / "toy_kernel" / "ops.py", evil)
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["digest"]["files"]["toy_kernel/ops.py"] = b64sha(evil)
    sed_in_place(vdir / "metadata.json", json.dumps(meta))


def test_cache_file_edited_with_its_metadata_is_refetched(loaded_once):
    cache = loaded_once
    tamper_file_and_metadata(cache)
    r = load_in_subprocess()
    assert "RESULT 2.0" in r.stdout
    assert not (cache / MARK).exists()
    ops = variant_dir(cache) / "toy_kernel" / "ops.py"
    assert "x * factor" in ops.read_text()  # the cache was repaired from the Hub


def test_cache_file_edited_with_its_metadata_offline_is_refused(loaded_once):
    cache = loaded_once
    tamper_file_and_metadata(cache)
    r = load_in_subprocess(offline=True, expect_ok=False)
    assert r.returncode != 0 and not (cache / MARK).exists()
    assert "toy_kernel/ops.py" in r.stderr and "RESULT" not in r.stdout


def plant_bytecode(pkg: Path, module: str) -> Path:
    """An unchecked-hash .pyc beside a cached module: CPython's default loader runs it without the source."""
    code = compile(evil_source(), str(pkg / f"{module}.py"), "exec")
    data = importlib._bootstrap_external._code_to_hash_pyc(code, b"\0" * 8, checked=False)
    target = Path(importlib.util.cache_from_source(str(pkg / f"{module}.py")))
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(data)
    return target


def test_planted_bytecode_never_runs(loaded_once):
    cache = loaded_once
    plant_bytecode(variant_dir(cache) / "toy_kernel", "ops")
    r = load_in_subprocess()
    assert "RESULT 2.0" in r.stdout and not (cache / MARK).exists()
    r = load_in_subprocess(offline=True)
    assert "RESULT 2.0" in r.stdout and not (cache / MARK).exists()


def test_planted_bytecode_in_a_local_kernel_never_runs(make_kernel, tmp_path, monkeypatch):
    from nkihub.kernels.publish import build_repo

    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path))
    out = tmp_path / "repo"
    build_repo(make_kernel("1.0.0", 2.0), out, REPO)
    plant_bytecode(out / "build" / "torch-cpu" / "toy_kernel", "ops")
    script = f"import torch; from nkihub import kernels; print('RESULT', kernels.get_local_kernel({str(out)!r}).scale(torch.ones(1)).item())"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RESULT 2.0" in r.stdout and not (tmp_path / MARK).exists()


def test_module_swapped_after_the_check_is_not_imported(kernels_env, make_kernel):
    """A submodule imported lazily, after the load returned, still runs the verified bytes."""
    import torch

    from nkihub import kernels

    pkg = make_kernel("1.0.0", 2.0)
    (pkg / "lazy.py").write_text("VALUE = 'verified'\n")
    (pkg / "__init__.py").write_text((pkg / "__init__.py").read_text() + textwrap.dedent("""
        def lazy_value():
            from . import lazy
            return lazy.VALUE
    """))
    publish(pkg, REPO)
    mod = kernels.get(REPO, version=1)
    lazy = Path(mod.__kernel_info__.path) / "toy_kernel" / "lazy.py"
    sed_in_place(lazy, "VALUE = 'swapped'\n")
    assert mod.lazy_value() == "verified"
    assert mod.scale(torch.ones(1)).item() == 2.0


def test_unlisted_module_planted_in_the_cache_cannot_be_imported(kernels_env, make_kernel):
    from nkihub import kernels

    pkg = make_kernel("1.0.0", 2.0)
    (pkg / "__init__.py").write_text((pkg / "__init__.py").read_text() + textwrap.dedent("""
        def planted_value():
            from . import extra as e
            return e.VALUE
    """))
    publish(pkg, REPO)
    mod = kernels.get(REPO, version=1)
    (Path(mod.__kernel_info__.path) / "toy_kernel" / "extra.py").write_text("VALUE = 'planted'\n")
    with pytest.raises(ImportError, match="extra"):
        mod.planted_value()
