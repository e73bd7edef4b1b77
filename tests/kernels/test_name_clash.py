"""nkihub's `kernels` and Hugging Face's are both the import package `kernels` (docs/hub.md, "Interop with
Hugging Face kernels"). Where their distribution is installed too, asking nkihub's package for one of
their names says which package answered and why, instead of a bare "cannot import name"."""
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _import(name: str, extra_path: Path | None) -> subprocess.CompletedProcess:
    path = [str(ROOT)] + ([str(extra_path)] if extra_path else [])
    code = f"import kernels\nassert kernels.__file__.startswith({str(ROOT)!r})\nfrom kernels import {name}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": ":".join(path), "PATH": "/usr/bin:/bin"})


def _their_distribution(tmp_path: Path) -> Path:
    """The metadata Hugging Face's kernels 0.19.1 installs (what importlib.metadata finds)."""
    info = tmp_path / "kernels-0.19.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kernels\nVersion: 0.19.1\n")
    return tmp_path


def test_their_name_with_their_distribution_installed_says_why(tmp_path):
    proc = _import("CUDAProperties", _their_distribution(tmp_path))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: kernels.CUDAProperties is Hugging Face kernels' name")
    assert "kernels 0.19.1 is installed in this environment" in last and "docs/hub.md" in last


def test_without_their_distribution_a_missing_name_is_the_usual_error(tmp_path):
    try:
        pytest.skip(f"Hugging Face kernels {metadata.version('kernels')} is installed in this environment")
    except metadata.PackageNotFoundError:
        pass
    proc = _import("CUDAProperties", None)
    assert "cannot import name 'CUDAProperties' from 'kernels'" in proc.stderr
    assert "Hugging Face kernels' name" not in proc.stderr


def test_nkihub_names_and_unknown_names_are_unaffected(tmp_path):
    site = _their_distribution(tmp_path)
    assert _import("kernelize", site).returncode == 0
    unknown = _import("no_such_name", site)
    assert "cannot import name 'no_such_name'" in unknown.stderr
