"""Kernel-side object types of ``nki.language``: ``NKIObject`` (base of a kernel's own configuration
objects), ``MemoryRegion`` (the buffers as an enum) and the ``DType`` alias."""
from __future__ import annotations

from enum import Enum
from typing import Union

import numpy as np


class NKIObject:
    """Base class of the plain-Python objects a kernel builds and passes around at trace time (configs,
    tile plans, groups of tensors).

    Subclasses are usually dataclasses (their generated ``__init__`` takes over). A subclass that is not
    a dataclass is built with keyword arguments, one per attribute: ``Dims(T=128, H=4096)``; fields it
    declares (annotated or not) keep their class-level default when not passed. Objects print their
    attributes, so two equal configurations print (and key a compiled kernel) the same way.
    """

    def __init__(self, **kwargs):
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class MemoryRegion(str, Enum):
    """The memory regions a tensor can live in; members work wherever a buffer is taken
    (``nl.ndarray(shape, dtype, buffer=nl.MemoryRegion.sbuf)``) and compare equal to ``nl.sbuf`` etc."""

    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"


# What a kernel may pass as a dtype: an nl dtype (a numpy dtype), its name, or an MX packed-dtype name.
DType = Union[np.dtype, type, str]
