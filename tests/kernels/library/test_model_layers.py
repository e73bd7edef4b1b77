"""Every library kernel's ``layers`` module follows Hugging Face kernels' rules for a kernelize layer (an
nn.Module with a forward whose signature matches the replaced class, no __init__, no members but the two
flags), and nkihub's LayerRepository names take the arguments of theirs."""
from __future__ import annotations

import importlib
import inspect

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from nkihub.kernels.layers import LayerRepository, LocalLayerRepository, Mode, kernelize, use_kernel_mapping  # noqa: E402
from nkihub.kernels.library import LIBRARY  # noqa: E402
from nkihub.kernels.torch_ops import count_calls  # noqa: E402

vit = importlib.import_module("transformers.models.vit.modeling_vit")
REPLACES = {"ViTAttention": vit.ViTAttention, "ViTMLP": vit.ViTMLP, "ViTLayer": vit.ViTLayer,
            "LayerNorm": nn.LayerNorm, "RMSNorm": nn.RMSNorm, "Softmax": nn.Softmax, "Linear": nn.Linear}


@pytest.mark.parametrize("repo", sorted(LIBRARY))
def test_layers_follow_hugging_face_rules(repo):
    kernel = importlib.import_module(LIBRARY[repo])
    names = kernel.layers.__all__
    assert names
    for name in names:
        layer = getattr(kernel.layers, name)
        assert issubclass(layer, nn.Module) and layer.__init__ is nn.Module.__init__
        extra = {n for n, _ in inspect.getmembers(layer)} - {n for n, _ in inspect.getmembers(nn.Module)}
        assert extra <= {"can_torch_compile", "has_backward"}, extra
        ours = [p.kind for p in inspect.signature(layer.forward).parameters.values()]
        theirs = [p.kind for p in inspect.signature(REPLACES[name].forward).parameters.values()]
        assert ours == theirs


def test_matmul_rmsnorm_softmax_layers_compute_like_the_modules_they_replace():
    x = torch.randn(3, 5, 64)
    for repo, module in (("neuron/matmul", nn.Linear(64, 32)), ("neuron/rmsnorm", nn.RMSNorm(64, eps=1e-6)),
                         ("neuron/softmax", nn.Softmax(dim=-1))):
        kernel = importlib.import_module(LIBRARY[repo])
        layer = getattr(kernel.layers, kernel.layers.__all__[0])
        with torch.no_grad(), count_calls() as calls:
            got = layer.forward(module, x)
            want = module(x)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        assert sum(calls.values()) >= 1, repo


def test_rmsnorm_layer_replaces_transformers_llama_rmsnorm():
    """Hugging Face kernels' kernelize swaps LlamaRMSNorm's forward (transformers marks the class "RMSNorm")
    for neuron/rmsnorm's ``layers.RMSNorm.forward``: same signature, read from the module's ``weight`` and
    ``variance_epsilon`` (a large eps, so the layer's own default would show), same output, one kernel call."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    layer = importlib.import_module(LIBRARY["neuron/rmsnorm"]).layers.RMSNorm
    assert LlamaRMSNorm.kernel_layer_name == layer.__name__ == "RMSNorm"
    assert (list(inspect.signature(layer.forward).parameters)
            == list(inspect.signature(LlamaRMSNorm.forward).parameters))
    torch.manual_seed(0)
    norm = LlamaRMSNorm(64, eps=0.5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(64))
    x = torch.randn(2, 7, 64)
    with torch.no_grad(), count_calls() as calls:
        got = layer.forward(norm, x)
        want = norm(x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert sum(calls.values()) == 1


def test_layer_repository_takes_hugging_face_arguments(kernels_env, tmp_path):
    """A mapping written for Hugging Face kernels (LayerRepository with version and trust_remote_code, a
    "cuda" entry) kernelizes a ViTMLP with neuron/gelu-mlp fetched from the Hub, unchanged."""
    from nkihub import kernels
    from huggingface_hub import snapshot_download

    kernels.publish_kernel(importlib.import_module(LIBRARY["neuron/gelu-mlp"]).__file__.rsplit("/", 1)[0],
                           "neuron/gelu-mlp", endpoint=kernels_env.url)
    torch.manual_seed(0)
    mlp = vit.ViTMLP(transformers.ViTConfig(hidden_size=64, intermediate_size=128)).eval()
    x = torch.randn(1, 5, 64)
    with torch.no_grad():
        want = mlp(x)
    repo = LayerRepository("neuron/gelu-mlp", layer_name="ViTMLP", version=1, trust_remote_code=True)
    mapping = {"ViTMLP": {"cuda": LayerRepository("kernels-community/other", layer_name="X", version=1),
                          "cpu": {Mode.INFERENCE: repo}}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(mlp, mode=Mode.INFERENCE, device="cpu")
    # transformers 5.25 marks the GELU inside (GeLU): the replaced MLP's kernel does its work
    decisions = mlp.kernelize_report.decisions
    assert decisions[0].status == "replaced" and all(d.status == "covered" for d in decisions[1:])
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), want, atol=1e-4, rtol=1e-4)
    snap = snapshot_download("neuron/gelu-mlp", repo_type="kernel", revision="v1", endpoint=kernels_env.url,
                             local_dir=tmp_path / "snap")
    local = LocalLayerRepository(snap, layer_name="ViTMLP")  # no package_name, as theirs
    assert local.load_kernel().layers.ViTMLP.__name__ == "ViTMLP"
    assert issubclass(local.load(), torch.nn.Module)  # load() gives the layer class, as theirs does


def test_a_layer_condition_keeps_the_modules_it_rejects():
    """use_kernel_forward_from_hub(name, condition=...) as in Hugging Face kernels: modules for which the
    condition is false keep their own forward, and the report says why."""
    from nkihub.kernels.layers import use_kernel_forward_from_hub

    @use_kernel_forward_from_hub("Scale", condition=lambda module: module.factor == 2)
    class Scale(nn.Module):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def forward(self, x):
            return x * self.factor

    class Repo:  # Hugging Face kernels' repository protocol: load() returns the layer class
        layer_name = "Scale"

        def load(self):
            return type("Scale", (nn.Module,), {"forward": lambda self, x: x * self.factor + 100})

    model = nn.Sequential(Scale(2), Scale(3))
    with use_kernel_mapping({"Scale": {"cpu": Repo()}}, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    x = torch.ones(1)
    assert model[0](x).item() == 102 and model[1](x).item() == 3
    assert "kernel_condition is false" in model.kernelize_report.rejected[0].reason
