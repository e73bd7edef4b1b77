"""Layers of neuron/softmax for ``kernelize`` (Hugging Face kernels' convention): ``Softmax`` replaces
torch.nn.Softmax; the class has a ``forward`` only."""
from nkihub.kernels.library.model_layers import softmax_layer

from . import _lib, softmax

__all__ = ["Softmax"]

Softmax = softmax_layer(softmax, has_backward=_lib.has_backward("softmax"))
