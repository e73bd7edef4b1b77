"""Layers of neuron/matmul for ``kernelize`` (Hugging Face kernels' convention): ``Linear`` replaces
torch.nn.Linear; the class has a ``forward`` only."""
from nkihub.kernels.library.model_layers import linear_layer

from . import _lib, matmul

__all__ = ["Linear"]

Linear = linear_layer(matmul, has_backward=_lib.has_backward("matmul"))
