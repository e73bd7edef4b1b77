"""neuron/layernorm: LayerNorm over the last dim as one NKI kernel (bn_stats/bn_aggr statistics).

    from nkihub.kernels.library.layernorm import layer_norm
    y = layer_norm(x, weight, bias, eps=1e-5)     # x [..., F] bf16/fp32; weight, bias [F]
"""
from __future__ import annotations

import torch

from nkihub.kernels.library import common
from nkihub.kernels.torch_ops import OpLibrary

from .nki_kernels import layer_norm_kernel

__version__ = "1.0.0"
__all__ = ["layer_norm", "ops", "layer_norm_kernel"]

_lib = OpLibrary("layernorm", __version__, __file__)


@_lib.op("layer_norm", fake=lambda x, weight, bias, eps: x.new_empty(x.shape))
def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    y = common.run(layer_norm_kernel, common.rows(x), weight, bias, float(eps))
    return common.unrows(y, x)


ops = _lib.ops


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.layer_norm(x, (F,), weight, bias, eps)`` on the NeuronCore.

    x: [..., F] bfloat16 or float32 (leading dims are batch); weight, bias: [F], x's dtype.
    Returns [..., F] in x's dtype. Raises ValueError for bad arguments before any simulation.
    """
    common.check_tensor("x", x)
    f = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        common.check_tensor(name, t, ndim=1)
        common.check_shape(name, t, (f,))
    common.check_same_dtype("x", x, weight=weight, bias=bias)
    eps = common.check_eps("eps", eps)
    return ops.layer_norm(x, weight, bias, eps)

from . import layers  # noqa: E402  (kernelize finds the layers here; they use the names above)
