"""Torch reference of neuron/flash-attn: softmax(scale * q k^T [causal mask]) v and its log-sum-exp,
computed in fp32 (GQA by repeating k/v heads)."""
import math

import torch


def attention_with_lse(q, k, v, causal=False, scale=None):
    """q (..., Hq, Sq, D), k/v (..., Hkv, Sk, D) -> (out (..., Hq, Sq, D) in q's dtype, lse (..., Hq, Sq)
    fp32). causal keeps key j <= query i (top-left aligned, as torch's is_causal)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    group = q.shape[-3] // k.shape[-3]
    kf = k.float().repeat_interleave(group, dim=-3)
    vf = v.float().repeat_interleave(group, dim=-3)
    s = (q.float() @ kf.transpose(-1, -2)) * scale
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    out = torch.softmax(s, dim=-1) @ vf
    return out.to(q.dtype), torch.logsumexp(s, dim=-1)


def attention(q, k, v, causal=False, scale=None):
    """The output of :func:`attention_with_lse`."""
    return attention_with_lse(q, k, v, causal, scale)[0]


def gradients(q, k, v, w, causal=False, scale=None):
    """(dq, dk, dv) in fp32 of sum(attention(q, k, v) * w): the reference the backward kernel answers to."""
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    return torch.autograd.grad((attention(*leaves, causal, scale) * w).sum(), leaves)
