"""Example inputs and independent torch references for every library kernel: what the main job, the
benchmark suite and the kernel cards measure.

Each ``Case`` builds inputs for one call of a library function at a named size, and a torch reference
for the same math computed in fp32 (independent of the kernel package's own ``reference.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Case:
    """One library function: how to call it, on what, and what it must equal."""

    repo: str                               # Hub repo, e.g. "neuron/vit-attn"
    function: str                           # name of the function in the package
    make: Callable[..., dict]               # make(size, dtype, seed) -> kwargs
    reference: Callable[..., torch.Tensor]  # reference(**kwargs) -> expected output (fp32 math)
    sizes: dict = field(default_factory=dict)   # size name -> size params; "small" is verified
    baseline: Callable | None = None        # baseline(**kwargs): the same math unfused (estimated only)

    def inputs(self, size: str, dtype=torch.bfloat16, seed: int = 0) -> dict:
        """Keyword arguments for one call at ``size`` (a key of ``sizes``)."""
        return self.make(self.sizes[size], dtype, seed)

    def describe(self, size: str) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.sizes[size].items())


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(shape, dtype, g, scale=1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def _f32(kwargs: dict) -> dict:
    return {k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}


# -- attention ----------------------------------------------------------------------------------------
def _qkv(p, dtype, seed):
    g = _gen(seed)
    hk = p.get("HKV", p["H"])
    return {"q": _randn((p["B"], p["H"], p["S"], p["D"]), dtype, g),
            "k": _randn((p["B"], hk, p["S"], p["D"]), dtype, g),
            "v": _randn((p["B"], hk, p["S"], p["D"]), dtype, g)}


def _sdpa(q, k, v, causal=False, scale=None):
    q, k, v = q.float(), k.float(), v.float()
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _flash_make(p, dtype, seed):
    return {**_qkv(p, dtype, seed), "causal": p.get("causal", False)}


# -- dense ----------------------------------------------------------------------------------------------
def _matmul_make(p, dtype, seed):
    g = _gen(seed)
    return {"a": _randn((p["M"], p["K"]), dtype, g), "b": _randn((p["K"], p["N"]), dtype, g)}


def _norm_make(p, dtype, seed, bias=True):
    g = _gen(seed)
    d = {"x": _randn((p["N"], p["D"]), dtype, g), "weight": (1 + 0.1 * torch.randn(p["D"], generator=g)).to(dtype)}
    if bias:
        d["bias"] = (0.1 * torch.randn(p["D"], generator=g)).to(dtype)
    return d


def _rms_ref(x, weight, eps=1e-6):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def _mlp_make(p, dtype, seed):
    g = _gen(seed)
    d, h = p["D"], p["H"]
    return {"x": _randn((p["N"], d), dtype, g),
            "fc1_weight": _randn((h, d), dtype, g, 1 / math.sqrt(d)), "fc1_bias": _randn((h,), dtype, g, 0.1),
            "fc2_weight": _randn((d, h), dtype, g, 1 / math.sqrt(h)), "fc2_bias": _randn((d,), dtype, g, 0.1)}


def _mlp_ref(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    a = _f32(locals())
    return F.linear(F.gelu(F.linear(a["x"], a["fc1_weight"], a["fc1_bias"])), a["fc2_weight"], a["fc2_bias"])


def _unfused_attention(q, k, v):
    from nkihub.kernels.library.attention_baseline import unfused_attention
    return unfused_attention(q, k, v, 1.0 / math.sqrt(q.shape[-1]))


# -- ViT block: a randomly initialised transformers ViTLayer is both the parameters and the reference ----
def _vit_layer_make(p, dtype, seed):
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTLayer

    torch.manual_seed(seed)
    config = ViTConfig(hidden_size=p["D"], num_attention_heads=p["H"], intermediate_size=4 * p["D"],
                       attn_implementation="eager")
    layer = ViTLayer(config).eval()
    return {"layer": layer, "x": _randn((p["B"], p["S"], p["D"]), dtype, _gen(seed))}


def _vit_layer_ref(layer, x):
    with torch.no_grad():
        out = layer.float()(x.float())
    return out[0] if isinstance(out, tuple) else out


def _vit_block_unfused(layer, x):
    from nkihub.kernels.library.vit_block import layer_params
    from nkihub.kernels.library.vit_block.unfused import vit_block_unfused
    params = tuple(p.to(x.dtype).contiguous() for p in layer_params(layer))
    return vit_block_unfused(x, params, layer.attention.config.num_attention_heads, layer.layernorm_before.eps)


CASES: dict[str, Case] = {c.repo: c for c in [
    Case("neuron/vit-attn", "vit_attention", lambda p, dt, s: _qkv(p, dt, s),
         lambda q, k, v: _sdpa(q, k, v),
         {"small": dict(B=1, H=2, S=197, D=64), "vit-b16": dict(B=8, H=12, S=197, D=64)},
         baseline=_unfused_attention),
    Case("neuron/flash-attn", "flash_attention", _flash_make,
         lambda q, k, v, causal: _sdpa(q, k, v, causal),
         {"small": dict(B=1, H=2, HKV=1, S=160, D=64, causal=True),
          "long": dict(B=1, H=8, S=4096, D=128)}),
    Case("neuron/matmul", "matmul", _matmul_make, lambda a, b: a.float() @ b.float(),
         {"small": dict(M=200, K=300, N=600), "large": dict(M=4096, K=8192, N=8192)}),
    Case("neuron/layernorm", "layer_norm", _norm_make,
         lambda x, weight, bias: F.layer_norm(x.float(), x.shape[-1:], weight.float(), bias.float(), 1e-5),
         {"small": dict(N=300, D=768), "large": dict(N=4096, D=4096)}),
    Case("neuron/rmsnorm", "rms_norm", lambda p, dt, s: _norm_make(p, dt, s, bias=False), _rms_ref,
         {"small": dict(N=300, D=768), "large": dict(N=4096, D=4096)}),
    Case("neuron/softmax", "softmax", lambda p, dt, s: {"x": _randn((p["N"], p["D"]), dt, _gen(s))},
         lambda x: torch.softmax(x.float(), dim=-1),
         {"small": dict(N=300, D=1000), "large": dict(N=4096, D=2048)}),
    Case("neuron/gelu-mlp", "gelu_mlp", _mlp_make, _mlp_ref,
         {"small": dict(N=197, D=64, H=256), "vit-b16": dict(N=8 * 197, D=768, H=3072)}),
    Case("neuron/vit-block", "vit_block_from_layer", _vit_layer_make, _vit_layer_ref,
         {"small": dict(B=1, S=197, D=128, H=2), "vit-b16": dict(B=8, S=197, D=768, H=12)},
         baseline=_vit_block_unfused),
]}


def max_rel_error(out: torch.Tensor, expected: torch.Tensor) -> float:
    """max |out - expected| / max |expected| in fp32."""
    out, expected = out.float(), expected.float()
    return float((out - expected).abs().max() / expected.abs().max().clamp_min(1e-6))


# bf16 inputs and outputs carry ~3 significant digits; sums over long rows add a little more.
TOLERANCE = {torch.bfloat16: 3e-2, torch.float32: 2e-3}
