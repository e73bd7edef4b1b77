"""The optional C++ part of the emulated device (``emulate(native_guard=True)`` or
``NKIHUB_NEURON_NATIVE_GUARD=1``; used by default where it builds): a device guard, an allocator and
PrivateUse1 hooks.

Everything else in the emulation is Python. What Python cannot reach is the device guard C++ asks for
the current device and the device count (PyTorch's Python guard answers core 0 and 1), the allocator C++
uses when it makes a storage itself (none is registered for PrivateUse1), and the hook that resizes a
storage in place (the Python hooks have none). With this library a bare ``"neuron"`` resolved in C++
(``t.to("neuron")``, ``Module.to("neuron")``, DTensor) follows ``torch.neuron.set_device``,
``torch.accelerator.device_count()`` says how many cores are emulated, autograd runs backward on any core,
``torch.UntypedStorage(n, device="neuron")`` works and ``UntypedStorage.resize_`` does (FSDP2 needs it).

Building it needs a C++17 compiler (``c++``/``g++``, or ``$CXX``), ``ninja``, and the headers that ship
inside the torch wheel; not Python's headers. It is built once with ``torch.utils.cpp_extension.load``
into ``$XDG_CACHE_HOME/nkihub/torch_extensions/`` (``NKIHUB_EXTENSIONS_DIR`` overrides) and loaded from
there afterwards; a missing compiler is an :class:`~nkihub.device.EmulationError` saying so.
"""
from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

from nkihub.device import EmulationError

SOURCE = Path(__file__).with_name("device.cpp")
NAME = "nkihub_neuron_native"


def build_dir() -> Path:
    """Where the guard is built (created on first use)."""
    override = os.environ.get("NKIHUB_EXTENSIONS_DIR", "").strip()
    base = Path(override) if override else Path(
        os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache") / "nkihub" / "torch_extensions"
    import torch

    path = base / f"{NAME}-torch{torch.__version__.split('+')[0]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _check_toolchain() -> None:
    compiler = os.environ.get("CXX", "").strip() or "c++"
    missing = [what for what, found in ((f"a C++ compiler ({compiler})", shutil.which(compiler)),
                                        ("ninja", shutil.which("ninja"))) if not found]
    if missing:
        raise EmulationError(
            f"the emulated neuron device's native guard needs {' and '.join(missing)} to build (a C++17 compiler, "
            "ninja, and torch's own headers; not Python's). Install them, or run without native_guard (the "
            "pure-Python guard: a bare 'neuron' resolved in C++ then means core 0; see docs/device.md).")


class NativeGuard:
    """The loaded guard library: install it, and set or read the current core and the core count."""

    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib
        lib.nkihub_neuron_guard_current.restype = ctypes.c_int

    def install(self, count: int) -> None:
        """Register the guard and the allocator for PrivateUse1."""
        self._lib.nkihub_neuron_guard_install(int(count))

    def install_hooks(self) -> None:
        """Register the PrivateUse1 hooks (in place of PyTorch's Python ones)."""
        if not self._lib.nkihub_neuron_hooks_install():
            raise EmulationError("PrivateUse1 hooks were registered already in this process (by whom is not "
                                 "known); the emulated neuron device needs its own")

    def set_count(self, count: int) -> None:
        self._lib.nkihub_neuron_guard_set_count(int(count))

    @property
    def current(self) -> int:
        return self._lib.nkihub_neuron_guard_current()

    @current.setter
    def current(self, index: int) -> None:
        self._lib.nkihub_neuron_guard_set_current(int(index))


def load() -> NativeGuard:
    """Build (once) and load the guard library."""
    _check_toolchain()
    from torch.utils import cpp_extension

    try:
        path = cpp_extension.load(name=NAME, sources=[str(SOURCE)], build_directory=str(build_dir()),
                                  is_python_module=False, extra_cflags=["-O2"], verbose=False)
        return NativeGuard(ctypes.CDLL(path))
    except Exception as exc:   # a compiler that fails, an unwritable cache: say so, with what it said
        raise EmulationError(f"building the emulated neuron device's native guard failed: {exc}") from exc
