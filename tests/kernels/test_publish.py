"""nkihub.kernels.publish: the Hugging Face kernel-repo layout, one commit, tags, no-op republish."""

from __future__ import annotations

import json
import threading

import pytest
from huggingface_hub import HfApi

from nkihub.hub_client import PublishConflictError
from nkihub.kernels.publish import PublishError, build_repo, publish, read_kernel_spec

REPO = "neuron/toy-kernel"


def api(hub):
    return HfApi(endpoint=hub.url, token=False)


def test_layout_metadata_and_card(kernels_env, make_kernel, tmp_path):
    hub = kernels_env
    result = publish(make_kernel("1.0.0"), REPO)
    assert result.created and result.branch == "v1" and result.tag == "v1.0.0"
    files = {f.path for f in api(hub).list_repo_tree(REPO, repo_type="kernel", recursive=True)
             if type(f).__name__ == "RepoFile"}
    for variant in ("torch-neuron", "torch-cpu"):
        assert {f"build/{variant}/metadata.json", f"build/{variant}/toy_kernel/__init__.py",
                f"build/{variant}/toy_kernel/ops.py", f"build/{variant}/toy_kernel/kernel.json"} <= files
    refs = api(hub).list_repo_refs(REPO, repo_type="kernel")
    assert {b.name: b.target_commit for b in refs.branches} == {"main": result.commit, "v1": result.commit}
    assert {t.name: t.target_commit for t in refs.tags} == {"v1.0.0": result.commit}
    meta_path = api(hub).hf_hub_download(REPO, "build/torch-cpu/metadata.json", repo_type="kernel",
                                         cache_dir=tmp_path / "c")
    meta = json.loads(open(meta_path).read())
    assert meta["name"] == "toy-kernel" and meta["version"] == 1 and meta["backend"] == {"type": "cpu"}
    assert set(meta["digest"]["files"]) == {"toy_kernel/__init__.py", "toy_kernel/ops.py", "toy_kernel/kernel.json"}
    assert meta["digest"]["algorithm"] == "sha256"
    card = open(api(hub).hf_hub_download(REPO, "README.md", repo_type="kernel", cache_dir=tmp_path / "c")).read()
    assert 'kernels.get("neuron/toy-kernel", version=1)' in card
    assert "bfloat16, float32" in card and "| (128, 512) | float32 | 1.5 |" in card
    assert [c.title for c in api(hub).list_repo_commits(REPO, repo_type="kernel")] == [
        "Publish toy-kernel 1.0.0", "initial commit"]


def test_unchanged_content_makes_no_commit(kernels_env, make_kernel):
    pkg = make_kernel("1.0.0")
    first = publish(pkg, REPO)
    second = publish(pkg, REPO)
    assert not second.created and second.commit == first.commit
    assert len(api(kernels_env).list_repo_commits(REPO, repo_type="kernel")) == 2


def test_same_version_with_other_content_is_refused(kernels_env, make_kernel):
    publish(make_kernel("1.0.0", factor=2.0), REPO)
    with pytest.raises(PublishConflictError, match="bump the version"):
        publish(make_kernel("1.0.0", factor=3.0), REPO)


def test_major_versions_get_their_branches(kernels_env, make_kernel):
    hub = kernels_env
    v1 = publish(make_kernel("1.0.0", 2.0), REPO)
    v2 = publish(make_kernel("2.0.0", 3.0), REPO)
    v11 = publish(make_kernel("1.1.0", 4.0), REPO)  # a fix for the old major lands on v1 only
    branches = {b.name: b.target_commit for b in api(hub).list_repo_refs(REPO, repo_type="kernel").branches}
    assert branches == {"main": v2.commit, "v2": v2.commit, "v1": v11.commit}
    assert hub.storage.read_commit("kernel", REPO, v11.commit).parents == (v1.commit,)
    tags = {t.name: t.target_commit for t in api(hub).list_repo_refs(REPO, repo_type="kernel").tags}
    assert tags == {"v1.0.0": v1.commit, "v2.0.0": v2.commit, "v1.1.0": v11.commit}


def test_concurrent_publishers_one_wins_none_corrupts(kernels_env, make_kernel, tmp_path):
    from nkihub.hub_client.client import download_snapshot
    from nkihub.kernels.loading import verify_variant

    packages = [make_kernel(f"1.0.{i}", factor=float(i + 2)) for i in range(4)]
    outcomes = []

    def run(pkg):
        try:
            outcomes.append(publish(pkg, REPO))
        except (PublishConflictError, PublishError) as e:  # lost the race, cleanly
            outcomes.append(e)
        except Exception as e:  # pragma: no cover - any other failure is a bug
            outcomes.append(e)

    threads = [threading.Thread(target=run, args=(p,)) for p in packages]
    [t.start() for t in threads]
    [t.join() for t in threads]
    winners = [o for o in outcomes if not isinstance(o, Exception)]
    assert winners, outcomes
    assert all(isinstance(o, (PublishConflictError, PublishError)) or o in winners for o in outcomes), outcomes
    # whatever won, the branch holds one consistent build: every file matches its metadata digest
    snap = download_snapshot(REPO, revision="v1", cache_dir=tmp_path / "verify", endpoint=kernels_env.url, token=False)
    for variant in ("torch-cpu", "torch-neuron"):
        assert verify_variant(snap / "build" / variant) == []
    version = json.loads((snap / "build/torch-cpu/toy_kernel/kernel.json").read_text())["version"]
    assert version in {w.version for w in winners}


@pytest.mark.parametrize("edit,match", [
    (lambda s: s.pop("version"), "lacks 'version'"),
    (lambda s: s.update(name="Toy_Kernel"), "must match"),
    (lambda s: s.update(package="other"), "must be the kernel name"),
    (lambda s: s.update(version="1.0"), "MAJOR.MINOR.PATCH"),
])
def test_bad_kernel_json_is_refused(make_kernel, edit, match):
    pkg = make_kernel()
    spec = json.loads((pkg / "kernel.json").read_text())
    edit(spec)
    (pkg / "kernel.json").write_text(json.dumps(spec))
    with pytest.raises(PublishError, match=match):
        read_kernel_spec(pkg)


def test_build_repo_skips_bytecode(make_kernel, tmp_path):
    pkg = make_kernel()
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"junk")
    build_repo(pkg, tmp_path / "out", REPO)
    assert not list((tmp_path / "out").rglob("*.pyc"))
    assert (tmp_path / "out" / "README.md").is_file()


def test_a_package_without_layers_publishes_with_a_note(kernels_env, make_kernel, capsys):
    """A layers module is optional (as in Hugging Face kernels: get_kernel loads the repo, kernelize cannot
    use it): the toy package has none, so publishing says so; with one, no note."""
    from nkihub.cli import main

    pkg = make_kernel("1.0.0")
    assert not (pkg / "layers.py").exists()
    res = publish(pkg, "neuron/toy-kernel")
    assert len(res.notes) == 1 and "no layers module" in res.notes[0] and "kernelize" in res.notes[0]
    assert str(res).splitlines()[1].startswith("note: toy_kernel has no layers module")
    with_layers = make_kernel("1.0.1")
    (with_layers / "layers.py").write_text("import torch\n\n\nclass Scale(torch.nn.Module):\n"
                                           "    def forward(self, x):\n        return x\n")
    assert main(["publish", str(with_layers), "--repo-id", "neuron/toy-kernel"]) == 0
    out = capsys.readouterr().out
    assert "published" in out and "note:" not in out
