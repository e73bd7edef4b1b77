"""An emulated ``neuron`` torch device, so Trainium code paths run and test on any CPU.

    import nkihub.device
    nkihub.device.emulate(device_count=2)        # or NKIHUB_EMULATE_NEURON=1 before torch is imported
    x = torch.randn(4, 4, device="neuron")       # host memory, every aten op by the CPU kernels
    model.to("neuron"); torch.neuron.device_count(); torch.compile(model, backend="neuron")

PyTorch's PrivateUse1 backend renamed ``neuron``, in Python (a compiler is optional: only the device guard
C++ asks for the current core is C++, :mod:`nkihub.device.native`): a boxed fallback
runs every aten op on host views of the tensors (:mod:`nkihub.device.backend`), ``torch.neuron`` answers
the ``torch.cuda``-like calls (:mod:`nkihub.device.torch_module`), NKI kernels on neuron tensors run on the
simulator and return neuron tensors, each call logged with its cost-model estimate (``kernel_log()``),
``torch.compile(backend="neuron")`` captures graphs (:mod:`nkihub.device.compile`) and a ``neuron``
process-group backend runs torch.distributed over gloo (:mod:`nkihub.device.distributed`).
It is for running and testing code paths, not for Neuron numerics beyond the simulator's, nor for speed
(docs/device.md). It is refused where the real ``torch_neuronx`` is installed.

Importing this package imports nothing else (torch's autoload hook imports it on every ``import torch``).
"""
from __future__ import annotations

import sys


class EmulationError(RuntimeError):
    """The emulated neuron device cannot be turned on here (the message says why)."""


def emulate(device_count: int | None = None, native_guard: bool | None = None):
    """Turn the emulated ``neuron`` device on in this process (idempotent; a second call may change
    ``device_count``). ``device_count``: NeuronCores to emulate, default ``NKIHUB_NEURON_DEVICE_COUNT``
    or 1. ``native_guard``: use the small C++ device guard (:mod:`nkihub.device.native`, built once;
    needs a C++ compiler and ninja) so C++ sees the current core and the core count: True requires it,
    False never builds it, None (default, ``NKIHUB_NEURON_NATIVE_GUARD``) uses it when it builds. Returns the
    ``torch.neuron`` module. Raises :class:`EmulationError` where torch_neuronx is installed, another
    backend already owns PrivateUse1, or a required native guard cannot be built. Process-global: it cannot
    be turned off."""
    from nkihub.device.emulation import emulate as _emulate

    return _emulate(device_count, native_guard)


def emulated() -> bool:
    """True when this process runs the emulated device (imports nothing)."""
    torch = sys.modules.get("torch")
    is_emulated = getattr(getattr(torch, "neuron", None), "is_emulated", None)
    return bool(callable(is_emulated) and is_emulated())


def native_part() -> bool:
    """True when the emulation runs with its C++ part (device guard, allocator, hooks; docs/device.md)."""
    emulation = sys.modules.get("nkihub.device.emulation")
    state = getattr(emulation, "_state", None)
    return state is not None and state.native is not None


def kernel_log():
    """This process's log of NKI kernel calls with their cost-model estimates (nkihub.nki.calllog)."""
    from nkihub.nki import calllog

    return calllog.log()


__all__ = ["EmulationError", "emulate", "emulated", "kernel_log", "native_part"]
