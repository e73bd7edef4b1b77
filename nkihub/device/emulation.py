"""Turning the emulated ``neuron`` device on: PrivateUse1 renamed ``neuron``, its Python hooks and device
guard, the generated ``.neuron()`` / ``.is_neuron`` methods, the ``torch.neuron`` module, the fallback
kernel, the kernel call log, and the ``neuron`` compile and process-group backends.

Everything here is process-global and permanent (torch cannot unregister a backend), which is why tests
turn the emulation on in subprocesses.
"""
from __future__ import annotations

import importlib.util
import threading

from nkihub.device import EmulationError, config

_lock = threading.Lock()
_state = None


def _refuse_where_neuron_exists(torch) -> None:
    if importlib.util.find_spec("torch_neuronx") is not None:
        raise EmulationError(
            "the emulated neuron device is refused here: torch_neuronx (AWS's TorchNeuron) is installed, "
            "and it owns the `neuron` device. Run on the real device, or use an environment without "
            "torch_neuronx to emulate it (unset NKIHUB_EMULATE_NEURON to silence this).")
    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone", "neuron"):
        raise EmulationError(f"the emulated neuron device needs PyTorch's PrivateUse1 backend, but this process "
                             f"already registered it as {name!r}")
    if name == "neuron" or hasattr(torch, "neuron"):
        raise EmulationError("a `neuron` device (or a torch.neuron module) already exists in this process and "
                             "is not nkihub's emulation")


def _native_guard(required):
    """The C++ guard, or None: ``required`` True raises where it cannot be built, None (auto) warns."""
    if required is False:
        return None
    from nkihub.device import native

    try:
        return native.load()
    except EmulationError as exc:
        if required:
            raise
        import warnings

        warnings.warn(f"{exc} -- using the pure-Python device guard instead (docs/device.md, Limits)",
                      RuntimeWarning, stacklevel=3)
        return None


def emulate(device_count: int | None = None, native_guard: bool | None = None):
    """See :func:`nkihub.device.emulate`."""
    global _state
    import torch

    count = config.device_count() if device_count is None else device_count
    required = config.native_guard() if native_guard is None else native_guard
    with _lock:
        if _state is not None:
            _state.resize(count)
            return torch.neuron
        _refuse_where_neuron_exists(torch)
        guard = _native_guard(required)   # first: a refusal leaves the process as it was
        from nkihub.device import autocast, backend, torch_module
        from nkihub.device.state import State

        state = State(count)
        torch.utils.rename_privateuse1_backend("neuron")
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=False)
        torch_module._state = state
        torch._register_device_module("neuron", torch_module.build())
        if guard is not None:   # the C++ part: guard, allocator and hooks
            state.use_native(guard)
            guard.install_hooks()
        else:
            torch._C._acc.register_python_privateuseone_hook(_hooks(torch))
            torch._C._acc.register_python_privateuseone_device_guard(_guard(torch))
            _storages_to_neuron_through_tensors(torch)
        backend.install(state)
        autocast.install()
        _state = state
    from nkihub.device import compile as compile_backend, distributed

    compile_backend.register()
    distributed.register()
    return torch.neuron


def _storages_to_neuron_through_tensors(torch) -> None:
    """Without the C++ allocator no allocator exists for PrivateUse1, and torch's ``storage.to(device)``
    (what ``torch.load`` onto the device uses) would make a storage with it and crash; route a move to the
    neuron device through a tensor, which the fallback allocates."""
    import torch.storage as storages

    original = storages._to

    def _to(self, device, non_blocking=False):
        if getattr(device, "type", None) == "neuron" and self.device != device:
            moved = torch.empty(self.nbytes(), dtype=torch.uint8, device=device).untyped_storage()
            moved.copy_(self, non_blocking)
            return moved
        return original(self, device, non_blocking)

    storages._to = _to


def _hooks(torch):
    class Hooks(torch._C._acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            return True

        def has_primary_context(self, dev_id) -> bool:
            return True

        def is_built(self) -> bool:
            return True

    return Hooks()


def _guard(torch):
    class Guard(torch._C._acc.DeviceGuard):
        def type_(self):
            return torch._C._autograd.DeviceType.PrivateUse1

    return Guard()
