"""Attention over sequences whose heads do not fit SBUF in one kernel call (fp32 or head dims over 128 at
long sequences): the sequence is cut into square blocks and the kernels run per block pair.

Forward: per q block the forward kernel runs against each key block (the diagonal block causal when
``causal``, blocks above it skipped) and returns (o_j, lse_j); lse = logsumexp_j lse_j and
out = sum_j exp(lse_j - lse) o_j, in fp32. Backward: given the whole rows' lse and output, each (q block,
key block) pair is independent (P = exp(S - lse), delta = rowsum(dO * O) - dlse): dq_i = sum_j dq_ij,
dk_j = sum_i dk_ij and dv_j likewise, in fp32. The block is the longest of S / 2, S / 4, ... whose kernels
fit the SBUF of the target in force; shapes that fit whole never come here.
"""
from __future__ import annotations

import functools

import torch

from . import nki_kernels


@functools.lru_cache(maxsize=512)
def _traces(kernel, shapes, consts, target) -> bool:
    args = [torch.empty(s, dtype=d) for s, d in shapes] + list(consts)
    try:
        kernel.trace(*args)   # kept in the kernel's cache when it fits: the allocator decides
    except ValueError as exc:   # nki's KernelRuleError; only the capacity rule means "split it"
        if getattr(exc, "rule", None) == "sbuf-capacity":
            return False
        raise
    return True


def fits(kernel, tensors, consts=()) -> bool:
    """Whether ``kernel(*tensors, *consts)`` fits the SBUF of the target in force (traced once per
    signature and target; the answer is remembered)."""
    import os

    shapes = tuple((tuple(t.shape), t.dtype) for t in tensors)
    return _traces(kernel, shapes, tuple(consts), os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", ""))


def bwd_fits(q, k, causal) -> bool:
    """Whether the backward kernel's tiles fit the target in force for q (B, Hq, Sq, D), k (B, Hkv, Sk, D)."""
    import nki.language as nl

    need = nki_kernels.bwd_sbuf_bytes(q.shape[-2], k.shape[-2], q.shape[-1], q.shape[1] // k.shape[1],
                                      q.element_size(), causal)
    return need <= nl.tile_size.total_available_sbuf_size


def _blocks(n, size):
    return [(s, min(size, n - s)) for s in range(0, n, size)]


def _pairs(sq, sk, size, causal):
    """[(q block, key block, causal for the pair)] of square blocks; causal skips pairs above the diagonal."""
    out = []
    for qb in _blocks(sq, size):
        for kb in _blocks(sk, size):
            if causal and kb[0] > qb[0]:
                continue
            out.append((qb, kb, causal and kb[0] == qb[0]))
    return out


def block_size(n, ok) -> int:
    """The longest of n / 2, n / 4, ... (rounded up to 128 rows) for which ``ok(size)`` holds; ValueError
    when not even 128 fits."""
    size = n
    while size > 128:
        size = max(128, -(-(size // 2) // 128) * 128)
        if ok(size):
            return size
    raise ValueError(f"attention of sequence length {n}: not even 128-row blocks fit the target's SBUF")


def forward(launch, q, k, v, causal, scale):
    """(out, lse) of attention on (B, H, S, D) tensors by blocks (see the module docstring); ``launch``
    runs a kernel (kernels.torch_ops.launch)."""
    sq, sk = q.shape[-2], k.shape[-2]
    size = block_size(max(sq, sk), lambda s: fits(nki_kernels.flash_fwd_kernel, (
        q[..., :min(s, sq), :], k[..., :min(s, sk), :], v[..., :min(s, sk), :]), (causal, scale)))
    out = torch.zeros(q.shape, dtype=torch.float32)
    lse = torch.full(q.shape[:-1], float("-inf"))
    parts = {}
    for (q0, qn), (k0, kn), diag in _pairs(sq, sk, size, causal):
        o_j, l_j = launch(nki_kernels.flash_fwd_kernel, q[..., q0:q0 + qn, :], k[..., k0:k0 + kn, :],
                          v[..., k0:k0 + kn, :], diag, scale)
        parts.setdefault(q0, []).append((o_j.float(), l_j.float()))
    for q0, got in parts.items():
        ls = torch.stack([l_j for _, l_j in got])
        total = torch.logsumexp(ls, dim=0)
        qn = total.shape[-1]
        lse[..., q0:q0 + qn] = total
        out[..., q0:q0 + qn, :] = sum(torch.exp(l_j - total)[..., None] * o_j for o_j, l_j in got)
    return out.to(q.dtype), lse


def whole_or_blocks(launch, kernel, q, k, v, consts, causal, scale, with_lse):
    """``kernel(q, k, v, *consts)`` (vit-attn's or flash-attn's forward on (B, H, S, D)) when its tiles fit
    the target's SBUF, else the blocked forward: (out, lse) when ``with_lse``, else out."""
    if fits(kernel, (q, k, v), consts):
        return launch(kernel, q, k, v, *consts)
    out, lse = forward(launch, q, k, v, causal, scale)
    return (out, lse) if with_lse else out


def backward(launch, q, k, v, out, grad_out, lse, grad_lse, causal, scale):
    """(dq, dk, dv) by blocks (see the module docstring)."""
    sq, sk = q.shape[-2], k.shape[-2]
    size = block_size(max(sq, sk), lambda s: bwd_fits(q[..., :min(s, sq), :], k[..., :min(s, sk), :], causal))
    dq, dk, dv = (torch.zeros(t.shape, dtype=torch.float32) for t in (q, k, v))
    for (q0, qn), (k0, kn), diag in _pairs(sq, sk, size, causal):
        qs, ks = slice(q0, q0 + qn), slice(k0, k0 + kn)
        g_q, g_k, g_v = launch(nki_kernels.flash_bwd_kernel, q[..., qs, :], k[..., ks, :], v[..., ks, :],
                               out[..., qs, :], grad_out[..., qs, :], lse[..., qs], grad_lse[..., qs], diag, scale)
        dq[..., qs, :] += g_q.float()
        dk[..., ks, :] += g_k.float()
        dv[..., ks, :] += g_v.float()
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
