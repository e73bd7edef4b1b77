"""Kernel-backed model layers in Hugging Face kernels' ``layers`` convention.

Each factory takes a kernel's torch-facing function and returns an ``nn.Module`` class with a
``forward`` and the two flags Hugging Face's ``kernelize`` reads (``has_backward``,
``can_torch_compile``), nothing else: no ``__init__``, no state, no other members (their kernelize
refuses a layer that has any). ``kernelize`` binds ``forward`` to the module it replaces, so ``self``
is that module (a transformers ``ViTAttention``, a ``torch.nn.LayerNorm`` ...) and the forward reads its
weights and settings.

Every library kernel's ``layers`` module builds its classes here, and ``nkihub publish`` carries this
module into each published package, so the layers need nothing but torch. nkihub's own ``kernelize``
adds its checks on top (:mod:`kernels.vit`).

Shapes follow transformers 5.x ViT (``ViTAttention`` with ``q_proj/k_proj/v_proj/o_proj``, ``ViTMLP``
with ``fc1/fc2``, ``ViTLayer``): hidden states ``(batch, seq, hidden)``, heads ``(batch, heads, seq,
head_dim)``. The other vision-transformer families (DeiT, DINOv2, SigLIP and CLIP vision; see
``kernels.vit_parts``) name their parts differently: ``attention_parts`` and ``layer_parts`` read any of
them, so one class per role serves every family.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


# transformers' hidden_act -> the GELU the kernels fuse (gelu_mlp's activations)
GELUS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "quick_gelu": "quick_gelu"}


@dataclass(frozen=True)
class AttentionParts:
    """A self-attention module's projections (torch Linears), head count and size, softmax scale and
    attention dropout probability."""

    q: nn.Module
    k: nn.Module
    v: nn.Module
    o: nn.Module
    heads: int
    head_dim: int
    scale: float
    dropout: float


@dataclass(frozen=True)
class LayerParts:
    """An encoder layer's LayerNorms, attention and MLP modules, its layer scales (DINOv2's per-channel
    ``lambda1`` tensors, else None) and its residual dropout (or drop-path) probability."""

    ln1: nn.Module
    attention: nn.Module
    ln2: nn.Module
    mlp: nn.Module
    scale1: torch.Tensor | None
    scale2: torch.Tensor | None
    dropout: float


def attention_parts(m) -> AttentionParts:
    """The parts of a ViT/DeiT/DINOv2 (``o_proj``, ``num_attention_heads``, ``scaling``) or SigLIP/CLIP
    (``out_proj``, ``num_heads``, ``scale``) self-attention module."""
    o = getattr(m, "o_proj", None) or m.out_proj
    heads = getattr(m, "num_attention_heads", None) or m.num_heads
    scale = getattr(m, "scaling", None) or m.scale
    dropout = getattr(m, "attention_dropout", None)
    return AttentionParts(m.q_proj, m.k_proj, m.v_proj, o, heads, m.head_dim, float(scale),
                          float(m.dropout if dropout is None else dropout))


def _p(module) -> float:
    return float(getattr(module, "p", getattr(module, "drop_prob", 0.0)) or 0.0)


def layer_parts(layer) -> LayerParts:
    """The parts of a ViT/DeiT (``layernorm_before``), DINOv2 (``norm1``, layer scales, drop path) or
    SigLIP/CLIP (``layer_norm1``, ``self_attn``) encoder layer."""
    if hasattr(layer, "layernorm_before"):
        return LayerParts(layer.layernorm_before, layer.attention, layer.layernorm_after, layer.mlp, None, None,
                          _p(layer.dropout))
    if hasattr(layer, "norm1"):
        return LayerParts(layer.norm1, layer.attention, layer.norm2, layer.mlp, layer.layer_scale1.lambda1,
                          layer.layer_scale2.lambda1, _p(layer.drop_path))
    return LayerParts(layer.layer_norm1, layer.self_attn, layer.layer_norm2, layer.mlp, None, None, 0.0)


def mlp_activation(mlp) -> str | None:
    """The gelu_mlp activation name of a family's MLP (fc1, act, fc2), or None when it is not a GELU the
    kernels fuse."""
    act = getattr(getattr(mlp, "config", None), "hidden_act", None)
    return GELUS.get(act) if isinstance(act, str) else None


def activation_kwargs(mlp) -> dict:
    """gelu_mlp's / vit_block's ``activation`` keyword for the MLP's GELU (none for the exact GELU, so
    kernels from before activations existed keep working for ViT)."""
    act = mlp_activation(mlp)
    return {} if act in ("gelu", None) else {"activation": act}


def _layer(name: str, forward: Callable, has_backward: bool, doc: str) -> type[nn.Module]:
    """An ``nn.Module`` subclass ``name`` with ``forward`` and the two flags, nothing else."""
    forward.__name__ = forward.__qualname__ = "forward"
    return type(name, (nn.Module,), {"forward": forward, "can_torch_compile": True, "has_backward": has_backward,
                                     "__doc__": doc, "__module__": __name__})


def attention_layer(attend: Callable, *, has_backward: bool, name: str = "ViTAttention") -> type[nn.Module]:
    """A replacement for a vision transformer's self-attention (``ViTAttention``, ``SiglipAttention``, ...);
    ``attend(q, k, v, scale)`` runs the kernel on ``(B, H, S, D)`` tensors and returns ``(B, H, S, D)``."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        if attention_mask is not None:
            raise ValueError("attention_mask: the kernel-backed attention takes no mask")
        p = attention_parts(self)
        if self.training and p.dropout > 0:
            raise ValueError("attention_dropout: the kernel-backed attention has no dropout; "
                             "call model.eval() or kernelize for Mode.TRAINING with dropout 0")
        shape = (*hidden_states.shape[:-1], -1, p.head_dim)
        q = p.q(hidden_states).view(shape).transpose(1, 2)
        k = p.k(hidden_states).view(shape).transpose(1, 2)
        v = p.v(hidden_states).view(shape).transpose(1, 2)
        out = attend(q, k, v, p.scale).transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
        return p.o(out), None

    return _layer(name, forward, has_backward, "transformers ViTAttention (q/k/v/o projections), kernel attention.")


