"""Attention by square blocks (flash_attn.blocks): what runs when a head does not fit SBUF whole, checked
at small shapes by forcing the block size, and the fit decision itself."""
import pytest
import torch

from nkihub.kernels.library import flash_attn, vit_attn
from nkihub.kernels.library.flash_attn import blocks
from nkihub.kernels.library.flash_attn.nki_kernels import flash_fwd_kernel
from nkihub.kernels.library.flash_attn.reference import attention_with_lse, gradients


@pytest.fixture
def small_sbuf(monkeypatch):
    """Pretend only 128-row blocks fit, so every path goes through the blocks."""
    monkeypatch.setattr(blocks, "fits", lambda kernel, tensors, consts=(): max(t.shape[-2] for t in tensors) <= 128)
    monkeypatch.setattr(blocks, "bwd_fits", lambda q, k, causal: max(q.shape[-2], k.shape[-2]) <= 128)


@pytest.mark.parametrize("causal, sq, sk, hq, hkv, d", [(False, 300, 300, 2, 1, 72), (True, 260, 300, 2, 2, 160)])
def test_blocked_forward_and_backward_match_torch(small_sbuf, causal, sq, sk, hq, hkv, d):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, hq, sq, d, generator=g).requires_grad_()
    k, v = (torch.randn(1, hkv, sk, d, generator=g).requires_grad_() for _ in range(2))
    out, lse = flash_attn.flash_attention_with_lse(q, k, v, causal=causal)
    ref_out, ref_lse = attention_with_lse(q.detach(), k.detach(), v.detach(), causal)
    torch.testing.assert_close(out.detach(), ref_out, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse.detach(), ref_lse, atol=2e-5, rtol=2e-5)
    w = torch.randn(out.shape, generator=g)
    grads = torch.autograd.grad((out * w).sum(), (q, k, v))
    for got, want in zip(grads, gradients(q, k, v, w, causal)):
        torch.testing.assert_close(got, want, atol=1e-4 * want.abs().max().item(), rtol=1e-4)


def test_vit_attention_takes_the_blocks_when_the_head_does_not_fit(small_sbuf):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 257, 64, generator=g) for _ in range(3))
    torch.testing.assert_close(vit_attn.vit_attention(q, k, v), attention_with_lse(q, k, v)[0], atol=2e-5,
                               rtol=2e-5)


def test_fit_is_the_allocators_answer_for_the_target(monkeypatch):
    q = torch.empty(1, 2, 4096, 128)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    assert not blocks.fits(flash_fwd_kernel, (q, q, q), (False, 0.1))      # fp32 K, V, K^T rings of 2 heads
    assert blocks.fits(flash_fwd_kernel, (q[..., :1024, :],) * 3, (False, 0.1))
    assert not blocks.bwd_fits(q, q, False)
    assert blocks.block_size(4096, lambda s: s <= 1024) == 1024
    with pytest.raises(ValueError, match="128-row blocks"):
        blocks.block_size(4096, lambda s: False)
