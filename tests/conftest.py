"""Shared fixtures: a local Hub on loopback and an isolated kernels environment."""

from __future__ import annotations

import pytest


@pytest.fixture
def hub(tmp_path):
    """A fresh local Hub server (huggingface_hub-compatible) in a temp directory; ``hub.url``."""
    from hub_client.server import serve_in_background

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