def mlp_layer(gelu_mlp: Callable, *, has_backward: bool, name: str = "ViTMLP") -> type[nn.Module]:
    """A replacement for a vision transformer's MLP (fc1, a GELU, fc2: ``ViTMLP``, ``SiglipMLP``, ...)
    running ``gelu_mlp(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias, activation=)`` with the family's
    GELU."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return gelu_mlp(hidden_states, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias,
                        **activation_kwargs(self))

    return _layer(name, forward, has_backward, "transformers ViTMLP (fc1, GELU, fc2) as one kernel.")


def layer_norm_layer(layer_norm: Callable, *, has_backward: bool, name: str = "LayerNorm") -> type[nn.Module]:
    """A replacement for ``torch.nn.LayerNorm`` over the last dim running
    ``layer_norm(x, weight, bias, eps)``."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (nn.LayerNorm's name)
        return layer_norm(input, self.weight, self.bias, self.eps)

    return _layer(name, forward, has_backward, "torch.nn.LayerNorm (last dim, affine) as a kernel.")


def rms_norm_layer(rms_norm: Callable, *, has_backward: bool, name: str = "RMSNorm") -> type[nn.Module]:
    """A replacement for an RMSNorm module (``torch.nn.RMSNorm``, or transformers' ``LlamaRMSNorm``-style
    with ``weight`` and ``variance_epsilon``) running ``rms_norm(x, weight, eps)``."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        eps = getattr(self, "variance_epsilon", getattr(self, "eps", None))
        if eps is None:  # torch.nn.RMSNorm(eps=None) uses the dtype's machine epsilon
            eps = torch.finfo(hidden_states.dtype).eps
        return rms_norm(hidden_states, self.weight.to(hidden_states.dtype), eps)

    return _layer(name, forward, has_backward, "RMSNorm (weight, eps) as a kernel.")


def softmax_layer(softmax: Callable, *, has_backward: bool, name: str = "Softmax") -> type[nn.Module]:
    """A replacement for ``torch.nn.Softmax`` running ``softmax(x, dim)``."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (nn.Softmax's name)
        return softmax(input, -1 if self.dim is None else self.dim)

    return _layer(name, forward, has_backward, "torch.nn.Softmax as a kernel.")


def linear_layer(matmul: Callable, *, has_backward: bool, name: str = "Linear") -> type[nn.Module]:
    """A replacement for ``torch.nn.Linear`` running ``matmul(x, weight^T)`` (the bias added by torch)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (nn.Linear's name)
        out = matmul(input, self.weight.t())
        return out if self.bias is None else out + self.bias

    return _layer(name, forward, has_backward, "torch.nn.Linear with the matmul as a kernel.")


def block_args(layer) -> tuple[tuple[torch.Tensor, ...], dict]:
    """``(params, options)`` for ``vit_block(x, *params, **options)`` from a family's encoder layer: the 16
    weight tensors in the kernel's PARAM_NAMES order (DINOv2's layer scales folded into o_proj and fc2:
    lambda * (W x + b) = (lambda W) x + lambda b), ``num_heads``, the LayerNorm ``eps`` and, for a GELU
    other than the exact one, ``activation``."""
    parts = layer_parts(layer)
    a, m = attention_parts(parts.attention), parts.mlp
    o_w, o_b, fc2_w, fc2_b = a.o.weight, a.o.bias, m.fc2.weight, m.fc2.bias
    if parts.scale1 is not None:
        o_w, o_b = o_w * parts.scale1[:, None], o_b * parts.scale1
        fc2_w, fc2_b = fc2_w * parts.scale2[:, None], fc2_b * parts.scale2
    params = (parts.ln1.weight, parts.ln1.bias, a.q.weight, a.q.bias, a.k.weight, a.k.bias, a.v.weight, a.v.bias,
              o_w, o_b, parts.ln2.weight, parts.ln2.bias, m.fc1.weight, m.fc1.bias, fc2_w, fc2_b)
    return params, dict(num_heads=a.heads, eps=parts.ln1.eps, **activation_kwargs(m))


def block_layer(vit_block: Callable, *, has_backward: bool, name: str = "ViTLayer") -> type[nn.Module]:
    """A replacement for a vision transformer's encoder layer (``ViTLayer``, ``Dinov2Layer``,
    ``SiglipEncoderLayer``, ...) running ``vit_block(x, *params, num_heads, eps, activation)`` (layernorm,
    attention with its projections, residual, layernorm, MLP, residual in one kernel)."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        if attention_mask is not None:
            raise ValueError("attention_mask: the kernel-backed encoder layer takes no mask")
        parts = layer_parts(self)
        if self.training and (parts.dropout > 0 or attention_parts(parts.attention).dropout > 0):
            raise ValueError("dropout: the kernel-backed encoder layer has no dropout; call model.eval()")
        params, options = block_args(self)
        return vit_block(hidden_states, *params, **options)

    return _layer(name, forward, has_backward, "transformers ViTLayer as one fused kernel.")
