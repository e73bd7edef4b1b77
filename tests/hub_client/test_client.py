"""nkihub.hub_client.client: push a folder as one commit, download and verify, recover from bad transfers."""

from __future__ import annotations

import pytest
from huggingface_hub import HfApi

from nkihub.hub_client import DigestMismatchError, PublishConflictError, RemoteFileCorruptError
from nkihub.hub_client.client import download_snapshot, push_folder, set_branch, verify_snapshot
from nkihub.hub_client.snapshot import fetch_snapshot

REPO = "neuron/pushed"


def write_tree(root, files):
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


@pytest.fixture
def pushed(hub, tmp_path):
    HfApi(endpoint=hub.url, token=False).create_repo(REPO, repo_type="kernel")
    src = tmp_path / "src"
    write_tree(src, {"a.txt": b"alpha", "pkg/__init__.py": b"X = 1\n", "pkg/big.bin": bytes(range(256)) * 200})
    result = push_folder(src, REPO, message="first", endpoint=hub.url, token=False)
    return src, result


def test_push_folder_is_one_commit_and_idempotent(hub, pushed):
    src, first = pushed
    api = HfApi(endpoint=hub.url, token=False)
    assert first.created and set(first.added) == {"a.txt", "pkg/__init__.py", "pkg/big.bin"}
    again = push_folder(src, REPO, message="again", endpoint=hub.url, token=False)
    assert not again.created and again.commit == first.commit
    (src / "a.txt").unlink()
    (src / "pkg/__init__.py").write_bytes(b"X = 2\n")
    third = push_folder(src, REPO, message="third", endpoint=hub.url, token=False)
    assert third.created and third.added == ("pkg/__init__.py",) and third.deleted == ("a.txt",)
    assert [c.title for c in api.list_repo_commits(REPO, repo_type="kernel")] == ["third", "first", "initial commit"]


def test_push_with_stale_base_raises_conflict_and_writes_nothing(hub, pushed, tmp_path):
    src, first = pushed
    (src / "a.txt").write_bytes(b"beta")
    push_folder(src, REPO, message="moved", endpoint=hub.url, token=False)
    head = hub.storage.refs("kernel", REPO)["branches"]["main"]
    (src / "a.txt").write_bytes(b"gamma")
    with pytest.raises(PublishConflictError):
        push_folder(src, REPO, message="stale", endpoint=hub.url, token=False, base_commit=first.commit)
    assert hub.storage.refs("kernel", REPO)["branches"]["main"] == head


def test_set_branch_creates_and_moves_forward_only(hub, pushed):
    src, first = pushed
    initial = hub.storage.read_commit("kernel", REPO, first.commit).parents[0]
    assert set_branch(REPO, "v1", initial, endpoint=hub.url, token=False)
    assert set_branch(REPO, "v1", first.commit, endpoint=hub.url, token=False)  # forward
    assert not set_branch(REPO, "v1", first.commit, endpoint=hub.url, token=False)  # already there
    assert not set_branch(REPO, "v1", initial, endpoint=hub.url, token=False)  # never backwards
    assert hub.storage.refs("kernel", REPO)["branches"]["v1"] == first.commit
    (src / "a.txt").write_bytes(b"side")
    side = push_folder(src, REPO, message="side", endpoint=hub.url, token=False).commit
    assert set_branch(REPO, "v1", side, endpoint=hub.url, token=False)


def test_download_snapshot_verifies(hub, pushed, tmp_path):
    _, first = pushed
    snap = download_snapshot(REPO, revision="main", endpoint=hub.url, cache_dir=tmp_path / "cache", token=False)
    assert snap.name == first.commit and (snap / "pkg" / "big.bin").read_bytes() == bytes(range(256)) * 200
    assert verify_snapshot(snap) == []


def test_tampered_cache_file_is_refetched(hub, pushed, tmp_path):
    snap = download_snapshot(REPO, revision="main", endpoint=hub.url, cache_dir=tmp_path / "cache", token=False)
    blob = (snap / "a.txt").resolve()
    blob.write_bytes(b"evil")
    assert [bad[0] for bad in verify_snapshot(snap)] == ["a.txt"]
    snap = download_snapshot(REPO, revision="main", endpoint=hub.url, cache_dir=tmp_path / "cache", token=False)
    assert (snap / "a.txt").read_bytes() == b"alpha"


