"""Layers of neuron/vit-block for ``kernelize`` (Hugging Face kernels' convention): ``ViTLayer`` replaces
transformers' ViTLayer; the class has a ``forward`` only."""
from nkihub.kernels.library.model_layers import block_layer

from . import _lib, vit_block

__all__ = ["ViTLayer"]

ViTLayer = block_layer(vit_block, has_backward=_lib.has_backward("vit_block"))
