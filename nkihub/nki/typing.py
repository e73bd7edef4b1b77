"""``nki.typing`` (``import nki.typing as nt``): annotations for kernel arguments (``x: nt.tensor``,
``out: nt.mutable_tensor``, ``nt.tensor[128, 512]``); they document, they do not change tracing."""
from nkihub.nki.compat.typing import mutable_tensor, tensor

__all__ = ["mutable_tensor", "tensor"]
