"""Layers of neuron/rmsnorm for ``kernelize`` (Hugging Face kernels' convention): ``RMSNorm`` replaces
torch.nn.RMSNorm and LlamaRMSNorm-style modules; the class has a ``forward`` only."""
from nkihub.kernels.library.model_layers import rms_norm_layer

from . import _lib, rms_norm

__all__ = ["RMSNorm"]

RMSNorm = rms_norm_layer(rms_norm, has_backward=_lib.has_backward("rms_norm"))
