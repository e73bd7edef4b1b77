"""neuron/vit-block: one transformers ViTLayer (pre-norm attention + GELU MLP, both residual) fused in
one NKI kernel; activations stay on chip per image and the weights stay in SBUF across the batch.

    from nkihub.kernels.library.vit_block import vit_block, vit_block_from_layer
    y = vit_block(x, *params, num_heads=12, eps=1e-12)    # params in PARAM_NAMES order
    y = vit_block_from_layer(layer, x)                    # a transformers ViTLayer
"""
from __future__ import annotations

import torch

from nkihub.kernels.library import common
from nkihub.kernels.library.gelu_mlp.nki_kernels import ACTIVATIONS
from nkihub.kernels.torch_ops import OpLibrary

from .nki_kernels import vit_block_kernel

__version__ = "1.0.0"
__all__ = ["vit_block", "vit_block_from_layer", "ops", "vit_block_kernel", "PARAM_NAMES", "layer_params"]

# Argument names of vit_block after x, and the ViTLayer attribute each comes from.
PARAM_NAMES = ("ln1_weight", "ln1_bias", "q_weight", "q_bias", "k_weight", "k_bias", "v_weight", "v_bias",
               "o_weight", "o_bias", "ln2_weight", "ln2_bias", "fc1_weight", "fc1_bias", "fc2_weight",
               "fc2_bias")
_LAYER_ATTRS = ("layernorm_before.weight", "layernorm_before.bias", "attention.q_proj.weight",
                "attention.q_proj.bias", "attention.k_proj.weight", "attention.k_proj.bias",
                "attention.v_proj.weight", "attention.v_proj.bias", "attention.o_proj.weight",
                "attention.o_proj.bias", "layernorm_after.weight", "layernorm_after.bias", "mlp.fc1.weight",
                "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias")
MAX_SEQ = 2048
MAX_HEAD_DIM = 256

_lib = OpLibrary("vit_block", __version__, __file__)


def _fake(x, *rest):
    return x.new_empty(x.shape)


@_lib.op("vit_block", fake=_fake)
def _vit_block(x: torch.Tensor, ln1_weight: torch.Tensor, ln1_bias: torch.Tensor, q_weight: torch.Tensor,
               q_bias: torch.Tensor, k_weight: torch.Tensor, k_bias: torch.Tensor, v_weight: torch.Tensor,
               v_bias: torch.Tensor, o_weight: torch.Tensor, o_bias: torch.Tensor, ln2_weight: torch.Tensor,
               ln2_bias: torch.Tensor, fc1_weight: torch.Tensor, fc1_bias: torch.Tensor,
               fc2_weight: torch.Tensor, fc2_bias: torch.Tensor, num_heads: int, eps: float,
               activation: str = "gelu") -> torch.Tensor:
    params = (ln1_weight, ln1_bias, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight, o_bias,
              ln2_weight, ln2_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias)
    x3 = x.detach().reshape(-1, *x.shape[-2:]).contiguous()
    # The kernel chooses resident weights and the image pipeline for the SBUF of the target it is traced for.
    y = common.run(vit_block_kernel, x3, *params, int(num_heads), float(eps), None, None, activation)
    return y.reshape(x.shape).to(x.device)


ops = _lib.ops


def check_params(x: torch.Tensor, params, num_heads) -> None:
    """ValueError naming the first argument of vit_block that is wrong."""
    common.check_tensor("x", x, min_ndim=2)
    s, d = x.shape[-2], x.shape[-1]
    if s > MAX_SEQ:
        raise ValueError(f"'x' has {s} tokens; vit_block supports at most {MAX_SEQ}")
    if len(params) != len(PARAM_NAMES):
        raise ValueError(f"vit_block takes {len(PARAM_NAMES)} parameter tensors ({', '.join(PARAM_NAMES)}), "
                         f"got {len(params)}")
    if not isinstance(num_heads, int) or num_heads <= 0 or d % num_heads:
        raise ValueError(f"'num_heads' must be a positive int dividing the hidden size {d}, got {num_heads!r}")
    if d // num_heads > MAX_HEAD_DIM:
        raise ValueError(f"'num_heads' gives head dim {d // num_heads}; supported head dims: 1 to {MAX_HEAD_DIM}")
    named = dict(zip(PARAM_NAMES, params))
    hidden = named["fc1_weight"].shape[0] if isinstance(named["fc1_weight"], torch.Tensor) and \
        named["fc1_weight"].dim() == 2 else None
    shapes = {"ln1_weight": (d,), "ln1_bias": (d,), "q_weight": (d, d), "q_bias": (d,), "k_weight": (d, d),
              "k_bias": (d,), "v_weight": (d, d), "v_bias": (d,), "o_weight": (d, d), "o_bias": (d,),
              "ln2_weight": (d,), "ln2_bias": (d,), "fc1_weight": (hidden, d), "fc1_bias": (hidden,),
              "fc2_weight": (d, hidden), "fc2_bias": (d,)}
    for name in PARAM_NAMES:
        common.check_tensor(name, named[name], ndim=len(shapes[name]))
        common.check_shape(name, named[name], shapes[name])
    common.check_same_dtype("x", x, **named)


def vit_block(x: torch.Tensor, *params: torch.Tensor, num_heads: int, eps: float = 1e-12,
              activation: str = "gelu") -> torch.Tensor:
    """A transformers ViTLayer forward (eval mode) on the NeuronCore (and, with their parameters mapped,
    DeiT, DINOv2, SigLIP and CLIP vision layers: see kernels.vit).

    x: [..., S, D] bfloat16 or float32 (S <= 2048; leading dims are images); params: the 16 tensors of
    PARAM_NAMES in x's dtype, Linear weights in torch layout ([out, in]); ``num_heads`` with head dim
    D / num_heads from 1 to 256; ``eps`` of both LayerNorms; ``activation`` the MLP's GELU ("gelu" exact,
    "gelu_tanh", "quick_gelu"). Returns x's shape and dtype.
    Raises ValueError for bad arguments before any simulation.
    """
    check_params(x, params, num_heads)
    eps = common.check_eps("eps", eps)
    return ops.vit_block(x, *params, num_heads, eps, common.check_choice("activation", activation, tuple(ACTIVATIONS)))


def layer_params(layer) -> tuple:
    """The 16 parameter tensors of a transformers ViTLayer in PARAM_NAMES order."""
    out = []
    for path in _LAYER_ATTRS:
        obj = layer
        for part in path.split("."):
            obj = getattr(obj, part)
        out.append(obj.detach())
    return tuple(out)


def vit_block_from_layer(layer, x: torch.Tensor) -> torch.Tensor:
    """Run vit_block with the parameters, head count and LayerNorm eps of a transformers ViTLayer (its
    parameters are cast to x's dtype)."""
    params = tuple(p.to(x.dtype).contiguous() for p in layer_params(layer))
    return vit_block(x, *params, num_heads=layer.attention.config.num_attention_heads,
                     eps=layer.layernorm_before.eps)

from . import layers  # noqa: E402  (kernelize finds the layers here; they use the names above)
