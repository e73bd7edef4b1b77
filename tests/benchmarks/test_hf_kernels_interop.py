"""The NKI installation benchmarks/hf_kernels_interop.py gives Hugging Face's venv: of nkihub only the
language and the simulator, with the top-level ``nki`` stand-in, and no ``nkihub.kernels`` (checked in a
bare interpreter: no site-packages processing, so neither nkihub's editable install nor its aliases .pth)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

from hf_kernels_interop import nki_installation  # noqa: E402

PROBE = """
import importlib.util as u, sys
import nki, nki.language, nkihub.nki.language
assert nki.__name__ == "nkihub.nki" and nki.language is nkihub.nki.language, nki
assert nki.__file__.startswith(sys.argv[1]), nki.__file__
for name in ("nkihub.kernels", "nkihub.hub_client", "nkihub.cli"):
    assert u.find_spec(name) is None, name
import neuronxcc.nki
assert neuronxcc.nki.__name__ == "nkihub.nki.compat"
print("ok")
"""


def test_the_venv_gets_nki_and_the_simulator_only(tmp_path):
    folder = tmp_path / "nki-installation"
    (folder / "nkihub" / "kernels").mkdir(parents=True)   # an older layout is replaced
    entries = nki_installation(folder)
    assert sorted(p.name for p in (folder / "nkihub").iterdir()) == ["__init__.py", "_toplevel", "aliases.py",
                                                                      "nki", "simulator"]
    path = [str(entries[0]), sysconfig.get_paths()["purelib"], str(entries[1])]   # as the venv's .pth has it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run([sys.executable, "-S", "-c", PROBE, str(folder)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_the_checks_use_hugging_faces_kernels():
    text = (BENCH / "hf_kernels_checks.py").read_text()
    assert "from nkihub" not in text and "import nkihub" not in text
    assert "    import kernels\n" in text and "from kernels import get_kernel" in text
