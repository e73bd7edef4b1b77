"""Torch reference of neuron/matmul (fp32 accumulation, result in a's dtype)."""
import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [..., M, K] @ b [K, N] or [..., K, N]."""
    return (a.float() @ b.float()).to(a.dtype)
