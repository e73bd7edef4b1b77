"""Kernel-backed layers for transformers' vision transformers (ViT, DeiT, DINOv2, SigLIP and CLIP vision):
self-attention, MLP, the whole encoder layer, and LayerNorm.

:func:`layer_for` takes a loaded kernel module (in-tree ``kernels.library.<name>`` or one fetched from
a Hub) and returns a stateless ``nn.Module`` class whose ``forward`` reads the weights of the
transformers module it replaces (``kernelize`` binds it there) and calls the kernel's torch-facing
function: the kernel's own ``layers.<name>`` when it ships one (Hugging Face's convention), else one
built by :mod:`kernels.library.model_layers`. Each class says what it can do (``has_backward``,
``can_torch_compile``) and, through ``unsupported_reason(module, mode)`` added here, why it cannot take
a given module: the kernel's own argument checks run on meta tensors of the module's shapes, and its
launches are compiled (not run) for the target in force at those shapes, so an unsupported head dim or
dtype, or tiles that do not fit the target's SBUF, are a kernelize decision, not a crash in the middle
of a forward. A refused encoder layer keeps its own forward and its attention, MLP and LayerNorms are
then considered one by one (the unfused kernels).

Shapes follow transformers 5.x ViT (``ViTAttention`` with ``q_proj/k_proj/v_proj/o_proj``, ``ViTMLP``
with ``fc1/fc2``, ``ViTLayer``) and the other families' equivalents (read through model_layers'
``attention_parts`` / ``layer_parts``): hidden states are ``(batch, seq, hidden)``; attention heads
``(batch, heads, seq, head_dim)``.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from .library import model_layers
from .library.model_layers import activation_kwargs, attention_parts, block_args, layer_parts, mlp_activation
from .torch_ops import compiling, library_of
from .vit_parts import is_vision, seq_len


def _seq_len(module) -> int:
    return seq_len(getattr(module, "config", None))


def _dry_run(call, what: str = "the kernel") -> str | None:
    """Why ``call(empty)`` cannot run, or None when it can. ``call`` runs the kernel's torch function on
    tensors made by ``empty(*shape, dtype=)``: first on meta tensors (the kernel's argument checks), then,
    where launches go to nkihub's simulator, on uninitialised CPU tensors with every launch compiled for
    the target in force, neither run nor costed (``torch_ops.compiling``): a kernel whose tiles
    do not fit that target's SBUF or PSUM at the module's widths is refused here, not in the first
    forward. The compiled kernels stay cached, so a forward of the same shapes traces nothing."""
    try:
        with torch.no_grad():
            call(_meta)
    except (ValueError, NotImplementedError) as exc:
        return f"{what} rejects this layer: {exc}"
    from nkihub.simulator.errors import NkiError
    from nkihub.simulator.targets import get_target

    target = get_target().name
    context = compiling(target)
    if context is None:
        return None
    try:
        with torch.no_grad(), context:
            call(_empty)
    except NkiError as exc:
        return (f"{what} does not compile for {target} at this layer's shapes: "
                f"{exc.message} [rule: {exc.rule}]")
    except (ValueError, NotImplementedError) as exc:
        return f"{what} rejects this layer: {exc}"
    return None


BLOCK_CHECK_IMAGES = 3


def _has_backward(kernel) -> bool:
    explicit = getattr(kernel, "has_backward", None)
    if isinstance(explicit, bool):
        return explicit
    lib = library_of(kernel)
    return any(lib.has_backward(name) for name in lib.registered)


def _meta(*shape, dtype) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def _empty(*shape, dtype) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype)


# ---- what each layer cannot take (nkihub's kernelize asks before replacing) -------------------------------
def _attention_reason(kernel, module, mode) -> str | None:
    from .layers import Mode

    if not is_vision(module):
        return "not an image encoder's attention (text towers take causal or padding masks)"
    p = attention_parts(module)
    if Mode.TRAINING in mode and p.dropout > 0:
        return f"attention dropout {p.dropout} in training (the kernel has no dropout)"
    attend = _attend(kernel)

    def call(empty):
        q = empty(1, p.heads, _seq_len(module), p.head_dim, dtype=p.q.weight.dtype)
        attend(q, q, q, p.scale)

    return _dry_run(call)


def _mlp_reason(kernel, module, mode) -> str | None:
    if _gelu_reason(module):
        return _gelu_reason(module)
    w1, b1, w2, b2 = module.fc1.weight, module.fc1.bias, module.fc2.weight, module.fc2.bias
    if b1 is None or b2 is None:
        return "fc1/fc2 without bias (the kernel takes both biases)"

    def call(empty):
        x = empty(1, _seq_len(module), w1.shape[1], dtype=w1.dtype)
        kernel.gelu_mlp(x, *(empty(*t.shape, dtype=t.dtype) for t in (w1, b1, w2, b2)), **activation_kwargs(module))

    return _dry_run(call)


def _layer_norm_reason(kernel, module, mode) -> str | None:
    if len(module.normalized_shape) != 1:
        return f"normalized_shape {tuple(module.normalized_shape)} (the kernel normalises the last dim)"
    if module.weight is None or module.bias is None:
        return "no affine weight/bias (the kernel takes both)"
    w = module.weight

    def call(empty):
        kernel.layer_norm(empty(1, w.shape[0], dtype=w.dtype), empty(*w.shape, dtype=w.dtype),
                          empty(*w.shape, dtype=w.dtype), module.eps)

    return _dry_run(call)


def _block_reason(kernel, module, mode) -> str | None:
    from .layers import Mode

    parts = layer_parts(module)
    if not is_vision(parts.attention):
        return "not an image encoder's layer (text towers take causal or padding masks)"
    if Mode.TRAINING in mode and (parts.dropout > 0 or attention_parts(parts.attention).dropout > 0):
        return "dropout in training (the kernel has no dropout)"
    for reason in (_qkv_bias_reason(parts.attention), _gelu_reason(parts.mlp)):
        if reason:
            return reason
    if parts.ln1.eps != parts.ln2.eps:
        return "the two LayerNorms have different eps (the kernel takes one)"
    params, options = block_args(module)
    w = params[0]

    def call(empty):
        # three images: the fused kernel pipelines three at a time, so its SBUF peak is reached
        x = empty(BLOCK_CHECK_IMAGES, _seq_len(parts.attention), w.shape[0], dtype=w.dtype)
        kernel.vit_block(x, *(empty(*p.shape, dtype=p.dtype) for p in params), **options)

    return _dry_run(call, "the fused layer kernel")


def _qkv_bias_reason(attention) -> str | None:  # the fused kernels take the q/k/v biases
    if attention_parts(attention).q.bias is None:
        return "q/k/v projections without bias (qkv_bias=False)"
    return None


def _gelu_reason(mlp) -> str | None:
    if not hasattr(mlp, "fc1"):
        return f"{type(mlp).__name__} is not fc1 -> GELU -> fc2 (the kernels fuse that MLP only)"
    if mlp_activation(mlp) is None:
        act = getattr(getattr(mlp, "config", None), "hidden_act", None)
        return f"activation {act!r} (the kernels fuse the exact GELU, its tanh approximation and quick GELU)"
    return None


# ---- layers: the kernel's own (its ``layers`` module), or built here for kernels without one -------------
def _attend(kernel):
    """``(q, k, v, scale) -> out``, all ``(B, H, S, D)``, from a vit-attn or flash-attn module."""
    if hasattr(kernel, "vit_attention"):
        return lambda q, k, v, scale: kernel.vit_attention(q, k, v, scale=scale)
    if hasattr(kernel, "flash_attention"):
        return lambda q, k, v, scale: kernel.flash_attention(q, k, v, causal=False, scale=scale)
    raise ValueError(f"kernel {kernel.__name__} has neither vit_attention nor flash_attention")


def attention_layer(kernel) -> type[nn.Module]:
    """A replacement for a vision transformer's self-attention running ``kernel``'s attention."""
    return model_layers.attention_layer(_attend(kernel), has_backward=_has_backward(kernel))


def mlp_layer(kernel) -> type[nn.Module]:
    """A replacement for transformers' ``ViTMLP`` (fc1, GELU, fc2) running ``kernel.gelu_mlp``."""
    return model_layers.mlp_layer(kernel.gelu_mlp, has_backward=_has_backward(kernel))


def layer_norm_layer(kernel) -> type[nn.Module]:
    """A replacement for ``torch.nn.LayerNorm`` over the last dim running ``kernel.layer_norm``."""
    return model_layers.layer_norm_layer(kernel.layer_norm, has_backward=_has_backward(kernel))


def block_layer(kernel) -> type[nn.Module]:
    """A replacement for transformers' ``ViTLayer`` running ``kernel.vit_block``."""
    return model_layers.block_layer(kernel.vit_block, has_backward=_has_backward(kernel))


_FACTORIES = {"ViTAttention": (attention_layer, _attention_reason), "ViTMLP": (mlp_layer, _mlp_reason),
              "ViTLayer": (block_layer, _block_reason), "LayerNorm": (layer_norm_layer, _layer_norm_reason)}


def knows(layer_name: str) -> bool:
    """True when nkihub has checks (and, for kernels without ``layers``, a layer) for ``layer_name``."""
    return layer_name in _FACTORIES


@functools.lru_cache(maxsize=None)
def _cached(kernel, layer_name: str):
    factory, reason = _FACTORIES[layer_name]
    base = getattr(getattr(kernel, "layers", None), layer_name, None) or factory(kernel)

    def unsupported_reason(module, mode) -> str | None:
        return reason(kernel, module, mode)

    # the kernel's own forward, with nkihub's question "can you take this module?" beside it
    return type(base.__name__, (base,), {"unsupported_reason": staticmethod(unsupported_reason),
                                         "__doc__": base.__doc__, "__module__": base.__module__})


def layer_for(kernel, layer_name: str) -> type[nn.Module]:
    """The kernel-backed layer class ``layer_name`` for ``kernel``: the kernel's own ``layers.<name>``
    when it has one, else one built here, with an ``unsupported_reason(module, mode)`` check added (one
    class per pair, so kernelizing twice, or compiled code, sees the same class)."""
    if layer_name not in _FACTORIES:
        raise ValueError(f"layer_name: no built-in kernel layer {layer_name!r} "
                         f"(built in: {', '.join(sorted(_FACTORIES))}) and the kernel has no `layers`")
    return _cached(kernel, layer_name)
