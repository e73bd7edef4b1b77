"""The emulated device is process-global (a backend cannot be unregistered), so every test that turns it
on runs its code in a fresh interpreter: ``emulated(code)`` runs ``code`` after ``emulate()`` and returns
its stdout, failing the test with the child's stderr when it exits non-zero."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _run_python(code: str, *, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", **(env or {})}
    for var in ("NKIHUB_EMULATE_NEURON", "NKIHUB_NEURON_DEVICE_COUNT"):
        if var not in (env or {}):
            full_env.pop(var, None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def emulated():
    def run(code: str, *, device_count: int = 1, env: dict | None = None, timeout: float = 600) -> str:
        prelude = f"import torch, nkihub.device\nnkihub.device.emulate(device_count={device_count})\n"
        out = _run_python(prelude + textwrap.dedent(code), env=env, timeout=timeout)
        assert out.returncode == 0, f"child failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
        return out.stdout

    return run


@pytest.fixture
def run_python():
    """Run ``code`` in a fresh interpreter (emulation variables unset unless given in ``env``)."""
    return _run_python


@pytest.fixture
def publish_library(kernels_env):
    """Publish in-tree library kernels (``"neuron/vit-attn"`` ...) to the test's local Hub; returns the hub.
    A child process inherits the Hub's environment (HF_ENDPOINT, KERNELS_CACHE) from os.environ."""
    import importlib

    from nkihub.kernels.library import LIBRARY
    from nkihub.kernels.publish import publish

    def run(*repos):
        for repo in repos:
            publish(os.path.dirname(importlib.import_module(LIBRARY[repo]).__file__), repo)
        return kernels_env

    return run
