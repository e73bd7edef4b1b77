"""Host views: the same memory seen as a CPU tensor or as a ``neuron`` tensor, without a copy.

An emulated ``neuron`` tensor is an ordinary strided tensor whose storage lives in host memory; only the
device recorded in its storage differs. DLPack carries a pointer, shape, strides and a device tag, and
torch maps the tag ``kDLExtDev`` to PrivateUse1 (renamed ``neuron``), so re-tagging a capsule converts
between the two devices with no copy: :func:`to_host` gives a CPU tensor aliasing a neuron tensor's memory
(what CPU kernels compute on) and :func:`to_neuron` a neuron tensor aliasing a CPU tensor's memory (what
a CPU kernel's fresh output becomes). Each side's capsule keeps the other side's tensor alive, so memory
is freed when the last view of either kind is gone. No compiler is involved: this is what lets the
emulation be pure Python (docs/device.md).
"""
from __future__ import annotations

import ctypes

import torch

_DL_CPU = 1
_DL_EXT_DEV = 12   # DLPack's "extension device": torch reads and writes it as PrivateUse1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    # the head of DLManagedTensor (DLPack 0.x), which is what torch's "dltensor" capsules hold
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _retag(t: torch.Tensor, device_type: int, index: int) -> torch.Tensor:
    capsule = torch._C._to_dlpack(t)
    head = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    head.device.device_type = device_type
    head.device.device_id = index
    return torch._C._from_dlpack(capsule)


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor aliasing the memory of neuron tensor ``t`` (same shape, strides and dtype)."""
    return _retag(t, _DL_CPU, 0)


def to_neuron(t: torch.Tensor, index: int) -> torch.Tensor:
    """A ``neuron:index`` tensor aliasing the memory of CPU tensor ``t``."""
    return _retag(t, _DL_EXT_DEV, index)
