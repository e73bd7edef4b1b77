"""The local Hub against the unmodified huggingface_hub client, over loopback."""

from __future__ import annotations

import http.client
import json
import threading
from urllib.parse import urlsplit

import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url

from nkihub.hub_client.digest import git_blob_oid
from nkihub.hub_client.server import serve_in_background

REPO = "neuron/demo"


def api_for(hub, token=False):
    return HfApi(endpoint=hub.url, token=token)


def make_repo(hub, files: dict[str, bytes], repo_type="kernel"):
    api = api_for(hub)
    api.create_repo(REPO, repo_type=repo_type)
    from huggingface_hub import CommitOperationAdd

    ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=data) for p, data in files.items()]
    return api.create_commit(REPO, ops, commit_message="add files", repo_type=repo_type).oid


def raw(hub, method, path, body=b"", headers=None):
    """Send a request with the path exactly as given (no client-side normalisation)."""
    u = urlsplit(hub.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)  # a bound for a loaded machine, not a timing check
    conn.putrequest(method, path, skip_accept_encoding=True)
    for k, v in (headers or {}).items():
        conn.putheader(k, v)
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), data


@pytest.mark.parametrize("repo_type", ["model", "dataset", "kernel"])
def test_upload_download_round_trip(hub, tmp_path, repo_type):
    files = {"README.md": b"# demo\n", "build/torch-cpu/pkg/__init__.py": b"X = 1\n", "data.bin": bytes(range(256)) * 40}
    commit = make_repo(hub, files, repo_type)
    for path, data in files.items():
        local = hf_hub_download(REPO, path, repo_type=repo_type, endpoint=hub.url, cache_dir=tmp_path / "c")
        assert open(local, "rb").read() == data
    snap = snapshot_download(REPO, repo_type=repo_type, endpoint=hub.url, cache_dir=tmp_path / "s")
    assert snap.endswith(commit)
    assert open(f"{snap}/build/torch-cpu/pkg/__init__.py", "rb").read() == b"X = 1\n"
    info = api_for(hub).repo_info(REPO, repo_type=repo_type)
    assert info.sha == commit


def test_head_metadata_etag_commit_and_size(hub):
    commit = make_repo(hub, {"a.txt": b"hello world"})
    meta = get_hf_file_metadata(hf_hub_url(REPO, "a.txt", repo_type="kernel", endpoint=hub.url), token=False)
    assert meta.commit_hash == commit
    assert meta.etag == git_blob_oid(b"hello world")
    assert meta.size == 11


def test_refs_tags_branches(hub):
    commit = make_repo(hub, {"a.txt": b"1"})
    api = api_for(hub)
    api.create_branch(REPO, branch="v1", repo_type="kernel")
    api.create_tag(REPO, tag="v1.0.0", revision="v1", repo_type="kernel", tag_message="first")
    refs = api.list_repo_refs(REPO, repo_type="kernel")
    assert {b.name: b.target_commit for b in refs.branches} == {"main": commit, "v1": commit}
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [("v1.0.0", "refs/tags/v1.0.0", commit)]
    with pytest.raises(HfHubHTTPError) as e:
        api.create_branch(REPO, branch="v1", repo_type="kernel")
    assert e.value.response.status_code == 409
    api.create_branch(REPO, branch="v1", repo_type="kernel", exist_ok=True)
    api.upload_file(path_or_fileobj=b"2", path_in_repo="b.txt", repo_id=REPO, repo_type="kernel", revision="v1",
                    commit_message="on v1")
    assert hf_hub_download(REPO, "b.txt", repo_type="kernel", revision="v1", endpoint=hub.url,
                           cache_dir=hub.storage.root.parent / "c")
    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(REPO, "b.txt", repo_type="kernel", revision="main", cache_dir=hub.storage.root.parent / "c")
    api.delete_tag(REPO, tag="v1.0.0", repo_type="kernel")
    api.delete_branch(REPO, branch="v1", repo_type="kernel")
    refs = api.list_repo_refs(REPO, repo_type="kernel")
    assert [b.name for b in refs.branches] == ["main"] and refs.tags == []


def test_commits_are_listed_newest_first(hub):
    make_repo(hub, {"a.txt": b"1"})
    api = api_for(hub)
    api.upload_file(path_or_fileobj=b"2", path_in_repo="a.txt", repo_id=REPO, repo_type="kernel",
                    commit_message="second")
    titles = [c.title for c in api.list_repo_commits(REPO, repo_type="kernel")]
    assert titles == ["second", "add files", "initial commit"]