def test_tampered_cache_offline_raises(hub, pushed, tmp_path):
    snap = download_snapshot(REPO, revision="main", endpoint=hub.url, cache_dir=tmp_path / "cache", token=False)
    (snap / "a.txt").resolve().write_bytes(b"evil")
    with pytest.raises(DigestMismatchError, match="a.txt"):
        download_snapshot(REPO, revision=snap.name, endpoint=hub.url, cache_dir=tmp_path / "cache", token=False,
                          local_files_only=True)


def test_blob_tampered_on_the_server_is_detected(hub, pushed, tmp_path):
    import hashlib

    blob = hub.storage.blob_path(hashlib.sha256(b"alpha").hexdigest())
    blob.write_bytes(b"omega")  # same size, different bytes: only a digest check can tell
    with pytest.raises(RemoteFileCorruptError) as e:
        download_snapshot(REPO, revision="main", endpoint=hub.url, cache_dir=tmp_path / "cache", token=False)
    assert e.value.path == "a.txt" and "a.txt" in str(e.value).splitlines()[0]


def test_cache_pointer_replaced_by_a_file_is_refetched_online_refused_offline(hub, pushed, tmp_path):
    """``sed -i`` replaces the cache's link to a blob by a plain file: no blob name vouches for it."""
    snap = download_snapshot(REPO, revision="main", endpoint=hub.url, cache_dir=tmp_path / "cache", token=False)
    (snap / "a.txt").unlink()
    (snap / "a.txt").write_bytes(b"evil")
    (snap / "planted.py").write_bytes(b"import os\n")
    assert sorted(bad[0] for bad in verify_snapshot(snap)) == ["a.txt", "planted.py"]
    with pytest.raises(DigestMismatchError, match="a.txt"):
        download_snapshot(REPO, revision=snap.name, endpoint=hub.url, cache_dir=tmp_path / "cache", token=False,
                          local_files_only=True)
    fetched = fetch_snapshot(REPO, revision="main", endpoint=hub.url, cache_dir=tmp_path / "cache", token=False)
    assert fetched.files["a.txt"] == b"alpha" and "planted.py" not in fetched.files
    assert (snap / "a.txt").read_bytes() == b"alpha" and not (snap / "planted.py").exists()
    assert verify_snapshot(snap) == []


def test_truncated_download_is_resumed_with_range(hub, pushed, tmp_path):
    hub.faults.truncate["pkg/big.bin"] = 1
    snap = download_snapshot(REPO, revision="main", endpoint=hub.url, cache_dir=tmp_path / "cache", token=False)
    assert hub.faults.truncate["pkg/big.bin"] == 0  # the fault fired
    assert (snap / "pkg" / "big.bin").read_bytes() == bytes(range(256)) * 200


def test_branch_moves_are_one_compare_and_set(hub, pushed, tmp_path):
    """A moved branch is never missing for a reader, and a stale expectation moves nothing."""
    from nkihub.hub_client.client import compare_and_set_branch, hf_api

    src, first = pushed
    api = hf_api(hub.url, False)
    api.create_branch(REPO, branch="v1", repo_type="kernel", revision=first.commit)
    (src / "a.txt").write_bytes(b"beta")
    second = push_folder(src, REPO, message="second", endpoint=hub.url, token=False)
    assert compare_and_set_branch(api, REPO, "v1", second.commit, expected="0" * 40) is False
    assert hub.storage.refs("kernel", REPO)["branches"]["v1"] == first.commit
    seen, stop = [], __import__("threading").Event()

    def reader():
        while not stop.is_set():
            seen.append("v1" in hub.storage.refs("kernel", REPO)["branches"])

    t = __import__("threading").Thread(target=reader)
    t.start()
    try:
        assert set_branch(REPO, "v1", second.commit, endpoint=hub.url, token=False)
        assert compare_and_set_branch(api, REPO, "v1", first.commit, expected=second.commit) is True
    finally:
        stop.set()
        t.join()
    assert seen and all(seen)
    assert hub.storage.refs("kernel", REPO)["branches"]["v1"] == first.commit
