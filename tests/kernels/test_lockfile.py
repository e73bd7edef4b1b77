"""nkihub lock / download / locked loads, in the Hugging Face kernels 0.17 lock format."""

from __future__ import annotations

import json

import pytest
import torch

from nkihub import kernels
from nkihub.kernels.lockfile import download_locked, lock_kernels, read_lockfile
from nkihub.kernels.publish import publish

REPO = "neuron/toy-kernel"


@pytest.fixture
def project(tmp_path):
    d = tmp_path / "project"
    d.mkdir()
    (d / "pyproject.toml").write_text(f'[project]\nname = "demo"\n\n[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    return d


def test_lock_writes_hf_format_and_pins_the_commit(kernels_env, make_kernel, project):
    first = publish(make_kernel("1.0.0", 2.0), REPO)
    (lock,) = lock_kernels(project)
    assert lock.commit == first.commit
    data = json.loads((project / "kernels.lock").read_text())
    assert data == [{"dependency": {"repo-id": REPO, "version": 1}, "lock": {"commit": first.commit}}]
    publish(make_kernel("1.1.0", 3.0), REPO)  # v1 moves on, the lock does not
    mod = kernels.get_locked_kernel(REPO, lockfile=project / "kernels.lock")
    assert mod.scale(torch.ones(1)).item() == 2.0
    assert kernels.get_kernel(REPO, version=1).scale(torch.ones(1)).item() == 3.0


def test_download_then_load_offline(kernels_env, make_kernel, project, monkeypatch):
    publish(make_kernel("1.0.0", 2.0), REPO)
    lock_kernels(project)
    with pytest.raises(FileNotFoundError, match="nkihub download"):
        kernels.load_kernel(REPO, lockfile=project / "kernels.lock")
    paths = download_locked(project)
    assert paths[0].name == "torch-cpu"
    kernels_env.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    mod = kernels.load_kernel(REPO, lockfile=project / "kernels.lock")
    assert mod.scale(torch.ones(1)).item() == 2.0


def test_lock_refuses_untrusted_and_missing(kernels_env, make_kernel, project):
    publish(make_kernel(), "someone/toy-kernel")
    (project / "pyproject.toml").write_text('[tool.kernels.dependencies]\n"someone/toy-kernel" = 1\n')
    with pytest.raises(ValueError, match="trusted publisher"):
        lock_kernels(project)
    publish(make_kernel(), REPO)
    (project / "pyproject.toml").write_text(f'[tool.kernels.dependencies]\n"{REPO}" = 4\n')
    with pytest.raises(ValueError, match="Version 4"):
        lock_kernels(project)


def test_unlocked_repo_is_an_error(kernels_env, make_kernel, project):
    publish(make_kernel(), REPO)
    lock_kernels(project)
    with pytest.raises(ValueError, match="not locked"):
        kernels.get_locked_kernel("neuron/other", lockfile=project / "kernels.lock")


def test_reads_a_lockfile_written_by_hf_kernels(tmp_path):
    # exactly what kernels 0.17 KernelLocks.to_json() prints
    text = json.dumps([{"dependency": {"repo-id": "a/b", "version": 1}, "lock": {"commit": "a" * 40}},
                       {"dependency": {"repo-id": "c/d", "revision": "main"}, "lock": {"commit": "b" * 40}}], indent=2)
    (tmp_path / "kernels.lock").write_text(text)
    locks = read_lockfile(tmp_path / "kernels.lock")
    assert locks["a/b"].version == 1 and locks["c/d"].revision == "main" and locks["c/d"].commit == "b" * 40
