"""Signed means current: version binding, freeze and mix-and-match, attacked from the Hub side.

The attacker has write access to the Hub and uses its ordinary API only (``upload_folder``,
``create_commit``, tags); it holds no key the user trusts. Every build it serves carries a valid
signature by the honest publisher. Each attack must be refused naming the repo, the versions and
the key, and every honest path must still load.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import torch

from nkihub import kernels
from nkihub.cli import main as cli
from nkihub.kernels import freshness
from nkihub.kernels.signing import KernelSignatureError

REPO = "neuron/toy-kernel"


def scale(mod) -> float:
    return mod.scale(torch.ones(1)).item()


def refused(call, *parts) -> str:
    with pytest.raises(KernelSignatureError) as e:
        call()
    msg = str(e.value)
    for part in parts:
        assert part in msg, (part, msg)
    return msg


# ---- the statement ---------------------------------------------------------------------------------
def test_statement_binds_version_time_expiry_and_release(kernels_env, make_kernel, keys, attacker):
    from nkihub.hub_client import signing

    key = keys["publisher"][0]
    assert cli(["publish", str(make_kernel("1.2.0")), "--repo-id", REPO, "--sign", str(key), "--expires", "30d"]) == 0
    snap = attacker.snapshot("v1.2.0")
    docs = {v: json.loads((snap / "signatures" / f"{v}.json").read_text()) for v in ("torch-cpu", "torch-neuron")}
    st = docs["torch-cpu"]["statement"]
    assert docs["torch-cpu"]["format"] == "nkihub-signature/2" and st["format"] == 2
    assert (st["repo_id"], st["variant"], st["version"], st["package_version"]) == (REPO, "torch-cpu", 1, "1.2.0")
    published, expires = signing.parse_time(st["published"]), signing.parse_time(st["expires"])
    assert expires - published == timedelta(days=30)
    assert set(st["release"]) == {"torch-cpu", "torch-neuron"}
    for variant, doc in docs.items():
        assert doc["statement"]["release"] == st["release"]
        assert st["release"][variant] == signing.files_digest(doc["statement"]["files"])
        signing.verify(doc)


def test_expires_needs_sign(kernels_env, make_kernel):
    from nkihub.kernels.publish import PublishError, publish

    with pytest.raises(PublishError, match="--expires needs --sign"):
        publish(make_kernel("1.0.0"), REPO, expires="30d")
    assert cli(["publish", str(make_kernel("1.0.0")), "--repo-id", REPO, "--expires", "30d"]) == 1


# ---- version binding -------------------------------------------------------------------------------
def test_v1_uploaded_onto_branch_v2_is_refused(publish_signed, trust_publisher, attacker, publisher_id):
    """The issue's reproduction: v1's signed snapshot uploaded onto branch v2, loaded by a fresh client."""
    publish_signed("1.0.0", 2.0)
    publish_signed("2.0.0", 3.0)
    trust_publisher(required=True)
    attacker.replace("v2", attacker.snapshot("v1"))
    refused(lambda: kernels.get(REPO, version=2), REPO, "v2", "1.0.0", "major 1", publisher_id)
    trust_publisher(required=False)  # keys trusted for the org are enough to check
    refused(lambda: kernels.get(REPO, version=2), REPO, "v2", "1.0.0", publisher_id)
    # honest paths: v1 itself, and 2.0.0 pinned by its tag
    assert scale(kernels.get(REPO, version=1)) == 2.0
    assert scale(kernels.get(REPO, revision="v2.0.0")) == 3.0


def test_tag_moved_onto_another_version_is_refused(publish_signed, trust_publisher, attacker, publisher_id):
    v1 = publish_signed("1.0.0", 2.0)
    publish_signed("2.0.0", 3.0)
    trust_publisher()
    attacker.move_tag("v2.0.0", v1.commit)
    refused(lambda: kernels.get(REPO, revision="v2.0.0"), REPO, "2.0.0", "1.0.0", publisher_id)


def test_commit_tagged_as_another_version_is_refused(publish_signed, trust_publisher, attacker, publisher_id):
    """A commit the Hub lists under tag vX.Y.Z must be signed as X.Y.Z, whatever name it was reached by
    (here ``main``, which names no version of its own)."""
    publish_signed("1.0.0", 2.0)
    publish_signed("2.0.0", 3.0)
    trust_publisher()
    commit = attacker.replace("main", attacker.snapshot("v1"))
    attacker.api.create_tag(REPO, tag="v2.0.1", revision=commit, repo_type="kernel")
    refused(lambda: kernels.get(REPO, revision="main"), REPO, "v2.0.1", "1.0.0", publisher_id)


def test_version_checks_unit():
    from nkihub.kernels.signing import SignatureCheck

    signed = SignatureCheck("signed", True, "k" * 16, 2, "2.0.1")
    commit = "a" * 40
    for ok in (freshness.Request("v2", commit, False), freshness.Request("v2.0.1", commit, True),
               freshness.Request("main", commit, False, ("v2.0.1",)), freshness.Request(commit, commit, True,
                                                                                        lock_major=2)):
        freshness.check_version(REPO, "torch-cpu", signed, ok)
    for bad, words in ((freshness.Request("v3", commit, False), "branch v3"),
                       (freshness.Request("v2.0.2", commit, True), "tag v2.0.2"),
                       (freshness.Request(commit, commit, True, ("v2.0.0",)), "tagged v2.0.0"),
                       (freshness.Request(commit, commit, True, lock_major=1), "kernels.lock pins major 1")):
        refused(lambda: freshness.check_version(REPO, "torch-cpu", signed, bad), words, "2.0.1", "k" * 16)
    assert freshness.is_pinned(commit) and freshness.is_pinned("v1.2.3") and freshness.is_pinned("stable", {"stable"})
    assert not freshness.is_pinned("v1") and not freshness.is_pinned("main")


# ---- freeze ----------------------------------------------------------------------------------------
def later(monkeypatch, days: int) -> None:
    now = freshness._now()
    monkeypatch.setattr(freshness, "_now", lambda: now + timedelta(days=days))


def test_frozen_branch_warns_then_is_refused_under_require(publish_signed, trust_publisher, attacker, publisher_id,
                                                           monkeypatch, tmp_path):
    """1.0.0 is signed as current for 30 days; the Hub keeps serving it after 1.0.1 came out."""
    v100 = publish_signed("1.0.0", 2.0, expires="30d")
    trust_publisher(required=False)
    mod = kernels.get(REPO, version=1)
    assert "current until" in mod.__kernel_info__.trust
    publish_signed("1.0.1", 3.0, expires="30d")
    attacker.replace("v1", attacker.snapshot(v100.commit))  # withhold 1.0.1 from clients that never saw it
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "fresh-client"))
    later(monkeypatch, 31)
    with pytest.warns(freshness.StaleSignatureWarning) as w:
        mod = kernels.get(REPO, version=1)
    msg = str(w[0].message)
    assert REPO in msg and "1.0.0" in msg and publisher_id in msg and "expired" in msg
    assert "STALE" in mod.__kernel_info__.trust
    trust_publisher(required=True)
    refused(lambda: kernels.get(REPO, version=1), REPO, "1.0.0", publisher_id, "expired", "KERNELS_REQUIRE_SIGNATURE")
    # a pinned old release is the user's choice: it loads, expired or not
    assert scale(kernels.get(REPO, revision="v1.0.0")) == 2.0


def test_no_expiry_never_goes_stale(publish_signed, trust_publisher, monkeypatch):
    publish_signed("1.0.0")
    trust_publisher()
    later(monkeypatch, 3650)
    assert scale(kernels.get(REPO, version=1)) == 2.0


# ---- mix-and-match ---------------------------------------------------------------------------------
def test_variants_of_two_releases_in_one_commit_are_refused(publish_signed, trust_publisher, attacker, publisher_id):
    """torch-cpu (and its signature) from 2.0.0 committed beside torch-neuron of 2.0.1 on branch v2."""
    v200 = publish_signed("2.0.0", 2.0)
    publish_signed("2.0.1", 3.0)
    trust_publisher()
    old = attacker.snapshot(v200.commit)
    files = {p.relative_to(old).as_posix(): p.read_bytes() for p in old.rglob("*") if p.is_file()}
    attacker.commit("v2", {rel: data for rel, data in files.items()
                           if rel.startswith(("build/torch-cpu/", "signatures/torch-cpu.json"))})
    refused(lambda: kernels.get(REPO, version=2), REPO, "mixed releases", "2.0.0", "2.0.1", publisher_id)
    assert cli(["verify", REPO, "--version", "2"]) == 1


@pytest.mark.parametrize("delete, words", [
    (["build/torch-neuron/", "signatures/torch-neuron.json"], "no signature for"),
    (["signatures/torch-neuron.json"], "no signature for"),
    (["build/torch-neuron/"], "lacks torch-neuron"),
])
def test_a_release_with_a_variant_taken_away_is_refused(publish_signed, trust_publisher, attacker, publisher_id,
                                                        delete, words):
    """Without torch-neuron a Neuron machine would fall back to torch-cpu: the commit is not the release."""
    publish_signed("1.0.0")
    trust_publisher()
    attacker.commit("v1", delete=delete)
    refused(lambda: kernels.get(REPO, version=1), REPO, "1.0.0", publisher_id, words)


def test_a_variant_added_to_a_release_is_refused(publish_signed, trust_publisher, attacker, publisher_id):
    publish_signed("1.0.0")
    trust_publisher(required=False)
    snap = attacker.snapshot("v1")
    extra = {f"build/torch-universal/{p.relative_to(snap / 'build/torch-cpu').as_posix()}": p.read_bytes()
             for p in (snap / "build/torch-cpu").rglob("*") if p.is_file()}
    attacker.commit("v1", extra)
    refused(lambda: kernels.get(REPO, version=1), REPO, "1.0.0", publisher_id, "also holds torch-universal")


def test_honest_release_loads_online_offline_and_verifies(publish_signed, trust_publisher, kernels_env, monkeypatch,
                                                          capsys):
    publish_signed("1.0.0")
    publish_signed("1.1.0", 3.0)
    trust_publisher()
    online = kernels.get(REPO, version=1)
    assert scale(online) == 3.0 and online.__kernel_info__.signature.package_version == "1.1.0"
    assert cli(["verify", REPO, "--version", "1"]) == 0
    assert "verified" in capsys.readouterr().out
    kernels_env.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert kernels.get(REPO, version=1) is online


# ---- format 1 (signed before versions were bound) --------------------------------------------------
def legacy_sign(attacker_or_publisher, key_path, branch: str) -> None:
    """What nkihub wrote before format 2: a statement of repo, variant and files only, committed on ``branch``."""
    import base64

    from nkihub.hub_client import signing
    from nkihub.kernels.verify import read_files

    key = signing.load_private_key(key_path)
    snap = attacker_or_publisher.snapshot(branch)
    docs = {}
    for vdir in sorted((snap / "build").iterdir()):
        st = {"repo_id": REPO, "variant": vdir.name, "files": signing.digest_set(read_files(vdir))}
        doc = {"format": signing.LEGACY_FORMAT, "statement": st,
               "key": signing.public_key_string(key.public_key()),
               "signature": base64.b64encode(key.sign(signing.canonical(st))).decode()}
        docs[f"signatures/{vdir.name}.json"] = json.dumps(doc).encode()
    attacker_or_publisher.commit(branch, docs)


def test_format_1_signatures_still_load_and_still_bind_the_version(kernels_env, make_kernel, keys, trust_publisher,
                                                                   attacker, publisher_id):
    """Format 1 covers metadata.json, whose package version is then the signer's word: v1 onto v2 is refused."""
    from nkihub.kernels.publish import publish

    publish(make_kernel("1.0.0", 2.0), REPO)
    legacy_sign(attacker, keys["publisher"][0], "v1")  # the publisher, with an older nkihub
    publish(make_kernel("2.0.0", 3.0), REPO)
    legacy_sign(attacker, keys["publisher"][0], "v2")
    trust_publisher()
    mod = kernels.get(REPO, version=2)
    assert scale(mod) == 3.0 and "format 1" in mod.__kernel_info__.trust
    attacker.replace("v2", attacker.snapshot("v1"))
    refused(lambda: kernels.get(REPO, version=2), REPO, "v2", "1.0.0", publisher_id)