def test_tree_is_paged_and_recursive(tmp_path):
    with serve_in_background(tmp_path / "root", tree_page_size=3) as hub:
        files = {f"d{i % 3}/sub/f{i}.txt": str(i).encode() for i in range(10)}
        files["top.txt"] = b"t"
        make_repo(hub, files)
        api = api_for(hub)
        entries = list(api.list_repo_tree(REPO, repo_type="kernel", recursive=True))
        got_files = {e.path for e in entries if e.__class__.__name__ == "RepoFile"}
        got_dirs = {e.path for e in entries if e.__class__.__name__ == "RepoFolder"}
        assert got_files == set(files) | {".gitattributes"}
        assert got_dirs == {"d0", "d1", "d2", "d0/sub", "d1/sub", "d2/sub"}
        top = {e.path for e in api.list_repo_tree(REPO, repo_type="kernel")}
        assert top == {".gitattributes", "top.txt", "d0", "d1", "d2"}
        sub = {e.path for e in api.list_repo_tree(REPO, path_in_repo="d1", repo_type="kernel")}
        assert sub == {"d1/sub"}
        # the pages really are pages: the raw first response holds 3 entries and a Link header
        status, headers, body = raw(hub, "GET", f"/api/kernels/{REPO}/tree/main?recursive=true")
        assert status == 200 and len(json.loads(body)) == 3 and 'rel="next"' in headers["link"]


def test_paths_info(hub):
    make_repo(hub, {"build/torch-cpu/metadata.json": b"{}", "README.md": b"x"})
    infos = api_for(hub).get_paths_info(REPO, ["build", "README.md", "missing.txt"], repo_type="kernel")
    kinds = {i.path: type(i).__name__ for i in infos}
    assert kinds == {"build": "RepoFolder", "README.md": "RepoFile"}
    readme = next(i for i in infos if i.path == "README.md")
    assert readme.size == 1 and readme.blob_id == git_blob_oid(b"x")


def test_range_requests(hub):
    make_repo(hub, {"r.bin": bytes(range(100))})
    path = f"/kernels/{REPO}/resolve/main/r.bin"
    status, headers, body = raw(hub, "GET", path, headers={"Range": "bytes=10-19"})
    assert status == 206 and body == bytes(range(10, 20)) and headers["content-range"] == "bytes 10-19/100"
    status, _, body = raw(hub, "GET", path, headers={"Range": "bytes=95-"})
    assert status == 206 and body == bytes(range(95, 100))
    status, _, body = raw(hub, "GET", path, headers={"Range": "bytes=-3"})
    assert status == 206 and body == bytes([97, 98, 99])
    status, _, _ = raw(hub, "GET", path, headers={"Range": "bytes=200-"})
    assert status == 416
    status, headers, body = raw(hub, "HEAD", path)
    assert status == 200 and body == b"" and headers["content-length"] == "100"
    assert headers["etag"] == f'"{git_blob_oid(bytes(range(100)))}"' and len(headers["x-repo-commit"]) == 40


def test_unknown_repo_revision_file_raise_hf_errors(hub, tmp_path):
    make_repo(hub, {"a.txt": b"1"})
    kw = dict(repo_type="kernel", endpoint=hub.url, cache_dir=tmp_path / "c")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("neuron/nope", "a.txt", **kw)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "a.txt", revision="v9", **kw)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "missing.txt", **kw)
    api = api_for(hub)
    with pytest.raises(RepositoryNotFoundError):
        api.list_repo_refs("neuron/nope", repo_type="kernel")
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_tree(REPO, repo_type="kernel", revision="nope").__next__()
    assert not api.file_exists(REPO, "missing.txt", repo_type="kernel")
    assert api.repo_exists(REPO, repo_type="kernel") and not api.repo_exists("neuron/nope", repo_type="kernel")


def test_create_repo_twice_and_delete(hub):
    api = api_for(hub)
    url = api.create_repo(REPO, repo_type="kernel")
    assert str(url).endswith("/kernels/neuron/demo")
    assert str(api.create_repo(REPO, repo_type="kernel", exist_ok=True)) == str(url)
    with pytest.raises(HfHubHTTPError):
        api.create_repo(REPO, repo_type="kernel")
    api.delete_repo(REPO, repo_type="kernel")
    assert not api.repo_exists(REPO, repo_type="kernel")


