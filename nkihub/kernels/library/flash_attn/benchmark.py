"""``nkihub benchmark neuron/flash-attn``: cost-model estimate of the forward kernel."""
import math

import torch

import nki

from .nki_kernels import flash_fwd_kernel


def main(target="trn2", shape=(1, 2, 2048, 128)):
    """Print the estimated latency, MFU and bottleneck engine of the non-causal bf16 forward."""
    q = torch.zeros(shape, dtype=torch.bfloat16)
    rep = nki.profile(flash_fwd_kernel, q, q, q, False, 1 / math.sqrt(shape[-1]), target=target)
    print(f"flash_attention {shape} bf16 on {target}: {rep.latency_s * 1e6:.1f} us (estimate), "
          f"MFU {rep.mfu:.1%}, bottleneck {rep.bottleneck}")
    return 0
