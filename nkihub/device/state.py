"""The emulated device's process-wide state: how many NeuronCores, which one is current, one random
generator per core, and the bytes each core holds (allocated now and at peak).

Memory is counted per storage: a fresh output of an op is counted when it is made and uncounted by a
finalizer on its storage when the last tensor (or view) of it is gone.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

import torch


@dataclass
class Core:
    """One emulated NeuronCore: its generator (a CPU generator, so ``manual_seed`` makes runs
    reproducible) and its memory counters, in bytes."""

    generator: torch.Generator = field(default_factory=torch.Generator)
    allocated: int = 0
    peak: int = 0
    allocations: int = 0
    frees: int = 0


class State:
    def __init__(self, count: int):
        self._lock = threading.Lock()
        self.cores: list[Core] = []
        self._current = 0
        self.native = None   # the C++ device guard (nkihub.device.native), when it is used
        self.resize(count)

    @property
    def current(self) -> int:
        """The current core: the C++ guard's (per thread, as CUDA's) when it is used, else this process's."""
        return self.native.current if self.native is not None else self._current

    @current.setter
    def current(self, index: int) -> None:
        if self.native is not None:
            self.native.current = index
        self._current = index

    def use_native(self, native) -> None:
        """Hand the current core and the core count to the C++ guard ``native`` (and install it)."""
        native.install(self.count)
        native.current = self._current
        self.native = native

    @property
    def count(self) -> int:
        return len(self.cores)

    def resize(self, count: int) -> None:
        """Set the number of emulated NeuronCores (cores already holding tensors keep their counters)."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"device_count: at least one emulated NeuronCore, got {count!r}")
        with self._lock:
            del self.cores[count:]
            self.cores += [Core() for _ in range(count - len(self.cores))]
            if self.native is not None:
                self.native.set_count(count)
            self.current = min(self.current, count - 1)

    def index(self, device=None) -> int:
        """The core index of ``device`` (None, an int, ``"neuron"``, ``"neuron:1"``, a torch.device);
        a device without an index is the current core. IndexError beyond the emulated cores."""
        if device is None:
            return self.current
        if isinstance(device, int) and not isinstance(device, bool):
            i = device
        else:
            d = torch.device(device)
            if d.type != "neuron":
                raise ValueError(f"device: expected a neuron device, got {str(d)!r}")
            i = self.current if d.index is None else d.index
        if not 0 <= i < self.count:
            raise IndexError(f"neuron:{i}: this process emulates {self.count} NeuronCore(s) "
                             f"(nkihub.device.emulate(device_count=N) or NKIHUB_NEURON_DEVICE_COUNT sets how many)")
        return i

    def core(self, device=None) -> Core:
        return self.cores[self.index(device)]

    # -- memory -------------------------------------------------------------------------------------
    def allocated(self, storage, index: int) -> None:
        """Count a fresh storage of core ``index``; its finalizer uncounts it."""
        nbytes = storage.nbytes()
        if not nbytes or index >= self.count:
            return
        with self._lock:
            core = self.cores[index]
            core.allocated += nbytes
            core.allocations += 1
            core.peak = max(core.peak, core.allocated)
        weakref.finalize(storage, self._freed, core, nbytes)

    def _freed(self, core: Core, nbytes: int) -> None:
        with self._lock:
            core.allocated -= nbytes
            core.frees += 1

    def reset_peak(self, device=None) -> None:
        core = self.core(device)
        with self._lock:
            core.peak = core.allocated
