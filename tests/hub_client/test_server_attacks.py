"""Attacks and faults on the local Hub: unicode names, odd tokens, stored files that rotted on disk."""

from __future__ import annotations

import hashlib
import json
import logging
from urllib.parse import quote, unquote

import pytest
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError

from nkihub.hub_client.server import serve_in_background

from .test_server import raw

REPO = "neuron/demo"
RTL = "\u200f"


@pytest.fixture
def repo(hub):
    api = HfApi(endpoint=hub.url, token=False)
    api.create_repo(REPO, repo_type="kernel")
    ops = [CommitOperationAdd(path_in_repo="pkg/ops.py", path_or_fileobj=b"def f():\n    return 1\n" * 50),
           CommitOperationAdd(path_in_repo="caf\u00e9.txt", path_or_fileobj=b"unicode names are fine\n")]
    return api.create_commit(REPO, ops, commit_message="files", repo_type="kernel").oid


def q(s: str) -> str:
    return quote(s, safe="")


@pytest.mark.parametrize("path,status", [
    (f"/api/kernels/{q('neuron中')}/x", 400),                              # repo id outside the name rules
    (f"/api/kernels/neuron/{q('x' + RTL)}", 400),
    (f"/api/kernels/neuron/demo/revision/{q('v1🙂')}", 400),                 # revision with an emoji
    (f"/api/kernels/neuron/demo/tree/{q('main' + RTL)}", 400),
    (f"/kernels/neuron/demo/resolve/main/{q('🙂.py')}", 404),               # a valid but absent file name
    (f"/kernels/neuron/demo/resolve/main/pkg/{q('ops' + RTL + '.py')}", 404),
    (f"/kernels/neuron/demo/resolve/{q('नमस्ते')}/pkg/ops.py", 400),         # revisions are [A-Za-z0-9._+-]
    (f"/api/kernels/{q('nëuron')}/demo", 400),
])
def test_unicode_names_get_their_4xx_with_the_full_text_in_the_body(hub, repo, path, status):
    code, headers, body = raw(hub, "GET", path)
    assert code == status, body[:300]
    message = json.loads(body)["error"]
    assert message
    header = {k.lower(): v for k, v in headers.items()}["x-error-message"]
    assert header.isascii() and unquote(header) == message.replace("\n", " ")[: len(unquote(header))]


def test_unicode_file_name_in_a_commit_and_in_a_download(hub, repo, tmp_path):
    local = hf_hub_download(REPO, "caf\u00e9.txt", repo_type="kernel", endpoint=hub.url, cache_dir=tmp_path / "c")
    assert open(local, "rb").read() == b"unicode names are fine\n"
    with pytest.raises(HfHubHTTPError) as e:
        HfApi(endpoint=hub.url, token=False).create_tag(REPO, tag="v1" + RTL, repo_type="kernel")
    assert e.value.response.status_code == 400 and "v1" in str(e.value)


WRONG_TOKENS = [b"Bearer t\xf6ken", "Bearer tökén".encode(), b"Bearer \xff\xfe", b"Basic abc", b"", b"Bearer ",
                b"bearer wrong", "Bearer s3cret\u200f".encode(), b"Bearer s3cret s3cret", b"Bearer\ts3cret"]


def test_any_wrong_token_is_401(tmp_path):
    with serve_in_background(tmp_path / "root", token="s3cret") as hub:
        body = json.dumps({"type": "kernel", "organization": "neuron", "name": "x"}).encode()
        for token in WRONG_TOKENS:
            headers = {"Authorization": token} if token else {}
            code, h, data = raw(hub, "POST", "/api/repos/create", body, {"Content-Type": "application/json", **headers})
            assert code == 401, (token, data[:200])
            assert not hub.storage.repo_exists("kernel", "neuron/x")
        ok = raw(hub, "POST", "/api/repos/create", body, {"Content-Type": "application/json",
                                                           "Authorization": "Bearer s3cret"})
        assert ok[0] == 200


def stored_blob(hub, data: bytes):
    return hub.storage.blob_path(hashlib.sha256(data).hexdigest())


OPS = b"def f():\n    return 1\n" * 50


@pytest.mark.parametrize("damage", ["truncate", "same-size", "missing"])
def test_rotten_stored_file_is_a_5xx_naming_it_never_a_short_body(hub, repo, tmp_path, caplog, damage):
    blob = stored_blob(hub, OPS)
    if damage == "truncate":
        blob.write_bytes(OPS[:100])
    elif damage == "same-size":
        blob.write_bytes(OPS.replace(b"return 1", b"return 2"))
    else:
        blob.unlink()
    with caplog.at_level(logging.ERROR, logger="nkihub.hub_client.server"):
        code, headers, body = raw(hub, "GET", "/kernels/neuron/demo/resolve/main/pkg/ops.py")
    assert 500 <= code < 600
    assert "pkg/ops.py" in json.loads(body)["error"]
    assert "pkg/ops.py" in caplog.text
    with pytest.raises(Exception) as e:
        hf_hub_download(REPO, "pkg/ops.py", repo_type="kernel", endpoint=hub.url, cache_dir=tmp_path / "c")
    assert "pkg/ops.py" in str(e.value)


def test_rotten_file_reaches_the_kernels_user_as_an_error_naming_it(hub, repo, tmp_path):
    from nkihub.hub_client.client import download_snapshot

    stored_blob(hub, OPS).write_bytes(OPS[:10])
    with pytest.raises(Exception) as e:
        download_snapshot(REPO, revision="main", cache_dir=tmp_path / "c", endpoint=hub.url, token=False)
    first_line = str(e.value).splitlines()[0]
    assert "pkg/ops.py" in first_line, str(e.value)
