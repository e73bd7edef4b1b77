"""Publisher signatures: keygen, publish --sign, and loads under KERNELS_REQUIRE_SIGNATURE=1.

The attacker here controls the Hub: it can commit any file, including a metadata.json whose digests
match its tampered code. Only a signature by a key the user trusts for the org tells the two apart.
"""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
import torch
from huggingface_hub import CommitOperationAdd, HfApi

from nkihub import kernels
from nkihub.cli import main as cli
from nkihub.kernels.publish import publish
from nkihub.kernels.signing import KernelSignatureError

REPO = "neuron/toy-kernel"


@pytest.fixture
def signed(kernels_env, make_kernel, keys, monkeypatch):
    key, pub = keys["publisher"]
    assert cli(["publish", str(make_kernel("1.0.0", 2.0)), "--repo-id", REPO, "--sign", str(key)]) == 0
    monkeypatch.setenv("KERNELS_TRUSTED_KEYS", f"neuron={pub}")
    monkeypatch.setenv("KERNELS_REQUIRE_SIGNATURE", "1")
    return kernels_env


def test_keygen_writes_a_private_key_only_its_owner_reads(keys):
    key, pub = keys["publisher"]
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert pub.startswith("ed25519:") and len(base64.b64decode(pub.split(":", 1)[1])) == 32
    assert keys["attacker"][1] != pub


def test_signed_kernel_loads_under_require_signature(signed, keys):
    mod = kernels.get(REPO, version=1)
    assert mod.scale(torch.ones(1)).item() == 2.0
    from nkihub.hub_client.signing import key_id

    assert f"signed by {key_id(keys['publisher'][1])}" in mod.__kernel_info__.trust


def test_unsigned_kernel_is_refused_under_require_signature(kernels_env, make_kernel, keys, monkeypatch):
    publish(make_kernel("1.0.0"), REPO)
    monkeypatch.setenv("KERNELS_TRUSTED_KEYS", f"neuron={keys['publisher'][1]}")
    assert kernels.get(REPO, version=1)  # unsigned is allowed unless signatures are required
    monkeypatch.setenv("KERNELS_REQUIRE_SIGNATURE", "1")
    publish(make_kernel("1.0.1"), REPO)  # a new commit: not the module already loaded
    with pytest.raises(KernelSignatureError, match=f"{REPO}.*not signed"):
        kernels.get(REPO, version=1)


def compromise_hub(hub, variant="torch-cpu"):
    """Commit tampered code with a metadata.json whose digests match it, keeping the old signature."""
    api = HfApi(endpoint=hub.url, token=False)
    meta_path = api.hf_hub_download(REPO, f"build/{variant}/metadata.json", repo_type="kernel",
                                    cache_dir=hub.storage.root / "attacker-cache")
    meta = json.loads(open(meta_path).read())
    evil = b"def scale(x, factor=2.0):\n    return x * 1000\n"
    meta["digest"]["files"]["toy_kernel/ops.py"] = base64.b64encode(hashlib.sha256(evil).digest()).decode()
    ops = [CommitOperationAdd(path_in_repo=f"build/{variant}/toy_kernel/ops.py", path_or_fileobj=evil),
           CommitOperationAdd(path_in_repo=f"build/{variant}/metadata.json",
                              path_or_fileobj=json.dumps(meta).encode())]
    return api.create_commit(REPO, ops, commit_message="totally legit", repo_type="kernel", revision="v1").oid


def test_compromised_hub_with_matching_metadata_is_refused(signed, keys):
    from nkihub.hub_client.signing import key_id

    compromise_hub(signed)
    with pytest.raises(KernelSignatureError) as e:
        kernels.get(REPO, version=1)
    msg = str(e.value)
    assert REPO in msg and "toy_kernel/ops.py" in msg and key_id(keys["publisher"][1]) in msg


def test_compromised_hub_is_refused_even_without_require_when_the_org_has_keys(signed, monkeypatch):
    monkeypatch.delenv("KERNELS_REQUIRE_SIGNATURE")
    compromise_hub(signed)
    with pytest.raises(KernelSignatureError, match="toy_kernel/ops.py"):
        kernels.get(REPO, version=1)


