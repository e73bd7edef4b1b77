"""Torch reference of neuron/softmax (fp32 math, result in x's dtype)."""
import torch


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of x along ``dim``."""
    return torch.softmax(x.float(), dim=dim).to(x.dtype)