def test_lfs_upload_when_xet_is_disabled(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    big = bytes(range(256)) * 64
    with serve_in_background(tmp_path / "root", lfs_threshold=1024) as hub:
        make_repo(hub, {"weights.bin": big, "small.txt": b"s"})
        files = {f.path: f for f in api_for(hub).list_repo_tree(REPO, repo_type="kernel")}
        assert files["weights.bin"].lfs is not None and files["small.txt"].lfs is None
        import hashlib

        assert files["weights.bin"].lfs.sha256 == hashlib.sha256(big).hexdigest()
        local = hf_hub_download(REPO, "weights.bin", repo_type="kernel", endpoint=hub.url, cache_dir=tmp_path / "c")
        assert open(local, "rb").read() == big


def test_files_are_regular_by_default(hub):
    make_repo(hub, {"weights.bin": bytes(1 << 16)})
    (f,) = [f for f in api_for(hub).list_repo_tree(REPO, repo_type="kernel") if f.path == "weights.bin"]
    assert f.lfs is None


TRAVERSALS = [
    ("GET", "/kernels/neuron/demo/resolve/main/../../../../etc/passwd"),
    ("GET", "/kernels/neuron/demo/resolve/main/%2e%2e/%2e%2e/secret"),
    ("GET", "/kernels/neuron/demo/resolve/main/a%5cb"),
    ("GET", "/kernels/neuron/demo/resolve/main/a%00b"),
    ("GET", "/kernels/neuron/demo/resolve/main/%2Fetc%2Fpasswd"),
    ("GET", "/kernels/neuron/demo/resolve/..%2F..%2Fx/a.txt"),
    ("GET", "/kernels/..%2F..%2Fetc/demo/resolve/main/a.txt"),
    ("GET", "/api/kernels/neuron/..%2F..%2Fx/refs"),
    ("GET", "/api/kernels/neuron/demo/tree/main/..%2F..%2F.."),
    ("GET", "/api/kernels/neuron/demo/revision/..%2F..%2Fx"),
    ("GET", "/kernels/neuron/demo/resolve/main/" + "a" * 3000),
]


@pytest.mark.parametrize("method,path", TRAVERSALS)
def test_path_traversal_is_refused_with_400(hub, method, path):
    make_repo(hub, {"a.txt": b"1"})
    status, _, body = raw(hub, method, path)
    assert status == 400, body


def test_path_traversal_in_commit_payload_is_refused(hub):
    make_repo(hub, {"a.txt": b"1"})
    before = hub.storage.refs("kernel", REPO)
    for bad in ["../../escape.txt", "/abs.txt", "a\\b.txt", "x/../../y", "a\x00b"]:
        lines = [{"key": "header", "value": {"summary": "evil"}},
                 {"key": "file", "value": {"path": bad, "content": "aGk=", "encoding": "base64"}}]
        body = b"\n".join(json.dumps(x).encode() for x in lines)
        status, _, _ = raw(hub, "POST", f"/api/kernels/{REPO}/commit/main", body,
                           {"Content-Type": "application/x-ndjson"})
        assert status == 400
    assert hub.storage.refs("kernel", REPO) == before
    assert not (hub.storage.root.parent / "escape.txt").exists()
    status, _, _ = raw(hub, "POST", "/api/repos/create", json.dumps(
        {"name": "..", "organization": "..", "type": "kernel"}).encode(), {"Content-Type": "application/json"})
    assert status == 400


def test_writes_need_the_token_when_one_is_set(tmp_path):
    with serve_in_background(tmp_path / "root", token="s3cret") as hub:
        with pytest.raises(HfHubHTTPError) as e:
            api_for(hub, token=False).create_repo(REPO, repo_type="kernel")
        assert e.value.response.status_code == 401
        with pytest.raises(HfHubHTTPError):
            api_for(hub, token="wrong").create_repo(REPO, repo_type="kernel")
        writer = api_for(hub, token="s3cret")
        writer.create_repo(REPO, repo_type="kernel")
        writer.upload_file(path_or_fileobj=b"1", path_in_repo="a.txt", repo_id=REPO, repo_type="kernel")
        with pytest.raises(HfHubHTTPError):
            api_for(hub, token=False).upload_file(path_or_fileobj=b"2", path_in_repo="b.txt", repo_id=REPO,
                                                  repo_type="kernel")
        with pytest.raises(HfHubHTTPError):
            api_for(hub, token=False).create_branch(REPO, branch="v1", repo_type="kernel")
        # reads stay open
        reader = api_for(hub, token=False)
        assert [f.path for f in reader.list_repo_tree(REPO, repo_type="kernel")] == [".gitattributes", "a.txt"]
        assert reader.hf_hub_download(REPO, "a.txt", repo_type="kernel", cache_dir=tmp_path / "c")


def _send_partial(hub, method, path, declared: int, sent: bytes, headers=None):
    import socket

    u = urlsplit(hub.url)
    s = socket.create_connection((u.hostname, u.port), timeout=5)
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n"
    for k, v in (headers or {}).items():
        head += f"{k}: {v}\r\n"
    s.sendall(head.encode() + b"\r\n" + sent)
    s.close()


def _wait_idle(hub):
    import time

    for _ in range(100):  # the server notices the disconnect asynchronously
        if not list((hub.storage.root / "tmp").iterdir()):
            return
        time.sleep(0.05)


def test_interrupted_commit_leaves_no_partial_commit(hub):
    make_repo(hub, {"a.txt": b"1"})
    before = hub.storage.refs("kernel", REPO)
    n_commits = len(list((hub.storage.repo_dir("kernel", REPO) / "commits").iterdir()))
    import base64

    lines = [{"key": "header", "value": {"summary": "half"}}] + [
        {"key": "file", "value": {"path": f"f{i}.txt", "content": base64.b64encode(b"x" * 1000).decode(),
                                  "encoding": "base64"}} for i in range(50)]
    body = b"\n".join(json.dumps(x).encode() for x in lines)
    _send_partial(hub, "POST", f"/api/kernels/{REPO}/commit/main", len(body), body[: len(body) // 2],
                  {"Content-Type": "application/x-ndjson"})
    _wait_idle(hub)
    assert hub.storage.refs("kernel", REPO) == before
    assert len(list((hub.storage.repo_dir("kernel", REPO) / "commits").iterdir())) == n_commits
    # the repo still works
    api_for(hub).upload_file(path_or_fileobj=b"2", path_in_repo="b.txt", repo_id=REPO, repo_type="kernel")
    assert hub.storage.refs("kernel", REPO)["branches"]["main"] != before["branches"]["main"]


def test_interrupted_lfs_upload_stores_nothing(hub):
    from nkihub.hub_client.server.views import lfs_signature

    make_repo(hub, {"a.txt": b"1"})
    import hashlib

    data = b"z" * 100_000
    oid = hashlib.sha256(data).hexdigest()
    sig = lfs_signature(hub.app.config, oid)
    _send_partial(hub, "PUT", f"/api/lfs/kernels/{REPO}/objects/{oid}?sig={sig}", len(data), data[:40_000])
    _wait_idle(hub)
    assert not hub.storage.has_blob(oid)
    assert list((hub.storage.root / "tmp").iterdir()) == []


def test_failure_midway_through_a_commit_changes_nothing(hub, monkeypatch):
    make_repo(hub, {"a.txt": b"1"})
    before = hub.storage.refs("kernel", REPO)
    real = hub.storage.put_bytes
    calls = []

    def flaky(data):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(data)

    monkeypatch.setattr(hub.storage, "put_bytes", flaky)
    from huggingface_hub import CommitOperationAdd

    ops = [CommitOperationAdd(path_in_repo=f"f{i}", path_or_fileobj=f"{i}".encode()) for i in range(3)]
    with pytest.raises(HfHubHTTPError) as e:
        api_for(hub).create_commit(REPO, ops, commit_message="x", repo_type="kernel")
    assert e.value.response.status_code == 500
    assert hub.storage.refs("kernel", REPO) == before


def test_commit_with_stale_parent_is_refused(hub):
    commit = make_repo(hub, {"a.txt": b"1"})
    api = api_for(hub)
    api.upload_file(path_or_fileobj=b"2", path_in_repo="a.txt", repo_id=REPO, repo_type="kernel")
    from huggingface_hub import CommitOperationAdd

    with pytest.raises(HfHubHTTPError) as e:
        api.create_commit(REPO, [CommitOperationAdd(path_in_repo="a.txt", path_or_fileobj=b"3")], commit_message="x",
                          repo_type="kernel", parent_commit=commit)
    assert e.value.response.status_code == 412


def test_concurrent_commits_all_land_consistently(hub):
    make_repo(hub, {"a.txt": b"0"})
    errors = []

    def writer(i):
        try:
            api_for(hub).upload_file(path_or_fileobj=str(i).encode(), path_in_repo=f"w{i}.txt", repo_id=REPO,
                                     repo_type="kernel", commit_message=f"w{i}")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == []
    files = {f.path for f in api_for(hub).list_repo_tree(REPO, repo_type="kernel")}
    assert {f"w{i}.txt" for i in range(6)} <= files  # no commit lost another's file