def test_resigned_by_an_untrusted_key_is_refused_naming_the_key(kernels_env, make_kernel, keys, monkeypatch):
    from nkihub.hub_client.signing import key_id

    attacker_key, attacker_pub = keys["attacker"]
    publish(make_kernel("1.0.0"), REPO, sign=attacker_key)
    monkeypatch.setenv("KERNELS_TRUSTED_KEYS", f"neuron={keys['publisher'][1]}")
    monkeypatch.setenv("KERNELS_REQUIRE_SIGNATURE", "1")
    with pytest.raises(KernelSignatureError) as e:
        kernels.get(REPO, version=1)
    assert REPO in str(e.value) and key_id(attacker_pub) in str(e.value) and "not trusted" in str(e.value)


def test_signature_replayed_on_another_repo_is_refused(signed, keys, tmp_path):
    """The signed statement names its repo: copying a signed build elsewhere does not carry the trust."""
    api = HfApi(endpoint=signed.url, token=False)
    snap = api.snapshot_download(REPO, repo_type="kernel", revision="v1", cache_dir=tmp_path / "c")
    api.create_repo("neuron/copycat", repo_type="kernel")
    api.upload_folder(repo_id="neuron/copycat", folder_path=snap, repo_type="kernel", commit_message="copy")
    api.create_branch("neuron/copycat", branch="v1", repo_type="kernel")
    with pytest.raises(KernelSignatureError, match="neuron/copycat"):
        kernels.get("neuron/copycat", version=1)


def test_keys_are_trusted_per_org_from_a_config_file(signed, keys, tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELS_TRUSTED_KEYS")
    conf = tmp_path / "trusted_keys.toml"
    conf.write_text(f'[orgs]\nacme = ["{keys["publisher"][1]}"]\n')
    monkeypatch.setenv("KERNELS_TRUSTED_KEYS_FILE", str(conf))
    with pytest.raises(KernelSignatureError, match="no trusted key for 'neuron'"):
        kernels.get(REPO, version=1)
    conf.write_text(f'[orgs]\nacme = ["{keys["attacker"][1]}"]\nneuron = ["{keys["publisher"][1]}"]\n')
    assert kernels.get(REPO, version=1).scale(torch.ones(1)).item() == 2.0


def test_signed_kernel_loads_offline_from_the_cache(signed, monkeypatch):
    online = kernels.get(REPO, version=1)
    signed.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert kernels.get(REPO, version=1) is online
    path = kernels.install_kernel(REPO, version=1, local_files_only=True)
    assert (path / "toy_kernel" / "ops.py").is_file()


def test_bad_key_file_is_a_clear_error(kernels_env, make_kernel, tmp_path):
    bad = tmp_path / "not-a-key"
    bad.write_text("hello")
    with pytest.raises(ValueError, match="not-a-key"):
        publish(make_kernel(), REPO, sign=bad)
    assert not HfApi(endpoint=kernels_env.url, token=False).repo_exists(REPO, repo_type="kernel")


def test_expiry_accepts_durations_and_dates_and_refuses_the_past():
    from datetime import datetime, timedelta, timezone

    from nkihub.kernels.signing import parse_expiry

    now = datetime(2025, 6, 1, 12, tzinfo=timezone.utc)
    assert parse_expiry("30d", now) - now == timedelta(days=30)
    assert parse_expiry("12h", now) - now == timedelta(hours=12)
    assert parse_expiry("2w", now) - now == timedelta(weeks=2)
    assert parse_expiry("2025-07-01", now) == datetime(2025, 7, 1, tzinfo=timezone.utc)
    assert parse_expiry("2025-07-01T08:00:00Z", now) == datetime(2025, 7, 1, 8, tzinfo=timezone.utc)
    for bad, words in (("soon", "duration"), ("2025-05-01", "not in the future"), ("0d", "not in the future")):
        with pytest.raises(ValueError, match=words):
            parse_expiry(bad, now)


def test_unknown_statement_formats_are_refused_by_name():
    from nkihub.hub_client import signing

    doc = {"format": "nkihub-signature/3", "statement": {"files": {}}, "key": "ed25519:x", "signature": "x"}
    with pytest.raises(signing.SignatureError, match="nkihub-signature/3"):
        signing.read_document(json.dumps(doc).encode())
    st = {"format": 2, "repo_id": REPO, "variant": "torch-cpu", "version": 2, "package_version": "1.0.0",
          "published": "2025-06-01T12:00:00Z", "expires": None, "release": {}, "files": {}}
    doc = {"format": signing.FORMAT, "statement": st, "key": "ed25519:x", "signature": "x"}
    with pytest.raises(signing.SignatureError, match="disagree"):
        signing.read_document(json.dumps(doc).encode())
    st.pop("published")
    with pytest.raises(signing.SignatureError, match="published"):
        signing.read_document(json.dumps(doc).encode())
