"""neuron/matmul: C = A @ B for any M, K, N as one blocked NKI kernel (A^T hoisted per row block, B
streamed in large DMAs, 4 x 2 PSUM banks per output block).

    from nkihub.kernels.library.matmul import matmul
    c = matmul(a, b)     # a [..., M, K], b [K, N] or [..., K, N]; bf16/fp32
"""
from __future__ import annotations

import torch

from nkihub.kernels.library import common
from nkihub.kernels.torch_ops import OpLibrary

from .nki_kernels import matmul_kernel

__version__ = "1.0.0"
__all__ = ["matmul", "ops", "matmul_kernel"]

_lib = OpLibrary("matmul", __version__, __file__)


def _fake(a, b):
    return a.new_empty((a.shape[0], b.shape[1]))


@_lib.op("matmul", fake=_fake)
def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return common.run(matmul_kernel, a, b).to(a.device)


ops = _lib.ops


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` on the NeuronCore with fp32 accumulation.

    a: [..., M, K]; b: [K, N] (shared by every batch) or [..., K, N] with a's leading dims; both
    bfloat16 or both float32. Returns [..., M, N] in a's dtype. Raises ValueError for bad arguments.
    """
    common.check_tensor("a", a, min_ndim=2)
    common.check_tensor("b", b, min_ndim=2)
    common.check_same_dtype("a", a, b=b)
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"'b' must have {a.shape[-1]} rows (a's last dim) to multiply a {tuple(a.shape)}, "
                         f"got shape {tuple(b.shape)}")
    if b.dim() == 2:
        rows = a.reshape(-1, a.shape[-1])
        return ops.matmul(rows, b).reshape(*a.shape[:-1], b.shape[-1])
    if b.shape[:-2] != a.shape[:-2]:
        raise ValueError(f"'b' batch dims {tuple(b.shape[:-2])} must equal a's {tuple(a.shape[:-2])}")
    a3 = a.reshape(-1, *a.shape[-2:])
    b3 = b.reshape(-1, *b.shape[-2:])
    out = torch.stack([ops.matmul(x, y) for x, y in zip(a3, b3)])
    return out.reshape(*a.shape[:-1], b.shape[-1])

from . import layers  # noqa: E402  (kernelize finds the layers here; they use the names above)
