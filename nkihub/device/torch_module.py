"""``torch.neuron`` under emulation: the functions transformers, accelerate and torch.distributed call on a
device module (the ``torch.cuda`` surface), answered for the emulated NeuronCores.

Streams and events exist and do nothing (every op has finished when it returns); memory figures count the
bytes of live neuron storages (nkihub.device.state); ``get_device_properties`` describes the simulator's
target (``NEURON_PLATFORM_TARGET_OVERRIDE``, default trn2). ``is_emulated()`` is True only here: it is how
code (nkihub's own kernels among it) tells the emulation from torch_neuronx.
"""
from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass

import torch

_state = None   # the emulation's State (set by nkihub.device.emulation)

__all__ = [
    "Event", "Stream", "current_device", "current_stream", "default_stream", "device", "device_count",
    "device_of", "empty_cache", "get_amp_supported_dtype", "get_device_name", "get_device_properties",
    "get_rng_state", "get_rng_state_all", "init", "initial_seed", "is_available", "is_bf16_supported",
    "is_emulated", "is_initialized", "kernel_log", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_reserved", "memory_stats",
    "reset_max_memory_allocated", "reset_peak_memory_stats", "seed", "seed_all", "set_device",
    "set_rng_state", "set_rng_state_all", "set_stream", "stream", "synchronize",
]


def is_emulated() -> bool:
    """True: this ``torch.neuron`` is nkihub's emulation, not torch_neuronx."""
    return True


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    """Nothing to initialise (present because torch's device modules have it)."""


def _lazy_init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """The number of emulated NeuronCores (``emulate(device_count=N)``, ``NKIHUB_NEURON_DEVICE_COUNT``)."""
    return _state.count


def current_device() -> int:
    return _state.current


def set_device(device) -> None:
    """Make ``device`` (an index, ``"neuron:1"``, a torch.device) the core that ``"neuron"`` means."""
    _state.current = _state.index(device)


class device:   # noqa: N801  (torch.cuda.device's name)
    """Context manager: ``with torch.neuron.device(1):`` makes core 1 current inside the block."""

    def __init__(self, device):
        self.index = -1 if device is None else _state.index(device)
        self.prev = -1

    def __enter__(self):
        self.prev = _state.current
        if self.index >= 0:
            _state.current = self.index

    def __exit__(self, *exc):
        _state.current = self.prev
        return False


def device_of(obj) -> device:
    return device(obj.get_device() if obj.device.type == "neuron" else None)


def _target():
    from nkihub.simulator.targets import get_target

    return get_target()


_CORE_NAMES = {"gen2": "NeuronCore-v2", "gen3": "NeuronCore-v3", "gen4": "NeuronCore-v4"}


def get_device_name(device=None) -> str:
    """The simulator target's NeuronCore, e.g. ``NeuronCore-v3 (trn2, emulated by nkihub)``."""
    _state.index(device)
    t = _target()
    return f"{_CORE_NAMES.get(t.nc_version, t.nc_version)} ({t.name}, emulated by nkihub)"


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    target: str
    total_memory: int            # bytes of HBM per NeuronCore on the target (not host memory)
    sbuf_bytes_per_partition: int
    partitions: int


def get_device_properties(device=None) -> DeviceProperties:
    t = _target()
    return DeviceProperties(get_device_name(device), t.name, t.hbm_bytes_per_chip // t.cores_per_chip,
                            t.sbuf_bytes_per_partition, t.partitions)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list:
    """dtypes ``torch.autocast(device_type="neuron")`` accepts."""
    return [torch.bfloat16, torch.float16]


def synchronize(device=None) -> None:
    """Nothing to wait for: every op on the emulated device has finished when it returns."""
    _state.index(device)


# -- random numbers -------------------------------------------------------------------------------------
def manual_seed(seed: int) -> None:
    _state.core().generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for core in _state.cores:
        core.generator.manual_seed(int(seed))


def seed() -> None:
    manual_seed(random.getrandbits(63))


def seed_all() -> None:
    manual_seed_all(random.getrandbits(63))


def initial_seed() -> int:
    return _state.core().generator.initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    return _state.core(device).generator.get_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    _state.core(device).generator.set_state(new_state.cpu())


def get_rng_state_all() -> list:
    return [core.generator.get_state() for core in _state.cores]


def set_rng_state_all(new_states) -> None:
    for core, s in zip(_state.cores, new_states):
        core.generator.set_state(s.cpu())


# -- memory ---------------------------------------------------------------------------------------------
def memory_allocated(device=None) -> int:
    """Bytes held by live tensors on the core (host memory standing in for its HBM)."""
    return _state.core(device).allocated


def max_memory_allocated(device=None) -> int:
    return _state.core(device).peak


def memory_reserved(device=None) -> int:
    return memory_allocated(device)   # no caching allocator: what is held is what is reserved


def max_memory_reserved(device=None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None) -> None:
    _state.reset_peak(device)


def reset_max_memory_allocated(device=None) -> None:
    _state.reset_peak(device)


def memory_stats(device=None) -> dict:
    core = _state.core(device)
    return {"allocated_bytes.all.current": core.allocated, "allocated_bytes.all.peak": core.peak,
            "allocation.all.allocated": core.allocations, "allocation.all.freed": core.frees,
            "reserved_bytes.all.current": core.allocated, "reserved_bytes.all.peak": core.peak}


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the target's HBM per NeuronCore, less what this process holds."""
    total = get_device_properties(device).total_memory
    return max(total - memory_allocated(device), 0), total


def empty_cache() -> None:
    """Nothing cached: storages are freed when their last tensor goes."""


# -- streams and events (no-ops: work is done when an op returns) -----------------------------------------
class Stream:
    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.device = torch.device("neuron", _state.index(device))
        self.priority = priority

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __repr__(self) -> str:
        return f"<torch.neuron.Stream device={self.device} (emulated: no-op)>"


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._time = None

    def record(self, stream=None) -> None:
        self._time = time.perf_counter()

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "Event") -> float:
        """Host milliseconds between two records (host time, not a NeuronCore's)."""
        return (end._time - self._time) * 1e3


_default_streams: dict = {}


def default_stream(device=None) -> Stream:
    i = _state.index(device)
    if i not in _default_streams:
        _default_streams[i] = Stream(i)
    return _default_streams[i]


def current_stream(device=None) -> Stream:
    return default_stream(device)


def set_stream(stream) -> None:
    pass


@contextlib.contextmanager
def stream(stream):
    yield stream


def kernel_log():
    """The log of NKI kernel calls of this process with their cost-model estimates (nkihub.nki.calllog)."""
    from nkihub.nki import calllog

    return calllog.log()


def build():
    """A fresh module object ``torch.neuron`` holding the functions above."""
    import types

    mod = types.ModuleType("torch.neuron", __doc__)
    for name in __all__ + ["_lazy_init", "_is_in_bad_fork", "DeviceProperties"]:
        setattr(mod, name, globals()[name])
    return mod
