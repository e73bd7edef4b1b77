"""Torch reference of neuron/gelu-mlp (fp32 math, result in x's dtype)."""
import torch
import torch.nn.functional as F


def gelu_mlp(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias) -> torch.Tensor:
    """fc2(gelu(fc1(x))) with torch Linear weights ([out, in]) and exact GELU."""
    h = F.gelu(F.linear(x.float(), fc1_weight.float(), fc1_bias.float()))
    return F.linear(h, fc2_weight.float(), fc2_bias.float()).to(x.dtype)
