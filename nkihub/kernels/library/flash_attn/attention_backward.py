"""The attention backward launcher shared by neuron/flash-attn's and neuron/vit-attn's backward ops.

It is a module of its own (not part of flash-attn's ``__init__``) so vit-attn's published package can
carry it, with the backward kernel it launches, without registering flash-attn's ops.
"""
from nkihub.kernels.library import common
from nkihub.kernels.torch_ops import launch

from . import blocks, nki_kernels


def backward(q, k, v, out, grad_out, lse, grad_lse, causal: bool, scale: float):
    """(dq, dk, dv) of attention from the forward's q/k/v (..., H, S, D), its output, the output's
    gradient, lse (..., Hq, Sq) fp32 and lse's gradient, with the backward kernel. vit-attn's backward
    runs through here too."""
    def rows(t):
        return t.detach().reshape(-1, *t.shape[-2:])
    h = common.heads
    args = (h(q), h(k), h(v), h(out), h(grad_out.to(q.dtype)), rows(lse), rows(grad_lse.float()), causal, scale)
    if blocks.bwd_fits(args[0], args[1], causal):
        dq, dk, dv = launch(nki_kernels.flash_bwd_kernel, *args)
    else:   # a head too long for SBUF in one call: square blocks, dQ/dK/dV summed in fp32
        dq, dk, dv = blocks.backward(launch, *args)
    return dq.reshape(q.shape).to(q.device), dk.reshape(k.shape).to(k.device), dv.reshape(v.shape).to(v.device)
