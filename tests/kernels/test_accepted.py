"""Rollback protection: this machine never goes back to an older signed version it was not pinned to.

The attacker has write access to the Hub (ordinary upload API) and puts an older, validly signed
build of the same major back on the branch. The client remembers, in its cache, the highest signed
package version it accepted per repo and major, and refuses the older one, naming both versions and
the key. Pins (a tag, a commit, a kernels.lock entry) are the user's own choice and still load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from nkihub import kernels
from nkihub.kernels import accepted
from nkihub.kernels.lockfile import KernelLock, write_lockfile
from nkihub.kernels.signing import KernelSignatureError, SignatureCheck

REPO = "neuron/toy-kernel"


def scale(mod) -> float:
    return mod.scale(torch.ones(1)).item()


@pytest.fixture
def rolled_back(publish_signed, trust_publisher, attacker):
    """2.0.0 then 2.0.1 published and loaded; then the attacker puts 2.0.0's snapshot back on branch v2."""
    v200 = publish_signed("2.0.0", 2.0)
    trust_publisher()
    assert scale(kernels.get(REPO, version=2)) == 2.0
    v201 = publish_signed("2.0.1", 3.0)
    assert scale(kernels.get(REPO, version=2)) == 3.0
    attacker.replace("v2", attacker.snapshot(v200.commit))
    return v200, v201


def test_older_signed_build_served_on_the_branch_is_refused(rolled_back, publisher_id):
    with pytest.raises(KernelSignatureError) as e:
        kernels.get(REPO, version=2)
    msg = str(e.value)
    for part in (REPO, "rollback", "2.0.0", "2.0.1", "major 2", publisher_id, 'revision="v2.0.0"'):
        assert part in msg, (part, msg)
    assert accepted.accepted(REPO, 2)["version"] == "2.0.1"


def test_rollback_is_refused_in_a_new_process_too(rolled_back, publisher_id):
    """The memory is in the cache, not in the process."""
    script = f"from nkihub import kernels; kernels.get({REPO!r}, version=2)"
    r = subprocess.run([sys.executable, "-c", script], env=dict(os.environ), capture_output=True, text=True,
                       timeout=180)
    assert r.returncode != 0 and "rollback refused" in r.stderr and publisher_id in r.stderr


def test_pinned_old_versions_still_load(rolled_back, tmp_path):
    v200, v201 = rolled_back
    assert scale(kernels.get(REPO, revision="v2.0.0")) == 2.0
    assert scale(kernels.get(REPO, revision=v200.commit)) == 2.0
    lock = tmp_path / "kernels.lock"
    write_lockfile(lock, [KernelLock(REPO, v200.commit, version=2)])
    assert scale(kernels.get_locked_kernel(REPO, lockfile=lock)) == 2.0
    assert accepted.accepted(REPO, 2)["version"] == "2.0.1"  # a pin never lowers what was accepted


def test_lock_entry_for_another_major_is_refused(publish_signed, trust_publisher, tmp_path, publisher_id):
    v1 = publish_signed("1.0.0")
    trust_publisher()
    lock = tmp_path / "kernels.lock"
    write_lockfile(lock, [KernelLock(REPO, v1.commit, version=2)])
    with pytest.raises(KernelSignatureError, match=f"kernels.lock pins major 2.*key {publisher_id} as 1.0.0"):
        kernels.get_locked_kernel(REPO, lockfile=lock)


def test_new_versions_and_majors_load_and_raise_the_floor(publish_signed, trust_publisher):
    trust_publisher()
    for version, factor in (("1.0.0", 2.0), ("1.0.1", 3.0), ("1.2.0", 4.0), ("2.0.0", 5.0)):
        publish_signed(version, factor)
        assert scale(kernels.get(REPO, version=int(version[0]))) == factor
    assert accepted.accepted(REPO, 1)["version"] == "1.2.0"
    assert accepted.accepted(REPO, 2)["version"] == "2.0.0"
    assert scale(kernels.get(REPO, version=1)) == 4.0  # an older major is not a rollback


def test_locked_and_offline_loads_after_the_floor_rose(publish_signed, trust_publisher, kernels_env, tmp_path,
                                                       monkeypatch):
    from nkihub.kernels.lockfile import download_locked

    v100 = publish_signed("1.0.0", 2.0)
    project = tmp_path / "project"
    project.mkdir()
    write_lockfile(project / "kernels.lock", [KernelLock(REPO, v100.commit, version=1)])
    trust_publisher()
    download_locked(project)
    publish_signed("1.1.0", 3.0)
    assert scale(kernels.get(REPO, version=1)) == 3.0
    kernels_env.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert scale(kernels.load_kernel(REPO, lockfile=project / "kernels.lock")) == 2.0
    assert scale(kernels.get(REPO, version=1)) == 3.0


def test_signatures_stripped_after_a_signed_load_are_refused(publish_signed, trust_publisher, attacker,
                                                             publisher_id):
    """Keys trusted but signatures not required: an unsigned build would load, unless this major was signed."""
    publish_signed("2.0.0")
    trust_publisher(required=False)
    kernels.get(REPO, version=2)
    attacker.replace("v2", attacker.snapshot("v2"), ignore=["signatures/*"])
    with pytest.raises(KernelSignatureError) as e:
        kernels.get(REPO, version=2)
    for part in (REPO, "unsigned", "2.0.0", publisher_id):
        assert part in str(e.value)


