"""neuron/rmsnorm: RMSNorm over the last dim as one NKI kernel.

    from nkihub.kernels.library.rmsnorm import rms_norm
    y = rms_norm(x, weight, eps=1e-6)     # x [..., F] bf16/fp32; weight [F]
"""
from __future__ import annotations

import torch

from nkihub.kernels.library import common
from nkihub.kernels.torch_ops import OpLibrary

from .nki_kernels import rms_norm_kernel

__version__ = "1.0.0"
__all__ = ["rms_norm", "ops", "rms_norm_kernel"]

_lib = OpLibrary("rmsnorm", __version__, __file__)


@_lib.op("rms_norm", fake=lambda x, weight, eps: x.new_empty(x.shape))
def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return common.unrows(common.run(rms_norm_kernel, common.rows(x), weight, float(eps)), x)


ops = _lib.ops


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` (fp32 math) on the NeuronCore.

    x: [..., F] bfloat16 or float32; weight: [F], x's dtype. Returns [..., F] in x's dtype.
    Raises ValueError for bad arguments before any simulation.
    """
    common.check_tensor("x", x)
    common.check_tensor("weight", weight, ndim=1)
    common.check_shape("weight", weight, (x.shape[-1],))
    common.check_same_dtype("x", x, weight=weight)
    eps = common.check_eps("eps", eps)
    return ops.rms_norm(x, weight, eps)

from . import layers  # noqa: E402  (kernelize finds the layers here; they use the names above)
