"""transformers' own extension point: AttentionInterface.register(name, kernel.transformers_attention)
and a ViT config with attn_implementation=name runs the model on the kernel."""
from __future__ import annotations

import importlib

import pytest
import torch

transformers = pytest.importorskip("transformers")

from nkihub.kernels.torch_ops import count_calls  # noqa: E402
from nkihub.kernels.transformers_attention import make_transformers_attention  # noqa: E402

CFG = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256, image_size=32,
           patch_size=8)
# registered names must not contain "flash": transformers then looks for a flash-attention package
KERNELS = [("neuron-vit-attn", "nkihub.kernels.library.vit_attn", "vit_attention"),
           ("neuron-fa", "nkihub.kernels.library.flash_attn", "flash_attention_with_lse")]


def _kernel(path):
    try:
        mod = importlib.import_module(path)
    except ImportError:
        mod = None
    if getattr(mod, "transformers_attention", None) is None:
        pytest.skip(f"{path} does not expose transformers_attention yet")
    return mod


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name, path, op", KERNELS)
def test_vit_runs_on_the_registered_kernel(name, path, op, dtype):
    kernel = _kernel(path)
    transformers.AttentionInterface.register(name, kernel.transformers_attention)
    torch.manual_seed(0)
    ref_model = transformers.ViTModel(transformers.ViTConfig(**CFG)).to(dtype).eval()
    model = transformers.ViTModel(transformers.ViTConfig(**CFG, attn_implementation=name)).to(dtype).eval()
    model.load_state_dict(ref_model.state_dict())
    assert model.config._attn_implementation == name
    x = torch.randn(2, 3, 32, 32, dtype=dtype)
    with torch.no_grad(), count_calls() as calls:
        out = model(x).last_hidden_state
    assert {k.split("::")[1]: v for k, v in calls.items()} == {op: 2}  # one call per layer
    with torch.no_grad():
        ref = ref_model(x).last_hidden_state
    tol = dict(atol=6e-2, rtol=6e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out, ref, **tol)


def _recording_attention(**kw):
    seen = []

    def attend(q, k, v, scale, causal):
        seen.append((q.shape, k.shape, scale, causal))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=causal,
                                                                enable_gqa=k.shape[1] != q.shape[1])

    return make_transformers_attention(attend, name="test-attn", **kw), seen


def test_output_layout_and_scale_follow_transformers():
    attention, seen = _recording_attention()
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    out, weights = attention(torch.nn.Module(), q, k, v, None, scaling=0.3)
    assert weights is None and out.shape == (2, 6, 4, 8)  # (B, S, H, D) as eager_attention_forward
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.3).transpose(1, 2)
    torch.testing.assert_close(out, ref)
    assert seen == [(q.shape, k.shape, 0.3, False)]


def test_grouped_heads_are_expanded_for_kernels_without_gqa():
    attention, seen = _recording_attention()
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    attention(torch.nn.Module(), q, k, v, None)
    assert seen[0][1] == (1, 4, 5, 8)
    attention_gqa, seen_gqa = _recording_attention(grouped_heads=True)
    attention_gqa(torch.nn.Module(), q, k, v, None)
    assert seen_gqa[0][1] == (1, 2, 5, 8)


def test_what_the_kernel_cannot_do_is_an_error_not_a_fallback():
    attention, _ = _recording_attention()
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="attention_mask"):
        attention(torch.nn.Module(), q, q, q, torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="dropout"):
        attention(torch.nn.Module(), q, q, q, None, dropout=0.1)
    causal_module = torch.nn.Module()
    causal_module.is_causal = True
    with pytest.raises(ValueError, match="is_causal"):
        attention(causal_module, q, q, q, None)
    causal_attention, seen = _recording_attention(causal=True)
    causal_attention(causal_module, q, q, q, None)
    assert seen[0][3] is True
