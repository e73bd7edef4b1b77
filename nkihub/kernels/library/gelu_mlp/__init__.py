"""neuron/gelu-mlp: Linear -> GELU -> Linear fused in one NKI kernel; the hidden activations stay on chip.
The GELU is the exact (erf) one by default, or the tanh approximation (SigLIP) or quick GELU (CLIP).

    from nkihub.kernels.library.gelu_mlp import gelu_mlp
    y = gelu_mlp(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias)   # torch Linear layout ([out, in])
    y = gelu_mlp(x, ..., activation="quick_gelu")                 # "gelu", "gelu_tanh", "quick_gelu"
"""
from __future__ import annotations

import torch

from nkihub.kernels.library import common
from nkihub.kernels.torch_ops import OpLibrary

from .nki_kernels import ACTIVATIONS, gelu_mlp_kernel, plan

__version__ = "1.0.0"
__all__ = ["gelu_mlp", "ops", "gelu_mlp_kernel", "ACTIVATION_NAMES"]
ACTIVATION_NAMES = tuple(ACTIVATIONS)

_lib = OpLibrary("gelu_mlp", __version__, __file__)


@_lib.op("gelu_mlp", fake=lambda x, w1, b1, w2, b2, activation="gelu": x.new_empty(x.shape))
def _gelu_mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
              b2: torch.Tensor, activation: str = "gelu") -> torch.Tensor:
    token_block, resident = plan(x.shape[-1], w1.shape[0], x.element_size())
    y = common.run(gelu_mlp_kernel, common.rows(x), w1, b1, w2, b2, token_block, resident, activation)
    return common.unrows(y, x)


ops = _lib.ops


def check_mlp_params(d: int, ref: torch.Tensor, fc1_weight, fc1_bias, fc2_weight, fc2_bias,
                     names=("fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias")) -> None:
    """ValueError unless the two Linear layers map d -> hidden -> d in ref's dtype."""
    n1w, n1b, n2w, n2b = names
    common.check_tensor(n1w, fc1_weight, ndim=2)
    if fc1_weight.shape[1] != d:
        raise ValueError(f"'{n1w}' must be [hidden, {d}] (torch Linear layout [out, in]), got "
                         f"{tuple(fc1_weight.shape)}")
    hidden = fc1_weight.shape[0]
    common.check_tensor(n1b, fc1_bias, ndim=1)
    common.check_shape(n1b, fc1_bias, (hidden,))
    common.check_tensor(n2w, fc2_weight, ndim=2)
    common.check_shape(n2w, fc2_weight, (d, hidden))
    common.check_tensor(n2b, fc2_bias, ndim=1)
    common.check_shape(n2b, fc2_bias, (d,))
    common.check_same_dtype("x", ref, **{n1w: fc1_weight, n1b: fc1_bias, n2w: fc2_weight, n2b: fc2_bias})


def gelu_mlp(x: torch.Tensor, fc1_weight: torch.Tensor, fc1_bias: torch.Tensor, fc2_weight: torch.Tensor,
             fc2_bias: torch.Tensor, activation: str = "gelu") -> torch.Tensor:
    """``fc2(act(fc1(x)))``: ``activation`` "gelu" is the exact (erf) GELU, as ``torch.nn.functional.gelu``'s
    default; "gelu_tanh" its tanh approximation (``approximate="tanh"``); "quick_gelu" x * sigmoid(1.702 x).

    x: [..., D] bfloat16 or float32; fc1_weight [H, D], fc1_bias [H], fc2_weight [D, H], fc2_bias [D] in
    x's dtype. Returns [..., D] in x's dtype. Raises ValueError for bad arguments before any simulation.
    """
    common.check_tensor("x", x)
    check_mlp_params(x.shape[-1], x, fc1_weight, fc1_bias, fc2_weight, fc2_bias)
    return ops.gelu_mlp(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias,
                        common.check_choice("activation", activation, ACTIVATION_NAMES))


from . import layers  # noqa: E402  (kernelize finds the layers here; they use the names above)
