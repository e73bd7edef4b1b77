"""Kernel-backed layers for transformers' ViT: self-attention, MLP, the whole layer, and LayerNorm.

Each ``*_layer(kernel)`` takes a loaded kernel module (in-tree ``kernels.library.<name>`` or one fetched
from a Hub) and returns a stateless ``nn.Module`` class whose ``forward`` reads the weights of the
transformers module it replaces (``kernelize`` binds it there) and calls the kernel's torch-facing
function. Each class says what it can do (``has_backward``, ``can_torch_compile``) and, through
``unsupported_reason(module, mode)``, why it cannot take a given module: the kernel's own argument
checks run on meta tensors of the module's shapes, so an unsupported head dim or dtype is a kernelize
decision, not a crash in the middle of a forward.

Shapes follow transformers 5.x ViT (``ViTAttention`` with ``q_proj/k_proj/v_proj/o_proj``, ``ViTMLP``
with ``fc1/fc2``, ``ViTLayer``): hidden states are ``(batch, seq, hidden)``; attention heads
``(batch, heads, seq, head_dim)``.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from .torch_ops import library_of

_GELU_ACTS = ("gelu",)  # transformers' "gelu" is the exact (erf) GELU, as torch's nn.GELU()


def _seq_len(module) -> int:
    config = getattr(module, "config", None)
    image, patch = getattr(config, "image_size", None), getattr(config, "patch_size", None)
    if isinstance(image, int) and isinstance(patch, int) and patch > 0:
        return (image // patch) ** 2 + 1  # patches and the CLS token
    return 1


def _dry_run(call) -> str | None:
    """Run the kernel's argument checks on meta tensors: the ValueError text, or None when accepted."""
    try:
        with torch.no_grad():
            call()
    except (ValueError, NotImplementedError) as exc:
        return f"the kernel rejects this layer: {exc}"
    return None


def _has_backward(kernel) -> bool:
    explicit = getattr(kernel, "has_backward", None)
    if isinstance(explicit, bool):
        return explicit
    lib = library_of(kernel)
    return any(lib.has_backward(name) for name in lib.registered)


def _meta(*shape, dtype) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


# ---- attention ------------------------------------------------------------------------------------------
def _attend(kernel):
    """``(q, k, v, scale) -> out``, all ``(B, H, S, D)``, from a vit-attn or flash-attn module."""
    if hasattr(kernel, "vit_attention"):
        return lambda q, k, v, scale: kernel.vit_attention(q, k, v, scale=scale)
    if hasattr(kernel, "flash_attention"):
        return lambda q, k, v, scale: kernel.flash_attention(q, k, v, causal=False, scale=scale)
    raise ValueError(f"kernel {kernel.__name__} has neither vit_attention nor flash_attention")


def attention_layer(kernel) -> type[nn.Module]:
    """A replacement for transformers' ``ViTAttention`` running ``kernel``'s attention."""
    attend = _attend(kernel)

    class ViTAttention(nn.Module):
        can_torch_compile = True
        has_backward = _has_backward(kernel)

        @staticmethod
        def unsupported_reason(module, mode) -> str | None:
            from .layers import Mode

            if Mode.TRAINING in mode and module.attention_dropout > 0:
                return f"attention dropout {module.attention_dropout} in training (the kernel has no dropout)"
            h, d, dt = module.num_attention_heads, module.head_dim, module.q_proj.weight.dtype
            q = _meta(1, h, _seq_len(module), d, dtype=dt)
            return _dry_run(lambda: attend(q, q, q, module.scaling))

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

    return ViTAttention


# ---- MLP ------------------------------------------------------------------------------------------------
def mlp_layer(kernel) -> type[nn.Module]:
    """A replacement for transformers' ``ViTMLP`` (fc1, GELU, fc2) running ``kernel.gelu_mlp``."""

    class ViTMLP(nn.Module):
        can_torch_compile = True
        has_backward = _has_backward(kernel)

        @staticmethod
        def unsupported_reason(module, mode) -> str | None:
            if _gelu_reason(module):
                return _gelu_reason(module)
            w1, b1, w2, b2 = module.fc1.weight, module.fc1.bias, module.fc2.weight, module.fc2.bias
            if b1 is None or b2 is None:
                return "fc1/fc2 without bias (the kernel takes both biases)"
            x = _meta(1, _seq_len(module), w1.shape[1], dtype=w1.dtype)
            m = [_meta(*t.shape, dtype=t.dtype) for t in (w1, b1, w2, b2)]
            return _dry_run(lambda: kernel.gelu_mlp(x, *m))

        def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
            return kernel.gelu_mlp(hidden_states, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)

    return ViTMLP


