"""``nkihub benchmark neuron/vit-attn``: cost-model estimate of the fused kernel at ViT-B/16 shapes."""
import math

import torch

import nki

from .nki_kernels import vit_attention_kernel


def main(target="trn2"):
    """Print the estimated latency, MFU and bottleneck engine for B=8, H=12, S=197, D=64 bf16."""
    shape = (8, 12, 197, 64)
    q = torch.zeros(shape, dtype=torch.bfloat16)
    rep = nki.profile(vit_attention_kernel, q, q, q, 1 / math.sqrt(shape[-1]), target=target)
    print(f"vit_attention {shape} bf16 on {target}: {rep.latency_s * 1e6:.1f} us (estimate), "
          f"MFU {rep.mfu:.1%}, bottleneck {rep.bottleneck}")
    return 0
