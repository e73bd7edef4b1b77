"""The Neuron path as Hugging Face kernels 0.19 sees it. Published repos carry ``build/torch-neuron/`` (noarch,
``python-depends`` naming ``nki``) beside ``build/torch-cpu/``. Where ``torch.neuron`` exists (what
``torch_neuronx`` creates; a stand-in module here) their ``get_kernel`` and nkihub's ``kernels.get`` both choose
``torch-neuron``, elsewhere ``torch-cpu``; ``kernelize(model, device="neuron")`` swaps layers for the
torch-neuron build, whose kernels run through ``nki`` (the simulator on this machine, on CPU tensors)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
import torch
from huggingface_hub import HfApi

from nkihub import kernels
from nkihub.kernels import device
from nkihub.kernels.layers import LayerRepository, Mode, kernelize, use_kernel_mapping
from nkihub.kernels.publish import publish
from nkihub.kernels.torch_ops import count_calls

REPO = "neuron/vit-attn"
STAND_IN = "import torch, types; torch.neuron = types.ModuleType('torch.neuron')\n"


@pytest.fixture
def vit_attn_repo(kernels_env):
    from nkihub.kernels.library import LIBRARY

    import importlib

    publish(os.path.dirname(importlib.import_module(LIBRARY[REPO]).__file__), REPO)
    return kernels_env


@pytest.fixture
def torch_neuron(monkeypatch):
    """A stand-in ``torch.neuron`` module, as torch_neuronx creates it; the device probe sees it."""
    monkeypatch.setattr(torch, "neuron", types.ModuleType("torch.neuron"), raising=False)
    device.neuron_status(refresh=True)
    yield
    monkeypatch.delattr(torch, "neuron")
    device.neuron_status(refresh=True)


def test_published_repo_carries_a_neuron_build_hugging_face_reads(vit_attn_repo):
    api = HfApi(endpoint=vit_attn_repo.url, token=False)
    files = api.list_repo_files(REPO, repo_type="kernel", revision="v1")
    assert any(f.startswith("build/torch-neuron/vit_attn/") for f in files)
    assert any(f.startswith("build/torch-cpu/vit_attn/") for f in files)
    path = api.hf_hub_download(REPO, "build/torch-neuron/metadata.json", repo_type="kernel", revision="v1")
    assert json.loads(open(path).read())["python-depends"] == ["nki"]
    from kernels import Metadata

    parsed = Metadata.read_from_file(path)  # Hugging Face's own parser reads it
    assert parsed.version == 1 and list(parsed.python_depends) == ["nki"]


@pytest.mark.parametrize("stand_in, variant", [(True, "torch-neuron"), (False, "torch-cpu")])
def test_their_get_kernel_and_ours_choose_the_same_build(vit_attn_repo, tmp_path, stand_in, variant):
    code = (STAND_IN if stand_in else "") + f"""
import torch, kernels
from pathlib import Path
from nkihub import kernels as nkihub_kernels
theirs = kernels.get_kernel({REPO!r}, version=1)
ours = nkihub_kernels.get({REPO!r}, version=1)
q, k, v = torch.randn(3, 1, 2, 9, 16, generator=torch.Generator().manual_seed(0))
want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
for name, m in (("theirs", theirs), ("ours", ours)):
    err = float((m.vit_attention(q, k, v) - want).abs().max())
    print(name, Path(m.__file__).parent.parent.name, err)
print("ours-info", ours.__kernel_info__.variant)
"""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict((ln.split(" ", 1)[0], ln.split()[1:]) for ln in out.stdout.splitlines())
    assert lines["theirs"][0] == variant and lines["ours"][0] == variant and lines["ours-info"] == [variant]
    assert float(lines["theirs"][1]) < 1e-5 and float(lines["ours"][1]) < 1e-5


def test_kernelize_for_neuron_runs_the_neuron_build_through_nki(vit_attn_repo, torch_neuron):
    import transformers

    torch.manual_seed(0)
    cfg = transformers.ViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128,
                                 image_size=16, patch_size=8, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)
    model = transformers.ViTModel(cfg).eval()
    pixels = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        want = model(pixels).last_hidden_state
    repo = LayerRepository(REPO, layer_name="ViTAttention", version=1)
    with use_kernel_mapping({"ViTAttention": {"neuron": {Mode.INFERENCE: repo}}}, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device="neuron")
    report = model.kernelize_report
    assert report.device == "neuron" and [d.kernel for d in report.replaced] == [str(repo)]
    assert kernels.get(REPO, version=1).__kernel_info__.variant == "torch-neuron"
    with torch.no_grad(), count_calls() as calls:
        got = model(pixels).last_hidden_state
    assert sum(calls.values()) >= 1  # the kernel ran (on the simulator: the tensors are on the CPU)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
