"""Torch reference of neuron/gelu-mlp (fp32 math, result in x's dtype)."""
import torch
import torch.nn.functional as F

ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": lambda h: F.gelu(h, approximate="tanh"),
               "quick_gelu": lambda h: h * torch.sigmoid(1.702 * h)}


def gelu_mlp(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias, activation="gelu") -> torch.Tensor:
    """fc2(act(fc1(x))) with torch Linear weights ([out, in]); ``activation`` "gelu" (exact), "gelu_tanh"
    or "quick_gelu"."""
    h = ACTIVATIONS[activation](F.linear(x.float(), fc1_weight.float(), fc1_bias.float()))
    return F.linear(h, fc2_weight.float(), fc2_bias.float()).to(x.dtype)
