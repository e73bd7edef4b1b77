"""kernelize on a randomly initialised transformers ViTModel (no weights downloaded): outputs match the
original, call counts prove the kernels ran, and the report says what was replaced and why not."""
from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from nkihub.kernels import device  # noqa: E402
from nkihub.kernels.layers import (  # noqa: E402
    LibraryLayerRepository, Mode, _KERNEL_MAPPING, kernelize, register_kernel_mapping,
    use_kernel_forward_from_hub, use_kernel_mapping)
from nkihub.kernels.library import LIBRARY  # noqa: E402
from nkihub.kernels.torch_ops import count_calls, library_of  # noqa: E402


def _available(repo_id: str) -> bool:
    try:
        library_of(importlib.import_module(LIBRARY[repo_id]))
        return True
    except (ImportError, ValueError):
        return False


def _need(*repo_ids):
    missing = [r for r in repo_ids if not _available(r)]
    if missing:
        pytest.skip(f"library kernels not there yet: {missing}")


def tiny_vit(dtype=torch.float32, **overrides) -> nn.Module:
    cfg = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256,
               image_size=32, patch_size=8, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    cfg.update(overrides)
    torch.manual_seed(0)
    return transformers.ViTModel(transformers.ViTConfig(**cfg)).to(dtype).eval()


def _pixels(dtype=torch.float32):
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(dtype)


def _lib(repo_id, layer):
    return LibraryLayerRepository(repo_id, layer_name=layer)


ATTN_AND_NORM = {
    "ViTAttention": {"cpu": _lib("neuron/flash-attn", "ViTAttention")},
    "LayerNorm": {"cpu": _lib("neuron/layernorm", "LayerNorm")},
}
PARTS = {**ATTN_AND_NORM, "ViTMLP": {"cpu": _lib("neuron/gelu-mlp", "ViTMLP")}}


