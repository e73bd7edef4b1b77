"""Layers of neuron/gelu-mlp for ``kernelize`` (Hugging Face kernels' convention): ``ViTMLP`` replaces
transformers' ViTMLP; the class has a ``forward`` only."""
from nkihub.kernels.library.model_layers import mlp_layer

from . import _lib, gelu_mlp

__all__ = ["ViTMLP"]

ViTMLP = mlp_layer(gelu_mlp, has_backward=_lib.has_backward("gelu_mlp"))
