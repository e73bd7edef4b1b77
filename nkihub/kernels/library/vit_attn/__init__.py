"""neuron/vit-attn: fused ViT self-attention on NeuronCores (NKI kernel).

    out = vit_attention(q, k, v, scale=None)

q, k, v (..., H, S, D) as torch's scaled_dot_product_attention (non-causal), bf16 or fp32, S <= 4096,
any head dim D from 1 to 256 (D <= 128 on D partitions, no padding; over 128 split in two). One kernel
goes from Q, K, V to the output; scores and probabilities stay on chip. A head too long for SBUF in one
call (fp32 at long sequences) runs as flash-attn's square blocks.
``ops.vit_attention`` is the torch custom op (fake implementation for torch.compile);
``ops.vit_attention_with_lse`` also returns lse (B..., H, S) fp32, and ``ops.vit_attention_backward``
runs neuron/flash-attn's backward kernel (carried in this package when published) on the saved out and lse:
``vit_attention`` takes the lse route whenever a gradient is wanted, so autograd never recomputes.
"""
import torch

from nkihub.kernels.library import common
from nkihub.kernels.library.flash_attn.attention_backward import backward as flash_attn_backward
from nkihub.kernels.library.flash_attn.blocks import whole_or_blocks
from nkihub.kernels.torch_ops import OpLibrary, launch

from . import nki_kernels

__version__ = "1.0.0"
__all__ = ["vit_attention", "ops", "__version__"]

_lib = OpLibrary("vit_attn", __version__, __file__)
ops = _lib.ops
MAX_HEAD_DIM = 256
MAX_SEQ = 4096


def check_inputs(q, k, v, scale=None) -> float:
    """Validate the arguments (ValueError naming the argument); returns the softmax scale to use."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        common.check_tensor(name, t, min_ndim=3)
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"'{name}' must have the shape of 'q' {tuple(q.shape)}, got {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise ValueError(f"'{name}' has dtype {t.dtype} but 'q' has {q.dtype}; pass one dtype")
    if q.shape[-1] > MAX_HEAD_DIM:
        raise ValueError(f"'q' head dim {q.shape[-1]} is not supported (1 to {MAX_HEAD_DIM})")
    if q.shape[-2] > MAX_SEQ:
        raise ValueError(f"'q' sequence length {q.shape[-2]} exceeds {MAX_SEQ}")
    return common.softmax_scale(scale, q.shape[-1])


@_lib.op("vit_attention", fake=lambda q, k, v, scale: q.new_empty(q.shape))
def _vit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    h = common.heads
    # a head too long for SBUF in one call (fp32 at long sequences) runs as flash-attn's square blocks
    out = whole_or_blocks(launch, nki_kernels.vit_attention_kernel, h(q), h(k), h(v), (scale,), False, scale, False)
    return out.reshape(q.shape).to(q.device)


def _fake_with_lse(q, k, v, scale):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


@_lib.op("vit_attention_with_lse", fake=_fake_with_lse)
def _vit_attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    h = common.heads
    out, lse = whole_or_blocks(launch, nki_kernels.vit_attention_kernel, h(q), h(k), h(v), (scale, True), False,
                               scale, True)
    return out.reshape(q.shape).to(q.device), lse.reshape(q.shape[:-1]).to(q.device)


def _fake_bwd(q, k, v, out, grad_out, lse, grad_lse, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


@_lib.op("vit_attention_backward", fake=_fake_bwd)
def _vit_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                            grad_out: torch.Tensor, lse: torch.Tensor, grad_lse: torch.Tensor,
                            scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # neuron/flash-attn's backward kernel (non-causal, one kv head per q head)
    return flash_attn_backward(q, k, v, out, grad_out, lse, grad_lse, False, scale)


def _save_with_lse(ctx, inputs, output):
    q, k, v, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.scale = scale


def _backward_with_lse(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    grad_out = torch.zeros_like(out) if grad_out is None else grad_out
    grad_lse = torch.zeros_like(lse) if grad_lse is None else grad_lse
    dq, dk, dv = ops.vit_attention_backward(q, k, v, out, grad_out, lse, grad_lse, ctx.scale)
    return dq, dk, dv, None


_vit_attention_with_lse.register_autograd(_backward_with_lse, setup_context=_save_with_lse)


def _save(ctx, inputs, output):
    q, k, v, scale = inputs
    ctx.save_for_backward(q, k, v, output)
    ctx.scale = scale


def _backward(ctx, grad):
    # ops.vit_attention kept no lse: recompute it (a second forward). vit_attention() avoids this by
    # running ops.vit_attention_with_lse whenever a gradient is wanted.
    q, k, v, out = ctx.saved_tensors
    lse = ops.vit_attention_with_lse(q, k, v, ctx.scale)[1]
    dq, dk, dv = ops.vit_attention_backward(q, k, v, out, grad, lse, torch.zeros_like(lse), ctx.scale)
    return dq, dk, dv, None


_vit_attention.register_autograd(_backward, setup_context=_save)


def vit_attention(q, k, v, scale=None):
    """softmax(scale * q k^T) v, non-causal. q, k, v (..., H, S, D) of one shape, bf16 or fp32, S <= 4096,
    D from 1 to 256; ``scale`` defaults to 1/sqrt(D). Returns (..., H, S, D) in q's dtype."""
    scale = check_inputs(q, k, v, scale)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # training: the forward also writes lse (a few instructions per q tile) for the backward kernel
        return ops.vit_attention_with_lse(q, k, v, scale)[0]
    return ops.vit_attention(q, k, v, scale)


# transformers' attention interface: AttentionInterface.register("neuron-vit-attn", transformers_attention)
from nkihub.kernels.transformers_attention import make_transformers_attention  # noqa: E402

transformers_attention = make_transformers_attention(
    lambda q, k, v, scale, causal: vit_attention(q, k, v, scale=scale), name="neuron/vit-attn")

from . import layers  # noqa: E402  (kernelize finds the layers here; they use the names above)
