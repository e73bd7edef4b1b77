"""Layers of neuron/flash-attn for ``kernelize`` (Hugging Face kernels' convention): ``ViTAttention`` replaces
transformers' ViTAttention; the class has a ``forward`` only."""
from nkihub.kernels.library.model_layers import attention_layer

from . import _lib, flash_attention

__all__ = ["ViTAttention"]

ViTAttention = attention_layer(lambda q, k, v, scale: flash_attention(q, k, v, causal=False, scale=scale),
                               has_backward=_lib.has_backward("flash_attention_with_lse"))
