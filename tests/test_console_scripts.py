"""nkihub's console scripts never take a name that Hugging Face's kernels or AWS's NKI toolchain ship."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys

# AWS's: neuronx-cc ships `neuronx-cc` (and the Inf1 compiler `neuron-cc`), the Neuron tools `neuron-profile`;
# `nki` is the import name of AWS's NKI package and was nkihub's own command before, so it stays free too.
AWS_COMMANDS = {"neuronx-cc", "neuron-cc", "neuron-profile", "nki"}


def _scripts(dist: str) -> set[str]:
    return {ep.name for ep in importlib.metadata.distribution(dist).entry_points if ep.group == "console_scripts"}


def test_one_console_script_of_nkihubs_own_name():
    ours, theirs = _scripts("nkihub"), _scripts("kernels")
    assert ours == {"nkihub"}
    assert "kernels" in theirs  # Hugging Face's command, installed beside ours
    assert not ours & (theirs | AWS_COMMANDS)


def test_python_dash_m_nkihub_runs_the_command():
    out = subprocess.run([sys.executable, "-m", "nkihub", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage: nkihub" in out.stdout
    for command in ("serve", "publish", "lock", "tune-package", "compile", "profile", "simulate", "tune"):
        assert command in out.stdout
