"""neuron/softmax: softmax along one dim as one NKI kernel; rows of any length (longer than SBUF holds
are streamed twice with an online max and sum).

    from nkihub.kernels.library.softmax import softmax
    y = softmax(x, dim=-1)     # x [...] bf16/fp32
"""
from __future__ import annotations

import torch

from nkihub.kernels.library import common
from nkihub.kernels.torch_ops import OpLibrary

from .nki_kernels import softmax_kernel

__version__ = "1.0.0"
__all__ = ["softmax", "ops", "softmax_kernel"]

_lib = OpLibrary("softmax", __version__, __file__)


@_lib.op("softmax", fake=lambda x: x.new_empty(x.shape))
def _softmax(x: torch.Tensor) -> torch.Tensor:
    return common.unrows(common.run(softmax_kernel, common.rows(x)), x)


ops = _lib.ops


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``torch.softmax(x, dim)`` (fp32 math) on the NeuronCore.

    x: any shape with at least one dim, bfloat16 or float32; ``dim`` any valid dim (a non-last dim is
    moved last on the host). Returns x's shape and dtype. Raises ValueError for bad arguments.
    """
    common.check_tensor("x", x)
    if not isinstance(dim, int) or not -x.dim() <= dim < x.dim():
        raise ValueError(f"'dim' must be an int in [{-x.dim()}, {x.dim() - 1}], got {dim!r}")
    dim %= x.dim()
    if dim == x.dim() - 1:
        return ops.softmax(x)
    return ops.softmax(x.movedim(dim, -1)).movedim(-1, dim)

from . import layers  # noqa: E402  (kernelize finds the layers here; they use the names above)