def test_publishing_an_older_version_in_a_major_is_refused(publish_signed, kernels_env):
    from huggingface_hub import HfApi

    from nkihub.kernels.publish import PublishError

    publish_signed("2.1.0")
    with pytest.raises(PublishError, match="2.1.0.*rollback"):
        publish_signed("2.0.5", 3.0)
    refs = HfApi(endpoint=kernels_env.url, token=False).list_repo_refs(REPO, repo_type="kernel")
    assert {t.name for t in refs.tags} == {"v2.1.0"}
    publish_signed("2.1.1", 3.0)  # forward is fine


def test_hiding_the_newest_major_is_refused_when_asking_for_the_newest(publish_signed, trust_publisher, attacker,
                                                                       publisher_id):
    publish_signed("1.0.0", 2.0)
    publish_signed("2.0.0", 3.0)
    trust_publisher()
    assert scale(kernels.get(REPO)) == 3.0
    attacker.api.delete_branch(REPO, branch="v2", repo_type="kernel")
    with pytest.raises(KernelSignatureError, match=f"newest.*2.0.0 of major 2 .signed by key {publisher_id}"):
        kernels.get(REPO)
    assert scale(kernels.get(REPO, version=1)) == 2.0  # asked for by name: fine


def test_revoking_a_key_drops_the_versions_it_vouched_for(kernels_env, make_kernel, keys, publish_signed, attacker,
                                                          monkeypatch):
    """A thief signs 2.9.0 with a stolen key; once the user revokes the key, honest 2.1.0 loads again."""
    from nkihub.kernels.publish import publish

    publish_signed("2.0.0", 2.0)
    stolen, stolen_pub = keys["attacker"]  # a second key of the org, about to be stolen
    monkeypatch.setenv("KERNELS_TRUSTED_KEYS", f"neuron={keys['publisher'][1]},neuron={stolen_pub}")
    monkeypatch.setenv("KERNELS_REQUIRE_SIGNATURE", "1")
    kernels.get(REPO, version=2)
    publish(make_kernel("2.9.0", 666.0), REPO, sign=stolen)
    assert scale(kernels.get(REPO, version=2)) == 666.0  # signed by a trusted key: nothing can tell
    monkeypatch.setenv("KERNELS_TRUSTED_KEYS", f"neuron={keys['publisher'][1]}")  # revoked
    with pytest.raises(KernelSignatureError, match="not trusted"):
        kernels.get(REPO, version=2)
    attacker.api.delete_tag(REPO, tag="v2.9.0", repo_type="kernel")  # the publisher cleans up
    publish_signed("2.1.0", 3.0)
    assert scale(kernels.get(REPO, version=2)) == 3.0
    assert accepted.accepted(REPO, 2)["version"] == "2.1.0"


# ---- the record itself -----------------------------------------------------------------------------
def check(version: str, key: str = "k" * 16) -> SignatureCheck:
    return SignatureCheck("signed", True, key, int(version.split(".")[0]), version, "2025-01-01T00:00:00Z")


def test_record_keeps_the_highest_and_pins_do_not_lower_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path))
    assert accepted.accept(REPO, check("1.2.0"), ref="v1", commit="a" * 40, pinned=False) is None
    accepted.accept(REPO, check("1.0.0"), ref="v1.0.0", commit="b" * 40, pinned=True)
    with pytest.raises(KernelSignatureError, match="rollback"):
        accepted.accept(REPO, check("1.1.9"), ref="v1", commit="c" * 40, pinned=False)
    accepted.accept(REPO, check("1.10.0"), ref="v1", commit="d" * 40, pinned=False)  # numeric, not text, order
    assert accepted.accepted(REPO, 1)["version"] == "1.10.0" and accepted.accepted(REPO, 2) is None


def test_an_unreadable_record_is_an_error_not_a_reset(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path))
    path = accepted.state_path(REPO)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(ValueError, match=f"{path.name}.*delete it"):
        accepted.accept(REPO, check("1.0.0"), ref="v1", commit="a" * 40, pinned=False)


def test_concurrent_processes_never_lose_an_update(tmp_path):
    """Eight processes record versions of one repo at once: the record ends at the highest of them all."""
    script = textwrap.dedent(f"""
        import sys
        from nkihub.kernels import accepted
        from nkihub.kernels.signing import SignatureCheck
        worker = int(sys.argv[1])
        for i in range(25):
            v = f"3.{{i}}.{{worker}}"
            accepted.accept({REPO!r}, SignatureCheck("s", True, "k" * 16, 3, v, None), ref=v, commit="a" * 40,
                            pinned=True)
    """)
    env = dict(os.environ, KERNELS_CACHE=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(w)], env=env, stderr=subprocess.PIPE, text=True)
             for w in range(8)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    path = tmp_path / ".nkihub-accepted" / "kernel--neuron--toy-kernel.json"
    record = json.loads(path.read_text())
    assert record["majors"]["3"]["version"] == "3.24.7"
