"""Layers of neuron/vit-attn for ``kernelize`` (Hugging Face kernels' convention): ``ViTAttention`` replaces
transformers' ViTAttention; the class has a ``forward`` only."""
from nkihub.kernels.library.model_layers import attention_layer

from . import _lib, vit_attention

__all__ = ["ViTAttention"]

ViTAttention = attention_layer(lambda q, k, v, scale: vit_attention(q, k, v, scale=scale),
                               has_backward=_lib.has_backward("vit_attention"))
