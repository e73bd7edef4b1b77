"""kernels.get and the Hugging Face kernels names against the local Hub."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import textwrap
import types

import pytest
import torch
from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.errors import RepositoryNotFoundError

from nkihub import kernels
from nkihub.hub_client import RemoteFileCorruptError
from nkihub.kernels.loading import KernelDigestError, verify_variant
from nkihub.kernels.publish import publish
from nkihub.kernels.trust import UntrustedKernelError
from nkihub.kernels.variants import NoCompatibleVariantError, select_variant

REPO = "neuron/toy-kernel"


def test_get_newest_version_says_so(kernels_env, make_kernel, caplog):
    publish(make_kernel("1.0.0", 2.0), REPO)
    publish(make_kernel("2.0.0", 3.0), REPO)
    with caplog.at_level(logging.WARNING, logger="kernels"):
        mod = kernels.get(REPO)
    assert "no version given, using v2" in caplog.text
    assert torch.equal(mod.scale(torch.ones(3)), torch.full((3,), 3.0))
    info = mod.__kernel_info__
    assert info.variant == "torch-cpu" and info.revision == "v2" and len(info.commit) == 40
    assert [d.variant for d in info.selection.rejected] == ["torch-neuron"]
    assert "backend (neuron) does not match system backend (cpu)" in str(info)  # Hugging Face kernels' rule


def test_two_versions_load_side_by_side(kernels_env, make_kernel):
    publish(make_kernel("1.0.0", 2.0), REPO)
    publish(make_kernel("2.0.0", 5.0), REPO)
    v1 = kernels.get_kernel(REPO, version=1)
    v2 = kernels.get_kernel(REPO, version=2)
    assert v1 is not v2 and v1.__name__ != v2.__name__
    x = torch.ones(2)
    assert v1.scale(x).tolist() == [2.0, 2.0] and v2.scale(x).tolist() == [5.0, 5.0]
    assert kernels.get_kernel(REPO, version=1) is v1  # loaded once per commit and variant
    tag = kernels.get_kernel(REPO, revision="v2.0.0")
    assert tag.scale(x).tolist() == [5.0, 5.0]


def test_get_kernel_requires_version_or_revision(kernels_env, make_kernel):
    publish(make_kernel(), REPO)
    with pytest.raises(ValueError, match="version or revision must be specified"):
        kernels.get_kernel(REPO)
    with pytest.raises(ValueError, match="Only one"):
        kernels.get_kernel(REPO, version=1, revision="main")
    with pytest.raises(ValueError, match="Version 7 .* available versions: 1"):
        kernels.get_kernel(REPO, version=7)


def test_unknown_repo_raises_hf_error(kernels_env):
    with pytest.raises(RepositoryNotFoundError):
        kernels.get("neuron/does-not-exist")


def test_untrusted_publisher(kernels_env, make_kernel, monkeypatch):
    publish(make_kernel(), "someone/toy-kernel")
    with pytest.raises(UntrustedKernelError, match="not from a trusted publisher"):
        kernels.get("someone/toy-kernel", version=1)
    assert kernels.get("someone/toy-kernel", version=1, trust_remote_code=True).scale(torch.ones(1)).item() == 2.0
    assert kernels.get("someone/toy-kernel", version=1, trust_remote_code=["someone/toy-kernel"])
    monkeypatch.setenv("KERNELS_TRUSTED_PUBLISHERS", "someone,neuron")
    assert kernels.get("someone/toy-kernel", version=1)


def test_no_compatible_variant_explains_each_rejection(kernels_env):
    api = HfApi(endpoint=kernels_env.url, token=False)
    api.create_repo("neuron/cuda-only", repo_type="kernel")
    api.create_commit("neuron/cuda-only", [
        CommitOperationAdd(path_in_repo="build/torch28-cxx11-cu128-x86_64-linux/cuda_only/__init__.py", path_or_fileobj=b""),
        CommitOperationAdd(path_in_repo="build/torch-rocm/cuda_only/__init__.py", path_or_fileobj=b""),
    ], commit_message="gpu builds", repo_type="kernel")
    api.create_branch("neuron/cuda-only", branch="v1", repo_type="kernel")
    with pytest.raises(NoCompatibleVariantError) as e:
        kernels.get("neuron/cuda-only", version=1)
    msg = str(e.value)
    assert "torch28-cxx11-cu128-x86_64-linux" in msg and "Torch version (2.8) does not match" in msg
    assert "torch-rocm" in msg and "backend (rocm) does not match system backend (cpu)" in msg
    assert isinstance(e.value, FileNotFoundError)
    assert not kernels.has_kernel("neuron/cuda-only", version=1)


def test_variant_order_follows_hugging_face_kernels(monkeypatch):
    """Their rules: torch-neuron where torch.neuron exists (what torch_neuronx creates; a stand-in module here),
    torch-cpu elsewhere or when asked for, torch-universal anywhere; a compiled build that matches this
    machine is still refused by nkihub, which imports only pure-Python packages from verified bytes."""
    import torch

    monkeypatch.setattr(torch, "neuron", types.ModuleType("torch.neuron"), raising=False)
    assert select_variant(["torch-cpu", "torch-neuron"]).chosen == "torch-neuron"
    assert select_variant(["torch-cpu", "torch-neuron"], backend="cpu").chosen == "torch-cpu"
    monkeypatch.delattr(torch, "neuron")
    sel = select_variant(["torch-cpu", "torch-neuron", "torch-universal"])
    assert [d.variant for d in sel.decisions if d.accepted] == ["torch-cpu", "torch-universal"]
    assert select_variant(["torch-neuron"]).chosen is None
    assert "Invalid backend 'neuron'" in select_variant(["torch-neuron"], backend="neuron").table()
    major, minor = torch.__version__.split(".")[:2]
    native = f"torch{major}{minor}-cxx11-cpu-x86_64-linux"
    assert "nkihub loads only pure-Python variants" in select_variant([native]).table()


def test_has_kernel(kernels_env, make_kernel):
    publish(make_kernel(), REPO)
    assert kernels.has_kernel(REPO, version=1)
    assert not kernels.has_kernel(REPO, version=1, backend="neuron")


def test_tampered_server_blob_is_refused_naming_the_file(kernels_env, make_kernel):
    publish(make_kernel(), REPO)
    ops = (make_kernel() / "ops.py").read_bytes()
    blob = kernels_env.storage.blob_path(hashlib.sha256(ops).hexdigest())
    blob.write_bytes(ops.replace(b"x * factor", b"x / factor"))
    with pytest.raises(RemoteFileCorruptError) as e:  # the Hub itself refuses to serve it, naming it
        kernels.get(REPO, version=1)
    assert "toy_kernel/ops.py" in str(e.value).splitlines()[0] and "corrupt" in str(e.value)


def test_metadata_digest_mismatch_is_refused(kernels_env, make_kernel):
    """A commit that changes a file without updating metadata.json fails the per-file sha256 check."""
    publish(make_kernel(), REPO)
    api = HfApi(endpoint=kernels_env.url, token=False)
    api.upload_file(path_or_fileobj=b"import os\n", path_in_repo="build/torch-cpu/toy_kernel/ops.py",
                    repo_id=REPO, repo_type="kernel", revision="main", commit_message="sneaky")
    with pytest.raises(KernelDigestError, match="toy_kernel/ops.py"):
        kernels.get(REPO, revision="main")


def test_offline_loads_from_cache(kernels_env, make_kernel, monkeypatch):
    publish(make_kernel(), REPO)
    online = kernels.get(REPO, version=1)
    kernels_env.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = kernels.get(REPO, version=1)
    assert offline is online  # same commit and variant: the same module
    path = kernels.install_kernel(REPO, version=1, local_files_only=True)
    assert (path / "toy_kernel" / "ops.py").is_file()
    with pytest.raises(ValueError, match="not found in the local cache"):
        kernels.get(REPO, version=2)


def test_kernels_cache_moves_the_cache(kernels_env, make_kernel, tmp_path, monkeypatch):
    publish(make_kernel(), REPO)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "elsewhere"))
    path = kernels.install_kernel(REPO, version=1)
    assert str(path).startswith(str(tmp_path / "elsewhere"))


def test_local_kernels_override(kernels_env, make_kernel, tmp_path, monkeypatch):
    from nkihub.kernels.publish import build_repo

    out = tmp_path / "local-repo"
    build_repo(make_kernel("1.0.0", 7.0), out, REPO)
    monkeypatch.setenv("LOCAL_KERNELS", f"{REPO}={out}")
    mod = kernels.get(REPO)  # never asks the Hub: the repo does not even exist there
    assert mod.scale(torch.ones(1)).item() == 7.0
    assert mod.__kernel_info__.trust == "local path"


def test_get_local_kernel_on_a_snapshot(kernels_env, make_kernel):
    publish(make_kernel("1.0.0", 4.0), REPO)
    path = kernels.install_kernel(REPO, version=1)
    repo_root = path.parent.parent
    mod = kernels.get_local_kernel(repo_root)
    assert mod.scale(torch.ones(1)).item() == 4.0
    assert verify_variant(path) == []


def test_concurrent_loads_in_processes(kernels_env, make_kernel, tmp_path):
    publish(make_kernel("1.0.0", 6.0), REPO)
    script = textwrap.dedent(f"""
        import torch; from nkihub import kernels
        m = kernels.get({REPO!r}, version=1)
        print(m.scale(torch.ones(1)).item())
    """)
    env = {**__import__("os").environ}
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=600) for p in procs]  # a bound for a loaded machine
    assert [p.returncode for p in procs] == [0, 0, 0], [r[1][-500:] for r in results]
    assert [r[0].strip() for r in results] == ["6.0"] * 3
    snaps = list((tmp_path / "kernels-cache" / "kernels--neuron--toy-kernel" / "snapshots").iterdir())
    assert len(snaps) == 1 and verify_variant(snaps[0] / "build" / "torch-cpu") == []


def test_import_does_not_load_heavy_packages():
    code = ("import sys; from nkihub import kernels; "
            "print(sorted(m for m in ('torch','nki','nkihub.nki','nkihub.simulator','huggingface_hub') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == []
