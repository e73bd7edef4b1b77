"""neuron/flash-attn: flash attention forward and backward on NeuronCores (NKI kernels).

    out = flash_attention(q, k, v, causal=False, scale=None)
    out, lse = flash_attention_with_lse(q, k, v, causal=False, scale=None)

q (..., Hq, Sq, D), k and v (..., Hkv, Sk, D) as torch's scaled_dot_product_attention, bf16 or fp32;
GQA/MQA when Hq is a multiple of Hkv; any head dim D from 1 to 256; any sequence lengths (the backward
and forward run a head whole when it fits the target's SBUF, else by square blocks: ``blocks``). Both
functions are torch custom ops
(``ops``) with fake implementations and autograd through the backward kernel.
"""
import torch

from nkihub.kernels.library import common
from nkihub.kernels.torch_ops import OpLibrary, launch

from . import nki_kernels
from .attention_backward import backward
from .blocks import whole_or_blocks

__version__ = "1.0.0"
__all__ = ["flash_attention", "flash_attention_with_lse", "ops", "__version__"]

_lib = OpLibrary("flash_attn", __version__, __file__)
ops = _lib.ops
MAX_HEAD_DIM = 256


def check_inputs(q, k, v, causal=False, scale=None) -> float:
    """Validate the arguments (ValueError naming the argument); returns the softmax scale to use."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        common.check_tensor(name, t, min_ndim=3)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"'{name}' has dtype {t.dtype} but 'q' has {q.dtype}; pass one dtype")
        if t.dim() != q.dim() or t.shape[:-3] != q.shape[:-3]:
            raise ValueError(f"'{name}' shape {tuple(t.shape)} does not match the batch dims of 'q' "
                              f"{tuple(q.shape)}")
    if v.shape != k.shape:
        raise ValueError(f"'v' must have the shape of 'k' {tuple(k.shape)}, got {tuple(v.shape)}")
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ValueError(f"'k' head dim {k.shape[-1]} differs from the head dim of 'q' ({d})")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"'q' head dim {d} is not supported (1 to {MAX_HEAD_DIM})")
    if q.shape[-3] % k.shape[-3]:
        raise ValueError(f"'k' has {k.shape[-3]} heads, which does not divide the {q.shape[-3]} heads of "
                         "'q' (GQA needs Hq % Hkv == 0)")
    if not isinstance(causal, bool):
        raise ValueError(f"'causal' must be a bool, got {causal!r}")
    return common.softmax_scale(scale, d)


def _fake_fwd(q, k, v, causal, scale):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


@_lib.op("flash_attention_with_lse", fake=_fake_fwd)
def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
         scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    h = common.heads
    # a head too long for SBUF in one call (fp32 or D > 128 at long sequences) runs by square blocks
    out, lse = whole_or_blocks(launch, nki_kernels.flash_fwd_kernel, h(q), h(k), h(v), (causal, scale), causal,
                               scale, True)
    return out.reshape(q.shape).to(q.device), lse.reshape(q.shape[:-1]).to(q.device)


def _fake_bwd(q, k, v, out, grad_out, lse, grad_lse, causal, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


@_lib.op("flash_attention_backward", fake=_fake_bwd)
def _bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, grad_out: torch.Tensor,
         lse: torch.Tensor, grad_lse: torch.Tensor, causal: bool,
         scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return backward(q, k, v, out, grad_out, lse, grad_lse, causal, scale)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal, ctx.scale = causal, scale


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    if grad_lse is None:
        grad_lse = torch.zeros_like(lse)
    dq, dk, dv = ops.flash_attention_backward(q, k, v, out, grad_out, lse, grad_lse, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None


_fwd.register_autograd(_backward, setup_context=_setup_context)


def flash_attention_with_lse(q, k, v, causal=False, scale=None):
    """Flash attention returning (out, lse).

    q (..., Hq, Sq, D), k/v (..., Hkv, Sk, D), bf16 or fp32, Hq % Hkv == 0, D <= 256. ``scale`` defaults
    to 1/sqrt(D); ``causal`` keeps key j <= query i (top-left aligned, like torch's is_causal).
    Returns out (..., Hq, Sq, D) in q's dtype and lse (..., Hq, Sq) fp32 = logsumexp(scale * q k^T).
    Differentiable in q, k, v (the backward kernel), also through lse.
    """
    scale = check_inputs(q, k, v, causal, scale)
    return ops.flash_attention_with_lse(q, k, v, causal, scale)


def flash_attention(q, k, v, causal=False, scale=None):
    """Flash attention: softmax(scale * q k^T) v; see :func:`flash_attention_with_lse` for the shapes.
    Returns out (..., Hq, Sq, D) in q's dtype."""
    return flash_attention_with_lse(q, k, v, causal, scale)[0]


# transformers' attention interface: AttentionInterface.register("neuron-fa", transformers_attention)
# (not a name containing "flash": transformers then tries to import a flash-attention package)
from nkihub.kernels.transformers_attention import make_transformers_attention  # noqa: E402

transformers_attention = make_transformers_attention(
    lambda q, k, v, scale, causal: flash_attention(q, k, v, causal=causal, scale=scale),
    name="neuron/flash-attn", causal=True, grouped_heads=True)

from . import layers  # noqa: E402  (kernelize finds the layers here; they use the names above)