# ---- LayerNorm ------------------------------------------------------------------------------------------
def layer_norm_layer(kernel) -> type[nn.Module]:
    """A replacement for ``torch.nn.LayerNorm`` over the last dim running ``kernel.layer_norm``."""

    class LayerNorm(nn.Module):
        can_torch_compile = True
        has_backward = _has_backward(kernel)

        @staticmethod
        def unsupported_reason(module, mode) -> str | None:
            if len(module.normalized_shape) != 1:
                return f"normalized_shape {tuple(module.normalized_shape)} (the kernel normalises the last dim)"
            if module.weight is None or module.bias is None:
                return "no affine weight/bias (the kernel takes both)"
            w = module.weight
            x = _meta(1, w.shape[0], dtype=w.dtype)
            return _dry_run(lambda: kernel.layer_norm(x, _meta(*w.shape, dtype=w.dtype),
                                                      _meta(*w.shape, dtype=w.dtype), module.eps))

        def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (nn.LayerNorm's name)
            return kernel.layer_norm(input, self.weight, self.bias, self.eps)

    return LayerNorm


# ---- the whole layer --------------------------------------------------------------------------------------
def block_layer(kernel) -> type[nn.Module]:
    """A replacement for transformers' ``ViTLayer`` running ``kernel.vit_block`` (layernorm, attention
    with its projections, residual, layernorm, MLP, residual in one kernel)."""

    class ViTLayer(nn.Module):
        can_torch_compile = True
        has_backward = _has_backward(kernel)

        @staticmethod
        def unsupported_reason(module, mode) -> str | None:
            from .layers import Mode

            if Mode.TRAINING in mode and (module.dropout.p > 0 or module.attention.attention_dropout > 0):
                return "dropout in training (the kernel has no dropout)"
            for reason in (_qkv_bias_reason(module.attention), _gelu_reason(module.mlp)):
                if reason:
                    return reason
            if module.layernorm_before.eps != module.layernorm_after.eps:
                return "the two LayerNorms have different eps (the kernel takes one)"
            params, options = block_args(module)
            w = params[0]
            x = _meta(1, _seq_len(module.attention), w.shape[0], dtype=w.dtype)
            return _dry_run(lambda: kernel.vit_block(x, *(_meta(*p.shape, dtype=p.dtype) for p in params),
                                                     **options))

        def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
            if attention_mask is not None:
                raise ValueError("attention_mask: the kernel-backed ViTLayer takes no mask")
            if self.training and (self.dropout.p > 0 or self.attention.attention_dropout > 0):
                raise ValueError("dropout: the kernel-backed ViTLayer has no dropout; call model.eval()")
            params, options = block_args(self)
            return kernel.vit_block(hidden_states, *params, **options)

    return ViTLayer


def _qkv_bias_reason(attention) -> str | None:  # the fused kernels take the q/k/v biases
    if attention.q_proj.bias is None:
        return "q/k/v projections without bias (qkv_bias=False)"
    return None


def _gelu_reason(mlp) -> str | None:
    act = getattr(getattr(mlp, "config", None), "hidden_act", None)
    return None if act in _GELU_ACTS else f"activation {act!r} (the kernel fuses the exact GELU only)"


def block_args(layer) -> tuple[tuple[torch.Tensor, ...], dict]:
    """``(params, options)`` for ``vit_block(x, *params, **options)`` from a transformers ``ViTLayer``:
    the 16 weight tensors in the kernel's PARAM_NAMES order, ``num_heads`` and the LayerNorm ``eps``."""
    a, m = layer.attention, layer.mlp
    params = (layer.layernorm_before.weight, layer.layernorm_before.bias, a.q_proj.weight, a.q_proj.bias,
              a.k_proj.weight, a.k_proj.bias, a.v_proj.weight, a.v_proj.bias, a.o_proj.weight, a.o_proj.bias,
              layer.layernorm_after.weight, layer.layernorm_after.bias, m.fc1.weight, m.fc1.bias,
              m.fc2.weight, m.fc2.bias)
    return params, dict(num_heads=a.num_attention_heads, eps=layer.layernorm_before.eps)


_FACTORIES = {"ViTAttention": attention_layer, "ViTMLP": mlp_layer, "ViTLayer": block_layer,
              "LayerNorm": layer_norm_layer}


@functools.lru_cache(maxsize=None)
def _cached(kernel, layer_name: str):
    return _FACTORIES[layer_name](kernel)


def layer_for(kernel, layer_name: str) -> type[nn.Module]:
    """The kernel-backed layer class ``layer_name`` bound to ``kernel`` (one class per pair, so
    kernelizing twice, or compiled code, sees the same class)."""
    if layer_name not in _FACTORIES:
        raise ValueError(f"layer_name: no built-in kernel layer {layer_name!r} "
                         f"(built in: {', '.join(sorted(_FACTORIES))}) and the kernel has no `layers`")
    return _cached(kernel, layer_name)
