"""``neuronxcc.nki.typing``: annotations kernels write (``t: tensor[128, 512]``); no runtime effect."""
from __future__ import annotations


class _Annotation:
    """``tensor[shape...]`` / ``tensor[dtype, shape]`` subscripts return the class itself."""

    def __class_getitem__(cls, item):
        return cls


class tensor(_Annotation):
    """A tensor annotation."""


class mutable_tensor(_Annotation):
    """A tensor annotation for arguments the kernel writes."""


from nkihub.nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("neuronxcc.nki.typing")  # AWS NKI names not simulated: a clear error
