"""Layers of neuron/layernorm for ``kernelize`` (Hugging Face kernels' convention): ``LayerNorm`` replaces
torch.nn.LayerNorm; the class has a ``forward`` only."""
from nkihub.kernels.library.model_layers import layer_norm_layer

from . import _lib, layer_norm

__all__ = ["LayerNorm"]

LayerNorm = layer_norm_layer(layer_norm, has_backward=_lib.has_backward("layer_norm"))
