"""Attacks on publishing: leaking symlinks, special files, bad versions and names, racing publishers.

Publishing is all-or-nothing: a refused package leaves the Hub exactly as it was (no repo, commit,
branch or tag), and a version, once tagged, names one content forever.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from nkihub.hub_client import PublishConflictError
from nkihub.hub_client.signing import parse_version
from nkihub.kernels.publish import PublishError, publish

REPO = "neuron/toy-kernel"


def api(hub):
    return HfApi(endpoint=hub.url, token=False)


def hub_state(hub) -> dict:
    """Everything publishing can change: which repos exist, their refs and their commits."""
    root = hub.storage.root / "repos"
    state = {}
    for refs in sorted(root.rglob("refs.json")):
        repo = refs.parent
        state[str(repo.relative_to(root))] = (json.loads(refs.read_text()),
                                              sorted(p.name for p in (repo / "commits").iterdir()))
    return state


def test_symlink_leaving_the_package_is_refused_before_anything_is_created(kernels_env, make_kernel, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET_ACCESS_KEY=do-not-leak\n")
    pkg = make_kernel()
    os.symlink(secret, pkg / "notes.txt")
    with pytest.raises(PublishError, match=r"notes\.txt.*(outside|leaves)"):
        publish(pkg, REPO)
    assert hub_state(kernels_env) == {}
    os.unlink(pkg / "notes.txt")
    os.symlink("../../" + "x" * 3, pkg / "dangling.py")
    with pytest.raises(PublishError, match="dangling.py"):
        publish(pkg, REPO)
    assert hub_state(kernels_env) == {}


def test_symlinked_directory_leaving_the_package_is_refused(kernels_env, make_kernel, tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "id_rsa").write_text("PRIVATE KEY\n")
    pkg = make_kernel()
    os.symlink(tmp_path / "outside", pkg / "data")
    with pytest.raises(PublishError, match="data"):
        publish(pkg, REPO)
    assert hub_state(kernels_env) == {}


def test_symlink_inside_the_package_publishes_its_content(kernels_env, make_kernel, tmp_path):
    pkg = make_kernel()
    os.symlink("ops.py", pkg / "ops_alias.py")
    result = publish(pkg, REPO)
    files = {f.path for f in api(kernels_env).list_repo_tree(REPO, repo_type="kernel", recursive=True,
                                                            revision=result.commit)}
    assert "build/torch-cpu/toy_kernel/ops_alias.py" in files


def test_special_file_is_refused(kernels_env, make_kernel):
    pkg = make_kernel()
    os.mkfifo(pkg / "pipe")
    with pytest.raises(PublishError, match="pipe.*(special|FIFO|regular)"):
        publish(pkg, REPO)
    assert hub_state(kernels_env) == {}


@pytest.mark.parametrize("version", ["1.0.1..2", "1.0", "01.0.0", "1.0.0-", "1.0.0.0", "v1.0.0", "1.0.0 ", "1.0.0\n"])
def test_bad_version_leaves_the_hub_as_it_was(kernels_env, make_kernel, version):
    publish(make_kernel("1.0.0"), REPO)
    before = hub_state(kernels_env)
    with pytest.raises(PublishError, match="version"):
        publish(make_kernel(version), REPO)
    assert hub_state(kernels_env) == before


@pytest.mark.parametrize("name", ["bad\\name.py", "tab\there.py", "rtl\u202eyp.exe", "zero\u200bwidth.py"])
def test_bad_file_name_in_a_new_repo_creates_nothing(kernels_env, make_kernel, name):
    pkg = make_kernel()
    (pkg / name).write_text("x = 1\n")
    with pytest.raises(PublishError, match="name"):
        publish(pkg, REPO)
    assert hub_state(kernels_env) == {}


def test_tag_on_another_commit_is_a_conflict_not_hidden(kernels_env, make_kernel):
    first = publish(make_kernel("1.0.0"), REPO)
    api(kernels_env).create_tag(REPO, tag="v1.0.1", revision=first.commit, repo_type="kernel")
    before = hub_state(kernels_env)
    with pytest.raises(PublishConflictError, match="v1.0.1"):
        publish(make_kernel("1.0.1", factor=3.0), REPO)
    assert hub_state(kernels_env) == before


def test_same_version_other_content_is_a_conflict(kernels_env, make_kernel):
    publish(make_kernel("1.0.0", factor=2.0), REPO)
    before = hub_state(kernels_env)
    with pytest.raises(PublishConflictError, match="bump the version"):
        publish(make_kernel("1.0.0", factor=3.0), REPO)
    assert hub_state(kernels_env) == before


def test_tag_refused_by_the_hub_rolls_back_the_commit_and_branches(kernels_env, make_kernel, monkeypatch):
    """A tag created by someone else between our check and our tag: our commit and branch moves are undone."""
    from huggingface_hub import HfApi as RealApi

    first = publish(make_kernel("1.0.0"), REPO)
    before_branches = {b.name: b.target_commit for b in api(kernels_env).list_repo_refs(REPO, repo_type="kernel").branches}
    real_create_tag = RealApi.create_tag

    def sneaky(self, repo_id, *, tag, revision=None, **kw):
        if tag == "v1.0.1":  # someone tags the version by hand, bypassing the publish claim, just before us
            real_create_tag(self, repo_id, tag=tag, revision=first.commit, **kw)
        return real_create_tag(self, repo_id, tag=tag, revision=revision, **kw)

    monkeypatch.setattr(RealApi, "create_tag", sneaky)
    with pytest.raises(PublishConflictError, match="v1.0.1"):
        publish(make_kernel("1.0.1", factor=3.0), REPO)
    refs = api(kernels_env).list_repo_refs(REPO, repo_type="kernel")
    branches = {b.name: b.target_commit for b in refs.branches}
    main_files = kernels_env.storage.resolve("kernel", REPO, branches["main"]).files
    assert main_files == kernels_env.storage.resolve("kernel", REPO, before_branches["main"]).files
    assert branches["v1"] == before_branches["v1"]
    assert [t.name for t in refs.tags] == ["v1.0.0", "v1.0.1"]  # the claim is gone; v1.0.1 is the hand-made tag


RACER = textwrap.dedent("""
    import sys, time, pathlib
    from nkihub.hub_client import PublishConflictError
    from nkihub.kernels.publish import PublishError, publish
    go = pathlib.Path(sys.argv[2])
    go.with_name(f"ready-{{sys.argv[3]}}").write_text("ready")
    while not go.exists():
        time.sleep(0.005)
    try:
        r = publish(sys.argv[1], {repo!r})
        print("WON", r.tag, r.commit)
    except PublishConflictError as e:
        print("LOST", str(e).splitlines()[0])
        sys.exit(3)
    except PublishError as e:  # a newer version of the major landed first: this one would move vN back
        print("OLDER", str(e).splitlines()[0])
        sys.exit(4)
