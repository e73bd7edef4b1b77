"""Shared fixtures: a local Hub on loopback and an isolated kernels environment; the fast simulator
engine checked against the reference executor in the tutorial and library-kernel tests."""

from __future__ import annotations

from pathlib import Path

import pytest

_TESTS = Path(__file__).parent
# Every kernel run in these tests is batched from its first call and checked bit for bit against the
# reference executor (simulator.config: NKIHUB_SIM_CROSSCHECK), so a new tutorial or library kernel is
# covered by the fast engine's bit-identity suite as soon as its test exists.
CROSSCHECKED = (_TESTS / "kernels" / "library",)


def _crosschecked(path: Path) -> bool:
    return "tutorial" in path.name or any(root in path.parents for root in CROSSCHECKED)


@pytest.fixture(autouse=True)
def _fast_engine_crosscheck(request, monkeypatch):
    if _crosschecked(Path(str(request.node.fspath))):
        monkeypatch.setenv("NKIHUB_SIM_CROSSCHECK", "1")
        monkeypatch.setenv("NKIHUB_SIM_BATCH", "always")


@pytest.fixture
def hub(tmp_path):
    """A fresh local Hub server (huggingface_hub-compatible) in a temp directory; ``hub.url``."""
    from nkihub.hub_client.server import serve_in_background

    server = serve_in_background(tmp_path / "hub-root")
    yield server
    server.stop()


@pytest.fixture
def kernels_env(hub, tmp_path, monkeypatch):
    """Point kernels at ``hub`` with a private cache and default trust; returns the hub."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "kernels-cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for var in ("HF_HUB_OFFLINE", "LOCAL_KERNELS", "KERNELS_TRUSTED_PUBLISHERS", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return hub


@pytest.fixture
def make_kernel(tmp_path):
    """Copy the toy kernel source package (tests/kernels/fixtures/toy_kernel) with a given version and factor."""
    import json
    import shutil
    from pathlib import Path

    source = Path(__file__).parent / "kernels" / "fixtures" / "toy_kernel"
    counter = iter(range(10_000))

    def make(version: str = "1.0.0", factor: float = 2.0) -> Path:
        dest = tmp_path / f"pkg{next(counter)}" / "toy_kernel"
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"))
        spec = json.loads((dest / "kernel.json").read_text())
        spec["version"] = version
        (dest / "kernel.json").write_text(json.dumps(spec, indent=2))
        ops = (dest / "ops.py").read_text().replace("factor: float = 2.0", f"factor: float = {factor}")
        (dest / "ops.py").write_text(ops)
        return dest

    return make
