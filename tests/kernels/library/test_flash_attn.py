"""neuron/flash-attn forward (with lse), causal, GQA/MQA and backward against torch, its ops and errors."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from nkihub.kernels.library.flash_attn import flash_attention, flash_attention_with_lse, ops
from nkihub.kernels.library.flash_attn.reference import attention_with_lse, gradients
from nkihub.kernels.torch_ops import opcheck

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def _rand(shape, dtype, g):
    return torch.randn(*shape, generator=g).to(dtype)


@settings(max_examples=6, deadline=None)
@given(hkv=st.integers(1, 2), group=st.sampled_from([1, 2, 3]), sq=st.sampled_from([1, 37, 128, 197, 300]),
       sk=st.sampled_from([1, 37, 128, 197, 300]),
       d=st.one_of(st.integers(1, 128), st.integers(129, 256), st.sampled_from([64, 80, 128, 256])),
       causal=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 2**16))
def test_forward_matches_reference(hkv, group, sq, sk, d, causal, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = _rand((1, hkv * group, sq, d), dtype, g)
    k, v = _rand((1, hkv, sk, d), dtype, g), _rand((1, hkv, sk, d), dtype, g)
    out, lse = flash_attention_with_lse(q, k, v, causal=causal)
    ref_out, ref_lse = attention_with_lse(q, k, v, causal)
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.shape == q.shape[:-1]
    torch.testing.assert_close(out.float(), ref_out.float(), atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(lse, ref_lse, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("causal", [False, True])
def test_forward_on_trn1_matches_reference(monkeypatch, causal):
    # trn1 (shared PSUM port) evacuates S once through the Scalar Engine: its own path through the kernel
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    g = torch.Generator().manual_seed(3)
    q, k, v = (_rand((1, 2, 200, 64), torch.float32, g) for _ in range(3))
    k, v = k.repeat(1, 1, 6, 1)[:, :, :1100], v.repeat(1, 1, 6, 1)[:, :, :1100]
    out, lse = flash_attention_with_lse(q, k, v, causal=causal)
    ref_out, ref_lse = attention_with_lse(q, k, v, causal)
    torch.testing.assert_close(out, ref_out, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse, ref_lse, atol=2e-5, rtol=2e-5)


def test_long_keys_online_softmax_gqa():
    # more keys than one 1024-key block: the running max/sum rescaling path; MQA (one kv head)
    g = torch.Generator().manual_seed(1)
    q = _rand((2, 3, 37, 64), torch.float32, g) * 2
    k, v = _rand((2, 1, 1100, 64), torch.float32, g), _rand((2, 1, 1100, 64), torch.float32, g)
    out, lse = flash_attention_with_lse(q, k, v, scale=0.2)
    ref_out, ref_lse = attention_with_lse(q, k, v, False, 0.2)
    torch.testing.assert_close(out, ref_out, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse, ref_lse, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("shape_q, shape_kv, causal, dtype", [
    ((1, 2, 197, 64), (1, 1, 197, 64), True, torch.float32),
    ((1, 2, 37, 128), (1, 2, 130, 128), False, torch.float32),
    ((2, 1, 150, 64), (2, 1, 150, 64), True, torch.bfloat16),
    # head dims off the powers of two (partial partitions) and over 128 (two chunks; dK/dV in 4 banks)
    ((1, 4, 197, 72), (1, 2, 197, 72), False, torch.float32),
    ((1, 2, 130, 200), (1, 1, 130, 200), True, torch.float32),
    ((1, 2, 257, 256), (1, 2, 257, 256), False, torch.bfloat16),
])
def test_gradients_match_torch_autograd(shape_q, shape_kv, causal, dtype):
    g = torch.Generator().manual_seed(2)
    q, k, v = (_rand(s, dtype, g).requires_grad_() for s in (shape_q, shape_kv, shape_kv))
    out, lse = flash_attention_with_lse(q, k, v, causal=causal)
    w_out, w_lse = torch.randn(out.shape, generator=g), torch.randn(lse.shape, generator=g)
    grads = torch.autograd.grad((out.float() * w_out).sum() + (lse * w_lse).sum(), (q, k, v))
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    r_out, r_lse = attention_with_lse(*leaves, causal)
    expected = torch.autograd.grad((r_out * w_out).sum() + (r_lse * w_lse).sum(), leaves)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for got, want in zip(grads, expected):
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want, atol=tol * want.abs().max().item(), rtol=tol)


@settings(max_examples=4, deadline=None)
@given(b=st.integers(1, 2), hkv=st.integers(1, 2), group=st.sampled_from([1, 2]), s=st.sampled_from([1, 37, 197]),
       d=st.one_of(st.integers(1, 128), st.integers(129, 256)), causal=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 2**16))
def test_backward_matches_reference(b, hkv, group, s, d, causal, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = _rand((b, hkv * group, s, d), dtype, g).requires_grad_()
    k, v = (_rand((b, hkv, s, d), dtype, g).requires_grad_() for _ in range(2))
    out = flash_attention(q, k, v, causal=causal)
    w = torch.randn(out.shape, generator=g)
    grads = torch.autograd.grad((out.float() * w).sum(), (q, k, v))
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for got, want in zip(grads, gradients(q, k, v, w, causal)):
        assert got.shape == want.shape and got.dtype == dtype
        torch.testing.assert_close(got.float(), want, atol=tol * max(want.abs().max().item(), 1.0), rtol=tol)


def test_flash_attention_matches_sdpa_causal():
    g = torch.Generator().manual_seed(4)
    q, k, v = (_rand((1, 2, 37, 64), torch.float32, g) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(flash_attention(q, k, v, causal=True), ref, atol=2e-5, rtol=2e-5)


def test_opcheck():
    g = torch.Generator().manual_seed(5)
    q, k, v = (_rand((1, 2, 37, 64), torch.float32, g) for _ in range(3))
    opcheck(ops.flash_attention_with_lse, (q, k, v, True, 0.125))
    out, lse = ops.flash_attention_with_lse(q, k, v, True, 0.125)
    opcheck(ops.flash_attention_backward, (q, k, v, out, torch.randn_like(out), lse, torch.zeros_like(lse),
                                           True, 0.125))


@pytest.mark.parametrize("args, kwargs, name", [
    ((torch.randn(37, 64),) * 3, {}, "'q'"),
    ((torch.randn(1, 2, 37, 64), torch.randn(1, 2, 37, 32), torch.randn(1, 2, 37, 32)), {}, "'k'"),
    ((torch.randn(1, 2, 37, 257),) * 3, {}, "head dim"),
    ((torch.randn(1, 3, 37, 64), torch.randn(1, 2, 37, 64), torch.randn(1, 2, 37, 64)), {}, "'k'"),
    ((torch.randn(1, 2, 37, 64), torch.randn(1, 2, 37, 64), torch.randn(1, 2, 38, 64)), {}, "'v'"),
    ((torch.randn(2, 2, 37, 64), torch.randn(1, 2, 37, 64), torch.randn(1, 2, 37, 64)), {}, "'k'"),
    ((torch.randn(1, 2, 37, 64).half(),) * 3, {}, "dtype"),
    ((torch.randn(1, 2, 37, 64), torch.randn(1, 2, 37, 64).bfloat16(), torch.randn(1, 2, 37, 64)), {}, "'k'"),
    ((torch.randn(1, 2, 37, 64),) * 3, {"causal": 1}, "'causal'"),
    ((torch.randn(1, 2, 37, 64),) * 3, {"scale": -0.5}, "'scale'"),
])
def test_bad_arguments(args, kwargs, name):
    with pytest.raises(ValueError, match=name):
        flash_attention(*args, **kwargs)


def test_backward_too_long_for_sbuf_is_a_clear_error():
    from nkihub.kernels.library.flash_attn.nki_kernels import flash_bwd_kernel
    q = torch.zeros(1, 1, 16384, 128, dtype=torch.bfloat16)
    lse = torch.zeros(1, 1, 16384)
    with pytest.raises(ValueError, match="SBUF"):
        flash_bwd_kernel.trace(q, q, q, q, q, lse, lse, False, 0.1)


@pytest.mark.parametrize("shape_q, shape_kv, causal, dtype", [
    # several 512-key blocks, partial tiles, two q heads per kv head (dK/dV summed over the group)
    ((1, 4, 300, 64), (1, 2, 700, 64), True, torch.bfloat16),
    # non-causal: rows interleaved over several full tiles, heads long enough to share two slots
    ((1, 4, 300, 64), (1, 2, 700, 64), False, torch.float32),
    # causal heads longer than the pipeline (two slots), keys past every query (zero dK, dV)
    ((1, 3, 700, 64), (1, 1, 900, 64), True, torch.float32),
    # causal 512-row groups: two whole groups of q against two of keys plus partial tiles, and whole
    # q groups against a natural (trimmed) key block
    ((1, 1, 1100, 32), (1, 1, 1030, 32), True, torch.float32),
    ((1, 2, 1024, 32), (1, 1, 700, 32), True, torch.bfloat16),
])
def test_gradients_long_keys_gqa(shape_q, shape_kv, causal, dtype):
    g = torch.Generator().manual_seed(6)
    q = _rand(shape_q, dtype, g).requires_grad_()
    k, v = (_rand(shape_kv, dtype, g).requires_grad_() for _ in range(2))
    out = flash_attention(q, k, v, causal=causal)
    w = torch.randn(out.shape, generator=g)
    grads = torch.autograd.grad((out.float() * w).sum(), (q, k, v))
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for got, want in zip(grads, gradients(q, k, v, w, causal)):
        torch.testing.assert_close(got.float(), want, atol=tol * want.abs().max().item(), rtol=tol)
    if causal and shape_kv[2] > shape_q[2]:
        assert not grads[1][..., shape_q[2]:, :].any() and not grads[2][..., shape_q[2]:, :].any()


def test_backward_sbuf_budget_is_the_targets():
    # the shape (Sq = Sk = 4096, D = 128, bf16) fits trn2's 224 KiB but not trn1's 192 KiB
    from nkihub.kernels.library.flash_attn.nki_backward import bwd_sbuf_bytes, check_bwd_fits
    assert 192 * 1024 < bwd_sbuf_bytes(4096, 4096, 128, 1, 2) <= 224 * 1024
    check_bwd_fits(4096, 4096, 128, 1, 2, False, 224 * 1024)
    with pytest.raises(ValueError, match="192 KiB"):
        check_bwd_fits(4096, 4096, 128, 1, 2, False, 192 * 1024)


def test_backward_sbuf_error_follows_the_target_in_force(monkeypatch):
    from nkihub.kernels.library.flash_attn import blocks
    from nkihub.kernels.library.flash_attn.nki_kernels import flash_bwd_kernel
    q = torch.zeros(1, 1, 4096, 128, dtype=torch.bfloat16)
    lse = torch.zeros(1, 1, 4096)
    with pytest.raises(ValueError, match="192 KiB"):
        flash_bwd_kernel.trace(q, q, q, q, q, lse, lse, False, 0.1, target="trn1")
    # the torch op asks the target in force (NEURON_PLATFORM_TARGET_OVERRIDE): whole on trn2, by square
    # blocks on trn1 (test_flash_attn_blocks checks the blocked math)
    assert blocks.bwd_fits(q, q, False)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    assert not blocks.bwd_fits(q, q, False)