""")


def race(packages: list[Path], go: Path) -> list[subprocess.CompletedProcess]:
    script = RACER.format(repo=REPO)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(p), str(go), str(i)], env=dict(os.environ),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, p in enumerate(packages)]
    deadline = time.monotonic() + 120
    while len(list(go.parent.glob("ready-*"))) < len(procs) and time.monotonic() < deadline:
        time.sleep(0.02)  # every racer has imported everything and waits at the line
    go.write_text("go")
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=180)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def check_every_tag_names_its_own_content(hub):
    refs = api(hub).list_repo_refs(REPO, repo_type="kernel")
    for t in refs.tags:
        c = hub.storage.resolve("kernel", REPO, t.target_commit)
        blob = hub.storage.blob_path(c.files["build/torch-cpu/toy_kernel/kernel.json"].sha256)
        assert "v" + json.loads(blob.read_text())["version"] == t.name
    return refs


def test_racing_publishers_of_one_version_exactly_one_wins(kernels_env, make_kernel, tmp_path):
    publish(make_kernel("1.0.0"), REPO)
    packages = [make_kernel("1.0.1", factor=float(10 + i)) for i in range(4)]
    results = race(packages, tmp_path / "go")
    won = [r for r in results if r.returncode == 0]
    lost = [r for r in results if r.returncode == 3]
    assert len(won) == 1 and len(lost) == 3, [(r.returncode, r.stdout, r.stderr[-500:]) for r in results]
    _, tag, commit = won[0].stdout.split()
    refs = check_every_tag_names_its_own_content(kernels_env)
    assert {t.name: t.target_commit for t in refs.tags}["v1.0.1"] == commit
    branches = {b.name: b.target_commit for b in refs.branches}
    assert branches["main"] == branches["v1"] == commit
    history = [c.commit_id for c in api(kernels_env).list_repo_commits(REPO, repo_type="kernel")]
    assert len(history) == 3  # initial, 1.0.0, the winner: losers wrote nothing


def test_racing_publishers_of_different_versions_stay_consistent(kernels_env, make_kernel, tmp_path):
    publish(make_kernel("1.0.0"), REPO)
    packages = [make_kernel(f"1.0.{i + 1}", factor=float(10 + i)) for i in range(4)]
    results = race(packages, tmp_path / "go")
    assert all(r.returncode in (0, 3, 4) for r in results), [r.stderr[-800:] for r in results]
    won = {r.stdout.split()[1]: r.stdout.split()[2] for r in results if r.returncode == 0}
    assert won
    for r in results:  # a racer refused as older lost to a newer winner, and names it
        if r.returncode == 4:
            words = r.stdout.split()
            released, mine = words[words.index("released") + 1], words[words.index("would") - 1]
            assert "v" + released in won and parse_version(released) > parse_version(mine.rstrip(";")), r.stdout
    refs = check_every_tag_names_its_own_content(kernels_env)
    tags = {t.name: t.target_commit for t in refs.tags}
    assert tags == {"v1.0.0": tags["v1.0.0"], **won}  # losers left no tag
    branches = {b.name: b.target_commit for b in refs.branches}
    assert branches["main"] == branches["v1"] and branches["main"] in won.values()
    history = [c.commit_id for c in api(kernels_env).list_repo_commits(REPO, repo_type="kernel")]
    assert len(history) == 2 + len(won)
