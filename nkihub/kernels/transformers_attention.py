"""transformers' attention interface for the attention kernels.

transformers lets a model pick its attention function by name (``config._attn_implementation``);
``AttentionInterface.register(name, fn)`` adds one. :func:`make_transformers_attention` builds such a
function from a kernel's ``(q, k, v, scale) -> out`` so a transformers ViT runs on the kernel:

    import transformers
    from nkihub.kernels.library import vit_attn
    transformers.AttentionInterface.register("neuron-vit-attn", vit_attn.transformers_attention)
    model = transformers.ViTModel(config)   # config built with attn_implementation="neuron-vit-attn"

What the kernel cannot do (an attention mask, dropout, a causal mask for a kernel without one) raises a
ValueError naming the argument; it never falls back to another implementation silently.
"""
from __future__ import annotations

from typing import Callable

import torch


def make_transformers_attention(attend: Callable, *, name: str, causal: bool = False,
                                grouped_heads: bool = False) -> Callable:
    """An attention function with transformers' signature
    ``(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs) -> (out, None)``.

    ``attend(q, k, v, scale, is_causal)`` runs the kernel on ``(B, H, S, D)`` tensors (k, v may have
    fewer heads when ``grouped_heads``); ``causal`` says whether it accepts ``is_causal=True``.
    The output is ``(B, S, H, D)`` as transformers expects; no attention weights are returned.
    """
    def transformers_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                               value: torch.Tensor, attention_mask: torch.Tensor | None,
                               scaling: float | None = None, dropout: float = 0.0, **kwargs):
        if attention_mask is not None:
            raise ValueError(f"attention_mask: {name} takes no attention mask (got shape "
                             f"{tuple(attention_mask.shape)})")
        if dropout:
            raise ValueError(f"dropout: {name} has no attention dropout (got {dropout}); use model.eval()")
        is_causal = bool(kwargs.get("is_causal", getattr(module, "is_causal", False)))
        if is_causal and not causal:
            raise ValueError(f"is_causal: {name} is non-causal attention")
        if key.shape[1] != query.shape[1] and not grouped_heads:
            groups = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        out = attend(query, key, value, scaling, is_causal)
        return out.transpose(1, 2).contiguous(), None

    transformers_attention.__name__ = transformers_attention.__qualname__ = "transformers_attention"
    transformers_attention.__doc__ = f"transformers attention interface running {name}."
    return transformers_attention
