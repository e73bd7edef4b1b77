"""Torch reference of neuron/vit-attn: softmax(scale * q k^T) v in fp32, returned in q's dtype."""
import math

import torch


def vit_attention(q, k, v, scale=None):
    """q, k, v (..., H, S, D) -> (..., H, S, D) in q's dtype; scale defaults to 1/sqrt(D)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)