def _tol(dtype):
    return dict(atol=6e-2, rtol=6e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernelized_vit_parts_match_original_and_kernels_ran(dtype):
    """Without a whole-layer kernel in the mapping: attention, MLP and every LayerNorm run kernels."""
    _need("neuron/flash-attn", "neuron/layernorm", "neuron/gelu-mlp")
    model, x = tiny_vit(dtype), _pixels(dtype)
    with torch.no_grad():
        ref = model(x).last_hidden_state
    with use_kernel_mapping(PARTS, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    report = model.kernelize_report
    assert sorted(d.module for d in report.replaced) == [
        "layernorm", "layers.0.attention", "layers.0.layernorm_after", "layers.0.layernorm_before", "layers.0.mlp",
        "layers.1.attention", "layers.1.layernorm_after", "layers.1.layernorm_before", "layers.1.mlp"]
    with count_calls() as calls, torch.no_grad():
        out = model(x).last_hidden_state
    by_op = {k.split("::")[1]: v for k, v in calls.items()}
    assert by_op == {"flash_attention_with_lse": 2, "gelu_mlp": 2, "layer_norm": 5}  # 2 layers; 2 x 2 + final
    torch.testing.assert_close(out, ref, **_tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernelized_vit_whole_layers_match_original_and_kernels_ran(dtype):
    """The default mapping: each ViTLayer becomes one vit-block kernel; its children are covered."""
    _need("neuron/vit-block", "neuron/layernorm")
    model, x = tiny_vit(dtype), _pixels(dtype)
    with torch.no_grad():
        ref = model(x).last_hidden_state
    kernelize(model, mode=Mode.INFERENCE, device="cpu")
    statuses = {d.module: d.status for d in model.kernelize_report.decisions}
    assert statuses["layers.0"] == statuses["layers.1"] == statuses["layernorm"] == "replaced"
    assert statuses["layers.0.attention"] == statuses["layers.1.mlp"] == "covered"
    with count_calls() as calls, torch.no_grad():
        out = model(x).last_hidden_state
    assert {k.split("::")[1]: v for k, v in calls.items()} == {"vit_block": 2, "layer_norm": 1}
    torch.testing.assert_close(out, ref, **_tol(dtype))


def test_default_mapping_replaces_what_the_library_has():
    model, x = tiny_vit(), _pixels()
    with torch.no_grad():
        ref = model(x).last_hidden_state
    kernelize(model, mode=Mode.INFERENCE, device="cpu")
    report = model.kernelize_report
    statuses = {d.module: d.status for d in report.decisions}
    if _available("neuron/vit-block"):
        assert statuses["layers.0"] == "replaced"
        assert statuses["layers.0.attention"] == statuses["layers.0.mlp"] == "covered"
    else:
        assert statuses["layers.0"] == "fallback"
        assert "neuron/vit-block" in next(d.reason for d in report.decisions if d.module == "layers.0")
    for d in report.decisions:
        assert d.status in ("replaced", "covered") or d.reason, d
    assert statuses["layernorm"] == ("replaced" if _available("neuron/layernorm") else "fallback")
    with count_calls() as calls, torch.no_grad():
        out = model(x).last_hidden_state
    assert sum(calls.values()) >= len(report.replaced)  # every replaced layer ran a kernel at least once
    torch.testing.assert_close(out, ref, atol=1e-3, rtol=1e-3)
    text = str(report)
    assert "replaced" in text and "not kernelizable" in text and "Conv2d x1" in text


def test_report_gives_reasons_and_use_fallback_false_raises():
    _need("neuron/flash-attn", "neuron/layernorm")
    model = tiny_vit(hidden_size=514, num_attention_heads=2, intermediate_size=64)  # head dim 257
    model.layernorm = nn.LayerNorm(514, elementwise_affine=False)
    with use_kernel_mapping(ATTN_AND_NORM, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
        reasons = {d.module: d.reason for d in model.kernelize_report.rejected}
        assert "head dim 257" in reasons["layers.0.attention"]
        assert "no affine weight/bias" in reasons["layernorm"]
        assert "ViTLayer" not in {d.layer_name for d in model.kernelize_report.decisions}  # not mapped here
        with pytest.raises(ValueError, match="layers.0.attention .ViTAttention.: the kernel rejects"):
            kernelize(model, mode=Mode.INFERENCE, device="cpu", use_fallback=False)
    assert model.layers[0].attention.forward.__func__ is type(model.layers[0].attention).forward


def test_training_mode_uses_kernels_with_a_backward_and_gradients_match():
    _need("neuron/flash-attn", "neuron/layernorm")
    model, x = tiny_vit(), _pixels()
    model.train()
    ref_model = tiny_vit().train()
    with use_kernel_mapping(ATTN_AND_NORM, inherit_mapping=False):
        kernelize(model, mode=Mode.TRAINING, device="cpu")
    report = model.kernelize_report
    assert {d.layer_name for d in report.replaced} == {"ViTAttention"}
    assert all("no backward" in d.reason for d in report.rejected if d.layer_name == "LayerNorm")
    model(x).last_hidden_state.square().mean().backward()
    ref_model(x).last_hidden_state.square().mean().backward()
    got, ref = model.layers[0].attention.q_proj.weight.grad, ref_model.layers[0].attention.q_proj.weight.grad
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-3)


def test_mode_rules():
    model = tiny_vit()
    with pytest.raises(ValueError, match="FALLBACK"):
        kernelize(model, mode=Mode.FALLBACK)
    with pytest.raises(ValueError, match="mutually exclusive"):
        Mode.INFERENCE | Mode.TRAINING
    with pytest.raises(ValueError, match="Mode.INFERENCE or Mode.TRAINING"):
        kernelize(model, mode=Mode.TORCH_COMPILE)


def test_asking_for_neuron_without_one_is_an_error():
    if device.neuron_available():
        pytest.skip("this machine has a Neuron device")
    with pytest.raises(device.NeuronUnavailableError, match="no Neuron device"):
        kernelize(tiny_vit(), mode=Mode.INFERENCE, device="neuron")
    with pytest.raises(ValueError, match="device"):
        kernelize(tiny_vit(), mode=Mode.INFERENCE, device="cuda")


# ---- Hugging Face kernels semantics with a kernel that ships its own layers --------------------------------
@use_kernel_forward_from_hub("DoubleIt")
class DoubleIt(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class _FakeRepo:
    """Hugging Face kernels' repository protocol: ``load()`` returns the layer class."""

    def __init__(self, layer_name, *, has_backward=True, can_torch_compile=False):
        self.layer_name = layer_name
        layer = type(layer_name, (nn.Module,), {"forward": lambda self, x: x * 2 + 0.5,
                                                "has_backward": has_backward,
                                                "can_torch_compile": can_torch_compile})
        self.layer = layer

    def load(self):
        return self.layer

    def __str__(self):
        return f"fake layer {self.layer_name}"


def test_marked_layer_uses_the_kernels_own_layers_and_modes():
    model = nn.Sequential(DoubleIt(), nn.Linear(2, 2))
    x = torch.ones(1, 2)
    with use_kernel_mapping({"DoubleIt": {"cpu": {Mode.INFERENCE: _FakeRepo("Doubler")}}}):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
        assert torch.equal(model[0](x), x * 2 + 0.5)
        kernelize(model, mode=Mode.TRAINING, device="cpu")  # INFERENCE-only mapping: falls back
        assert torch.equal(model[0](x), x * 2)
        assert "no kernel for mode" in model.kernelize_report.rejected[0].reason
    with use_kernel_mapping({"DoubleIt": {"cpu": _FakeRepo("Doubler")}}):
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device="cpu")
        assert "torch.compile" in model.kernelize_report.rejected[0].reason
    assert "DoubleIt" not in _KERNEL_MAPPING.get()  # the context restored the mapping


def test_register_kernel_mapping_without_inherit_replaces_the_mapping():
    token = _KERNEL_MAPPING.set({})
    try:
        register_kernel_mapping({"A": {"cpu": _FakeRepo("A")}})
        register_kernel_mapping({"B": {"cpu": _FakeRepo("B")}}, inherit_mapping=False)
        assert set(_KERNEL_MAPPING.get()) == {"B"}
        # a Hugging Face kernels mapping may name devices nkihub does not kernelize for: kept, never matched
        register_kernel_mapping({"C": {"cuda": _FakeRepo("C")}})
        assert set(_KERNEL_MAPPING.get()["C"]) == {"cuda"}
        with pytest.raises(ValueError, match="device"):
            register_kernel_mapping({"D": {"gpu0": _FakeRepo("D")}})
    finally:
        _KERNEL_MAPPING.reset(token)


@pytest.mark.slow
def test_kernelized_vit_compiles_fullgraph():
    _need("neuron/flash-attn", "neuron/layernorm")
    model, x = tiny_vit(), _pixels()
    with torch.no_grad():
        ref = model(x).last_hidden_state
    with use_kernel_mapping(ATTN_AND_NORM, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device="cpu")
    assert len(model.kernelize_report.replaced) == 7
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with count_calls() as calls, torch.no_grad():
        out = compiled(x).last_hidden_state
    assert sum(calls.values()) == 7
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


# -- a fused layer whose kernel does not fit the target: refused by kernelize, never by a forward -----------
def _too_big_kernel_module():
    """A kernel module whose ``vit_block`` passes its argument checks but whose kernel needs more SBUF
    than any target has (as the fused ViT-H layer did on trn1 and trn2 in fp32)."""
    import types

    import nki
    import nki.isa as nisa
    import nki.language as nl

    from nkihub.kernels.library import common

    @nki.jit
    def too_big(x):   # x [rows <= 128, d] -> x, through two 160 KB-a-partition tiles alive together
        rows, d = x.shape
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        a = nl.ndarray((rows, 40000), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((rows, 40000), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=a, value=0.0)
        nisa.memset(dst=b, value=0.0)
        nl.store(out, nl.add(nl.load(x), nl.add(a[:, :d], b[:, :d])))
        return out

    def vit_block(x, *params, num_heads, eps=1e-12, activation="gelu"):
        if x.device.type == "meta":
            return torch.empty_like(x)
        return torch.cat([common.run(too_big, rows) for rows in x.reshape(-1, x.shape[-1]).split(128)]).reshape(x.shape)

    module = types.ModuleType("too_big_block")
    module.vit_block, module.has_backward = vit_block, False
    return module


def test_a_layer_whose_kernel_does_not_fit_the_target_is_refused_at_kernelize_time():
    from nkihub.kernels.layers import LayerRepository

    class ModuleRepository(LayerRepository):
        def load_kernel(self):
            return kernel

    kernel = _too_big_kernel_module()
    model, x = tiny_vit(), _pixels()
    with torch.no_grad():
        ref = model(x).last_hidden_state
    with use_kernel_mapping({"ViTLayer": {"cpu": ModuleRepository("test/too-big", layer_name="ViTLayer")}}):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    decisions = {d.module: d for d in model.kernelize_report.decisions}
    refused = decisions["layers.0"]
    assert refused.status == "fallback"
    assert "does not compile for trn2" in refused.reason and "sbuf-capacity" in refused.reason
    # its parts take the unfused kernels instead, and the forward matches eager
    assert {decisions[f"layers.0.{part}"].status for part in ("attention", "mlp", "layernorm_before")} == {"replaced"}
    with torch.no_grad(), count_calls() as calls:
        out = model(x).last_hidden_state
    assert not any("vit_block" in name for name in calls)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
