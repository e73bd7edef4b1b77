"""Fixtures of the signing tests: key pairs, signed publishing, and an attacker with write access to the Hub."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

from nkihub.cli import main as cli

REPO = "neuron/toy-kernel"


@pytest.fixture
def keys(tmp_path):
    """Two key pairs made by ``nkihub keygen``: ``{"publisher": (key file, public key), "attacker": ...}``."""
    out = {}
    for who in ("publisher", "attacker"):
        assert cli(["keygen", "--out", str(tmp_path / f"{who}.key")]) == 0
        out[who] = (tmp_path / f"{who}.key", (tmp_path / f"{who}.key.pub").read_text().strip())
    return out


@pytest.fixture
def publisher_id(keys):
    from nkihub.hub_client.signing import key_id

    return key_id(keys["publisher"][1])


@pytest.fixture
def trust_publisher(keys, monkeypatch):
    """``trust_publisher(required=True)``: trust the publisher's key for ``neuron`` (and require signatures)."""
    def trust(required: bool = True) -> None:
        monkeypatch.setenv("KERNELS_TRUSTED_KEYS", f"neuron={keys['publisher'][1]}")
        if required:
            monkeypatch.setenv("KERNELS_REQUIRE_SIGNATURE", "1")
        else:
            monkeypatch.delenv("KERNELS_REQUIRE_SIGNATURE", raising=False)
    return trust


@pytest.fixture
def publish_signed(kernels_env, make_kernel, keys):
    """``publish_signed("2.0.1", factor=3.0, expires=None)``: the honest publisher's signed release of REPO."""
    from nkihub.kernels.publish import publish

    def run(version: str, factor: float = 2.0, **kw):
        return publish(make_kernel(version, factor), REPO, sign=keys["publisher"][0], **kw)
    return run


class HubAttacker:
    """Someone with write access to the Hub who uses only its ordinary API (upload, commit, tags)."""

    def __init__(self, hub, work: Path):
        self.api, self.work, self.n = HfApi(endpoint=hub.url, token=False), work, 0

    def snapshot(self, revision: str, repo: str = REPO) -> Path:
        """The files of ``revision`` as a local folder (what anyone can download)."""
        self.n += 1
        return Path(self.api.snapshot_download(repo, repo_type="kernel", revision=revision,
                                               cache_dir=self.work / f"dl{self.n}"))

    def replace(self, branch: str, folder: Path, *, ignore=None, repo: str = REPO) -> str:
        """Make ``branch`` hold exactly ``folder``'s files (minus ``ignore`` patterns) in one new commit."""
        return self.api.upload_folder(repo_id=repo, folder_path=folder, repo_type="kernel", revision=branch,
                                      delete_patterns=["*"], ignore_patterns=ignore,
                                      commit_message="routine maintenance").oid

    def commit(self, branch: str, add: dict[str, bytes] | None = None, delete=(), repo: str = REPO) -> str:
        ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=data) for p, data in (add or {}).items()]
        ops += [CommitOperationDelete(path_in_repo=p, is_folder=p.endswith("/")) for p in delete]
        return self.api.create_commit(repo, ops, commit_message="routine maintenance", repo_type="kernel",
                                      revision=branch).oid

    def move_tag(self, tag: str, revision: str, repo: str = REPO) -> None:
        self.api.delete_tag(repo, tag=tag, repo_type="kernel")
        self.api.create_tag(repo, tag=tag, revision=revision, repo_type="kernel")


@pytest.fixture
def attacker(kernels_env, tmp_path) -> HubAttacker:
    return HubAttacker(kernels_env, tmp_path / "attacker")
