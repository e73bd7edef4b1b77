"""neuron/vit-attn against the torch reference over hypothesis-chosen shapes, its op, gradients and errors."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from nkihub.kernels.library.vit_attn import ops, vit_attention
from nkihub.kernels.library.vit_attn.reference import vit_attention as reference
from nkihub.kernels.torch_ops import count_calls, opcheck

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def _qkv(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).to(dtype) for _ in range(3)]


@settings(max_examples=8, deadline=None)
@given(b=st.integers(1, 2), h=st.integers(1, 3), s=st.sampled_from([1, 37, 128, 197, 257, 300]),
       d=st.one_of(st.integers(1, 128), st.integers(129, 256), st.sampled_from([16, 72, 80, 104, 256])),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 2**16))
def test_matches_reference(b, h, s, d, dtype, seed):
    q, k, v = _qkv((b, h, s, d), dtype, seed)
    out = vit_attention(q, k, v)
    assert out.shape == q.shape and out.dtype == dtype
    torch.testing.assert_close(out.float(), reference(q, k, v).float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("b, h, s, d", [(2, 2, 577, 256), (1, 3, 729, 72)])
def test_long_rows_every_head_dim_chunk(b, h, s, d):
    # several 128-row tiles per head, one head per DMA group (the IO slots of heads in flight), and a head
    # dim over 128 (two accumulated chunks) or off the powers of two (partial partitions)
    q, k, v = _qkv((b, h, s, d), torch.float32, 11)
    torch.testing.assert_close(vit_attention(q, k, v), reference(q, k, v), atol=2e-5, rtol=2e-5)


def test_long_rows_two_pass_and_scale():
    # S > 512: the row max comes from a first pass over the PSUM-bank chunks
    q, k, v = _qkv((1, 1, 600, 64), torch.float32, 3)
    q = q * 3
    out = vit_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out, reference(q, k, v, 0.3), atol=2e-5, rtol=2e-5)


def test_many_short_heads_and_leading_dims():
    # one-tile heads: the pipeline holds several heads in flight (ring slots must not be overwritten)
    q, k, v = _qkv((2, 3, 2, 37, 64), torch.float32, 5)
    torch.testing.assert_close(vit_attention(q, k, v), reference(q, k, v), atol=2e-5, rtol=2e-5)


def test_matches_sdpa_and_gradients():
    q, k, v = [t.requires_grad_() for t in _qkv((1, 2, 37, 64), torch.float32, 7)]
    out = vit_attention(q, k, v)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=2e-5,
                               rtol=2e-5)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    expected = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_opcheck():
    q, k, v = _qkv((1, 2, 37, 64), torch.float32)
    opcheck(ops.vit_attention, (q, k, v, 0.125))


@pytest.mark.parametrize("args, name", [
    ((torch.randn(37, 64), torch.randn(37, 64), torch.randn(37, 64)), "'q'"),           # wrong rank
    ((torch.randn(1, 2, 37, 257),) * 3, "head dim 257"),                                 # head dim
    ((torch.randn(1, 2, 37, 64), torch.randn(1, 2, 38, 64), torch.randn(1, 2, 37, 64)), "'k'"),
    ((torch.randn(1, 2, 37, 64), torch.randn(1, 2, 37, 64), torch.randn(1, 1, 37, 64)), "'v'"),
    ((torch.randn(1, 2, 37, 64).half(),) * 3, "dtype"),                                  # dtype
    ((torch.randn(1, 2, 37, 64), torch.randn(1, 2, 37, 64).bfloat16(), torch.randn(1, 2, 37, 64)), "'k'"),
    ((torch.randn(1, 1, 4097, 64),) * 3, "4096"),                                        # too long
    ((torch.randn(1, 2, 37, 64), [1.0], torch.randn(1, 2, 37, 64)), "'k'"),
])
def test_bad_arguments(args, name):
    with pytest.raises(ValueError, match=name):
        vit_attention(*args)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), "x"])
def test_bad_scale(scale):
    q = torch.randn(1, 1, 4, 64)
    with pytest.raises(ValueError, match="'scale'"):
        vit_attention(q, q, q, scale=scale)


@pytest.mark.parametrize("shape, dtype", [((1, 2, 37, 64), torch.float32), ((2, 1, 130, 128), torch.float32),
                                          ((1, 3, 50, 64), torch.bfloat16)])
def test_gradients_run_the_flash_backward_kernel(shape, dtype):
    q, k, v = [t.requires_grad_() for t in _qkv(shape, dtype, 11)]
    w = torch.randn(shape, generator=torch.Generator().manual_seed(12))
    with count_calls() as calls:
        grads = torch.autograd.grad((vit_attention(q, k, v).float() * w).sum(), (q, k, v))
    assert calls[ops.vit_attention_backward.default.name()] == 1
    assert calls[ops.vit_attention_with_lse.default.name()] == 1 and not calls[ops.vit_attention.default.name()]
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*leaves)
    expected = torch.autograd.grad((ref * w).sum(), leaves)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for got, want in zip(grads, expected):
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want, atol=tol * want.abs().max().item(), rtol=tol)


def test_op_without_lse_recomputes_it_for_the_backward():
    q, k, v = [t.requires_grad_() for t in _qkv((1, 2, 20, 64), torch.float32, 13)]
    grads = torch.autograd.grad(ops.vit_attention(q, k, v, 0.2).sum(), (q, k, v))
    expected = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.2).sum(),
                                   (q, k, v))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_lse_output_and_opcheck():
    q, k, v = _qkv((1, 2, 37, 64), torch.float32, 14)
    out, lse = ops.vit_attention_with_lse(q, k, v, 0.125)
    torch.testing.assert_close(out, reference(q, k, v, 0.125), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.transpose(-1, -2) * 0.125, -1), atol=2e-5, rtol=2e-5)
    opcheck(ops.vit_attention_with_lse, (q, k, v, 0.125))
    opcheck(ops.vit_attention_backward, (q, k, v, out, torch.randn_like(out), lse, torch.zeros_like(lse), 0.125))


def test_unfused_baseline_matches_reference_with_loads_ahead():
    # the baseline the speedup is measured against: partial row tiles, several heads (the load pipeline's
    # prologue and drain), S > 512 (two PSUM-bank chunks)
    from nkihub.kernels.library.attention_baseline import unfused_attention
    from nkihub.kernels.library.common import loads_ahead
    for shape in [(2, 3, 197, 64), (1, 1, 600, 40)]:
        q, k, v = _qkv(shape, torch.float32, 13)
        out = torch.as_tensor(unfused_attention(q, k, v, 0.125))
        torch.testing.assert_close(out, reference(q, k, v, 0.125), atol=2e-5, rtol=2e-5)
    trace = []
    loads_ahead(range(4), lambda i: trace.append(f"L{i}"), lambda i: trace.append(f"C{i}"), 2)
    assert trace == ["L0", "L1", "L2", "C0", "L3", "C1", "C2", "C3"]
