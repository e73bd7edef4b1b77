"""Kernel-backed model layers in Hugging Face kernels' ``layers`` convention.

Each factory takes a kernel's torch-facing function and returns an ``nn.Module`` class with a
``forward`` and the two flags Hugging Face's ``kernelize`` reads (``has_backward``,
``can_torch_compile``), nothing else: no ``__init__``, no state, no other members (their kernelize
refuses a layer that has any). ``kernelize`` binds ``forward`` to the module it replaces, so ``self``
is that module (a transformers ``ViTAttention``, a ``torch.nn.LayerNorm`` ...) and the forward reads its
weights and settings.

Every library kernel's ``layers`` module builds its classes here, and ``kernels publish`` carries this
module into each published package, so the layers need nothing but torch. nkihub's own ``kernelize``
adds its checks on top (:mod:`kernels.vit`).

Shapes follow transformers 5.x ViT (``ViTAttention`` with ``q_proj/k_proj/v_proj/o_proj``, ``ViTMLP``
with ``fc1/fc2``, ``ViTLayer``): hidden states ``(batch, seq, hidden)``, heads ``(batch, heads, seq,
head_dim)``.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn


def _layer(name: str, forward: Callable, has_backward: bool, doc: str) -> type[nn.Module]:
    """An ``nn.Module`` subclass ``name`` with ``forward`` and the two flags, nothing else."""
    forward.__name__ = forward.__qualname__ = "forward"
    return type(name, (nn.Module,), {"forward": forward, "can_torch_compile": True, "has_backward": has_backward,
                                     "__doc__": doc, "__module__": __name__})


def attention_layer(attend: Callable, *, has_backward: bool, name: str = "ViTAttention") -> type[nn.Module]:
    """A replacement for transformers' ``ViTAttention``; ``attend(q, k, v, scale)`` runs the kernel on
    ``(B, H, S, D)`` tensors and returns ``(B, H, S, D)``."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        if attention_mask is not None:
            raise ValueError("attention_mask: the kernel-backed ViTAttention takes no mask")
        if self.training and self.attention_dropout > 0:
            raise ValueError("attention_dropout: the kernel-backed ViTAttention has no dropout; "
                             "call model.eval() or kernelize for Mode.TRAINING with dropout 0")
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        out = attend(q, k, v, self.scaling).transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
        return self.o_proj(out), None

    return _layer(name, forward, has_backward, "transformers ViTAttention (q/k/v/o projections), kernel attention.")


def mlp_layer(gelu_mlp: Callable, *, has_backward: bool, name: str = "ViTMLP") -> type[nn.Module]:
    """A replacement for transformers' ``ViTMLP`` (fc1, exact GELU, fc2) running
    ``gelu_mlp(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias)``."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return gelu_mlp(hidden_states, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)

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
    """``(params, options)`` for ``vit_block(x, *params, **options)`` from a transformers ``ViTLayer``:
    the 16 weight tensors in the kernel's PARAM_NAMES order, ``num_heads`` and the LayerNorm ``eps``."""
    a, m = layer.attention, layer.mlp
    params = (layer.layernorm_before.weight, layer.layernorm_before.bias, a.q_proj.weight, a.q_proj.bias,
              a.k_proj.weight, a.k_proj.bias, a.v_proj.weight, a.v_proj.bias, a.o_proj.weight, a.o_proj.bias,
              layer.layernorm_after.weight, layer.layernorm_after.bias, m.fc1.weight, m.fc1.bias,
              m.fc2.weight, m.fc2.bias)
    return params, dict(num_heads=a.num_attention_heads, eps=layer.layernorm_before.eps)


def block_layer(vit_block: Callable, *, has_backward: bool, name: str = "ViTLayer") -> type[nn.Module]:
    """A replacement for transformers' ``ViTLayer`` running ``vit_block(x, *params, num_heads, eps)``
    (layernorm, attention with its projections, residual, layernorm, MLP, residual in one kernel)."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        if attention_mask is not None:
            raise ValueError("attention_mask: the kernel-backed ViTLayer takes no mask")
        if self.training and (self.dropout.p > 0 or self.attention.attention_dropout > 0):
            raise ValueError("dropout: the kernel-backed ViTLayer has no dropout; call model.eval()")
        params, options = block_args(self)
        return vit_block(hidden_states, *params, **options)

    return _layer(name, forward, has_backward, "transformers ViTLayer as one fused kernel.")
