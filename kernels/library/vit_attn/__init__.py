"""neuron/vit-attn: fused ViT self-attention on NeuronCores (NKI kernel).

    out = vit_attention(q, k, v, scale=None)

q, k, v (..., H, S, D) as torch's scaled_dot_product_attention (non-causal), bf16 or fp32, S <= 4096,
D 64 or 128. One kernel goes from Q, K, V to the output; scores and probabilities stay on chip.
``ops.vit_attention`` is the torch custom op (fake implementation for torch.compile; autograd computes
the gradients with the torch reference math, as the kernel is forward-only; neuron/flash-attn has a
backward kernel).
"""
import math

import torch

from kernels.torch_ops import OpLibrary, launch

from . import nki_kernels, reference

__version__ = "1.0.0"
__all__ = ["vit_attention", "ops", "__version__"]

_lib = OpLibrary("vit_attn", __version__, __file__)
ops = _lib.ops
HEAD_DIMS = (64, 128)
MAX_SEQ = 4096
_DTYPES = (torch.bfloat16, torch.float32)


def check_inputs(q, k, v, scale=None) -> float:
    """Validate the arguments (ValueError naming the argument); returns the softmax scale to use."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"'{name}' must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _DTYPES:
            raise ValueError(f"'{name}' has dtype {t.dtype}; supported: torch.bfloat16, torch.float32")
        if t.dim() < 3:
            raise ValueError(f"'{name}' must be (..., heads, seq, head_dim) with at least 3 dims, got shape "
                             f"{tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"'{name}' is empty (shape {tuple(t.shape)})")
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"'{name}' must have the shape of 'q' {tuple(q.shape)}, got {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise ValueError(f"'{name}' has dtype {t.dtype} but 'q' has {q.dtype}; pass one dtype")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"'q' head dim {q.shape[-1]} is not supported (64 or 128)")
    if q.shape[-2] > MAX_SEQ:
        raise ValueError(f"'q' sequence length {q.shape[-2]} exceeds {MAX_SEQ}")
    if scale is None:
        return 1.0 / math.sqrt(q.shape[-1])
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise ValueError(f"'scale' must be a number, got {scale!r}") from None
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"'scale' must be positive and finite, got {scale!r}")
    return scale


def _heads(t):
    """(..., H, S, D) -> (B, H, S, D) with the leading dims folded into B."""
    return t.detach().reshape(-1, *t.shape[-3:])


@_lib.op("vit_attention", fake=lambda q, k, v, scale: torch.empty_like(q))
def _vit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    out = launch(nki_kernels.vit_attention_kernel, _heads(q), _heads(k), _heads(v), scale)
    return out.reshape(q.shape).to(q.device)


def _setup_context(ctx, inputs, output):
    q, k, v, scale = inputs
    ctx.save_for_backward(q, k, v)
    ctx.scale = scale


def _backward(ctx, grad):
    q, k, v = ctx.saved_tensors
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = reference.vit_attention(*leaves, scale=ctx.scale)
        dq, dk, dv = torch.autograd.grad(out, leaves, grad)
    return dq, dk, dv, None


_vit_attention.register_autograd(_backward, setup_context=_setup_context)


def vit_attention(q, k, v, scale=None):
    """softmax(scale * q k^T) v, non-causal. q, k, v (..., H, S, D) of one shape, bf16 or fp32, S <= 4096,
    D in {64, 128}; ``scale`` defaults to 1/sqrt(D). Returns (..., H, S, D) in q's dtype."""
    scale = check_inputs(q, k, v, scale)
    return ops.vit_attention(q, k, v, scale)


# transformers' attention interface: AttentionInterface.register("neuron-vit-attn", transformers_attention)
from kernels.transformers_attention import make_transformers_attention  # noqa: E402

transformers_attention = make_transformers_attention(
    lambda q, k, v, scale, causal: vit_attention(q, k, v, scale=scale), name="neuron/vit-attn")
