"""neuron/gelu-mlp against the torch reference (resident and reloaded weights) and its errors."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from nkihub.kernels.library.gelu_mlp import gelu_mlp, ops
from nkihub.kernels.library.gelu_mlp.nki_kernels import gelu_mlp_kernel
from nkihub.kernels.library.gelu_mlp.reference import gelu_mlp as reference


def _params(d, h, dtype, g):
    return ((torch.randn(h, d, generator=g) / d ** 0.5).to(dtype), torch.randn(h, generator=g).to(dtype),
            (torch.randn(d, h, generator=g) / h ** 0.5).to(dtype), torch.randn(d, generator=g).to(dtype))


def _close(y, ref, dtype):
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert ((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1.0)) < tol


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 300), d=st.integers(1, 260), h=st.integers(1, 300),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 2**16))
def test_matches_reference(rows, d, h, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=g).to(dtype)
    p = _params(d, h, dtype, g)
    y = gelu_mlp(x, *p)
    assert y.shape == x.shape and y.dtype == dtype
    _close(y, reference(x, *p), dtype)


@pytest.mark.parametrize("activation", ["gelu_tanh", "quick_gelu"])
def test_siglip_and_clip_gelus(activation):
    g = torch.Generator().manual_seed(4)
    x, p = torch.randn(40, 72, generator=g) * 2, _params(72, 96, torch.float32, g)
    _close(gelu_mlp(x, *p, activation=activation), reference(x, *p, activation), torch.float32)
    with pytest.raises(ValueError, match="'activation'"):
        gelu_mlp(x, *p, activation="relu")


def test_reloaded_weights_and_small_token_blocks():
    g = torch.Generator().manual_seed(1)
    x, p = torch.randn(150, 130, generator=g), _params(130, 200, torch.float32, g)
    _close(gelu_mlp_kernel(x, *p, 64, False), reference(x, *p), torch.float32)


def test_leading_dims_and_opcheck():
    g = torch.Generator().manual_seed(2)
    x, p = torch.randn(2, 7, 24, generator=g), _params(24, 40, torch.float32, g)
    _close(gelu_mlp(x, *p), reference(x, *p), torch.float32)
    torch.library.opcheck(ops.gelu_mlp, (x.reshape(-1, 24), *p))


@pytest.mark.parametrize("which, bad, name", [
    (0, torch.randn(40, 23), "fc1_weight"), (1, torch.randn(41), "fc1_bias"),
    (2, torch.randn(40, 24), "fc2_weight"), (3, torch.randn(24).bfloat16(), "fc2_bias"),
])
def test_bad_arguments(which, bad, name):
    p = list(_params(24, 40, torch.float32, torch.Generator().manual_seed(0)))
    p[which] = bad
    with pytest.raises(ValueError, match=f"'{name}'"):
        gelu_mlp(torch.randn(3, 24), *p)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_vit_h_widths_in_fp32_stream_their_weights(target, monkeypatch):
    # W^T of fc1 and fc2 take 200 KiB a partition each: more than trn1's whole SBUF, so they stream
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    g = torch.Generator().manual_seed(7)
    x, p = torch.randn(2, 5, 1280, generator=g), _params(1280, 5120, torch.float32, g)
    _close(gelu_mlp(x, *p), reference(x, *p), torch.float32)
