"""neuron/vit-block against transformers' ViTLayer and the torch reference; unfused baseline; errors."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from nkihub.kernels.library.vit_block import PARAM_NAMES, layer_params, ops, vit_block, vit_block_from_layer
from nkihub.kernels.library.vit_block.nki_kernels import vit_block_kernel
from nkihub.kernels.library.vit_block.reference import vit_block as reference
from nkihub.kernels.library.vit_block.unfused import vit_block_unfused


def _layer(d, heads, hidden, seed=0):
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTLayer
    torch.manual_seed(seed)
    layer = ViTLayer(ViTConfig(hidden_size=d, num_attention_heads=heads, intermediate_size=hidden)).eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return layer


def _close(y, ref, dtype):
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert ((y.float() - ref.float()).abs().max() / ref.float().abs().max()) < tol


def test_matches_transformers_vit_layer():
    layer = _layer(64, 2, 128)
    x = torch.randn(2, 20, 64)
    with torch.no_grad():
        ref = layer(x)
    _close(vit_block_from_layer(layer, x), ref, torch.float32)


@settings(max_examples=5, deadline=None)
@given(b=st.integers(1, 2), s=st.integers(1, 140),
       dh=st.one_of(st.sampled_from([32, 64, 72]), st.integers(1, 128), st.integers(129, 256)),
       heads=st.integers(1, 3),
       hidden=st.integers(16, 160), dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_matches_reference(b, s, dh, heads, hidden, dtype):
    layer = _layer(dh * heads, heads, hidden)
    x = torch.randn(b, s, dh * heads).to(dtype)
    params = tuple(p.to(dtype) for p in layer_params(layer))
    y = vit_block(x, *params, num_heads=heads)
    assert y.shape == x.shape and y.dtype == dtype
    _close(y, reference(x, *params, num_heads=heads), dtype)


@pytest.mark.parametrize("s", [600, 1100])
def test_rows_over_one_psum_bank_of_scores(s):
    # S > 512: each step's scores take several PSUM slots (the exp must read them before the next step's
    # scores reuse them) and P^T goes four transposes to a bank (DINOv2 at 518 px has 1374 tokens)
    layer = _layer(64, 2, 96, seed=4)
    x = torch.randn(1, s, 64)
    params = layer_params(layer)
    _close(vit_block(x, *params, num_heads=2), reference(x, *params, num_heads=2), torch.float32)


def test_weights_loaded_per_stage_and_unfused_baseline():
    layer = _layer(64, 2, 96, seed=3)
    x = torch.randn(2, 30, 64)
    params = layer_params(layer)
    ref = reference(x, *params, num_heads=2)
    _close(vit_block_kernel(x, *params, 2, 1e-12, False), ref, torch.float32)
    _close(vit_block_unfused(x, params, 2, 1e-12), ref, torch.float32)


def test_opcheck():
    layer = _layer(32, 1, 48)
    torch.library.opcheck(ops.vit_block, (torch.randn(1, 5, 32), *layer_params(layer), 1, 1e-12))


def test_bad_arguments():
    params = list(layer_params(_layer(64, 2, 96)))
    x = torch.randn(1, 8, 64)
    with pytest.raises(ValueError, match="'num_heads'"):
        vit_block(x, *params, num_heads=3)
    with pytest.raises(ValueError, match="'num_heads'"):
        vit_block(torch.randn(1, 8, 514), *[torch.randn(*p.shape[:-1], 514) if p.dim() == 2 else p for p in params],
                  num_heads=2)          # head dim 257
    for i in (2, 12, 14):
        bad = list(params)
        bad[i] = bad[i][:, :-1]
        with pytest.raises(ValueError, match=f"'{PARAM_NAMES[i]}'"):
            vit_block(x, *bad, num_heads=2)
    with pytest.raises(ValueError, match="'x'"):
        vit_block(torch.randn(64), *params, num_heads=2)
    with pytest.raises(ValueError, match="'x'"):
        vit_block(x.bfloat16(), *params, num_heads=2)
