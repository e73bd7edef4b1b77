"""Where a kernel runs: the simulator on CPU, or a Neuron device.

A tensor on the CPU runs its kernel on the numpy simulator, and so does a tensor on nkihub's emulated
``neuron`` device (``nkihub.device.emulate()``), whose results come back on that device. A Neuron device
is one that ``torch_neuronx`` provides (it creates the ``torch.neuron`` module, which is also what Hugging
Face kernels looks for) or an XLA device whose hardware reports ``NEURON``; on it the kernel's source goes
to the Neuron toolchain. Detection is lazy (nothing is imported until asked), never
raises on a broken install (the reason is recorded instead), and asking for Neuron where there is none
raises :class:`NeuronUnavailableError`: a kernel never falls back to the simulator silently.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from dataclasses import dataclass

SIMULATOR = "simulator"
NEURON = "neuron"

_lock = threading.Lock()
_status: "NeuronStatus | None" = None


class NeuronUnavailableError(RuntimeError):
    """A Neuron device was asked for, but this machine has none (the message says what was probed)."""


@dataclass(frozen=True)
class NeuronStatus:
    """Outcome of the Neuron probe: ``available``, ``how`` it was found, and what was tried."""

    available: bool
    how: str
    probes: tuple[str, ...]

    def __str__(self) -> str:
        head = f"Neuron available via {self.how}" if self.available else "no Neuron device"
        return head + "".join(f"\n  - {p}" for p in self.probes)


def _xla_hardware(device=None) -> str | None:
    """The hardware behind an XLA device (``"NEURON"``, ``"CPU"``, ...), or None if unknown."""
    xm = importlib.import_module("torch_xla.core.xla_model")
    if hasattr(xm, "xla_device_hw"):
        return str(xm.xla_device_hw(device if device is not None else xm.xla_device())).upper()
    runtime = importlib.import_module("torch_xla.runtime")
    return str(runtime.device_type()).upper() if hasattr(runtime, "device_type") else None


def _torch_has_neuron() -> bool:
    """``torch.neuron`` exists (torch_neuronx, or an emulation of it, was imported); torch is not imported."""
    torch = sys.modules.get("torch")
    return torch is not None and hasattr(torch, "neuron")


def emulated() -> bool:
    """True when ``torch.neuron`` is nkihub's emulated device (``nkihub.device.emulate()``): neuron tensors
    then live in host memory and their kernels run on the simulator. Imports nothing."""
    torch = sys.modules.get("torch")
    is_emulated = getattr(getattr(torch, "neuron", None), "is_emulated", None)
    return bool(callable(is_emulated) and is_emulated())


def _probe() -> NeuronStatus:
    probes = []
    if importlib.util.find_spec("torch_neuronx") is not None:
        try:
            mod = importlib.import_module("torch_neuronx")
            return NeuronStatus(True, f"torch_neuronx {getattr(mod, '__version__', '?')}", tuple(probes))
        except Exception as exc:  # a half-installed toolchain must not crash detection
            probes.append(f"torch_neuronx is installed but failed to import: {type(exc).__name__}: {exc}")
    else:
        probes.append("torch_neuronx is not installed")
    if emulated():
        return NeuronStatus(True, "nkihub's emulated neuron device (kernels run on the simulator)", tuple(probes))
    if _torch_has_neuron():
        return NeuronStatus(True, "the torch.neuron module (torch_neuronx or an emulation of it)", tuple(probes))
    probes.append("torch has no torch.neuron module")
    if importlib.util.find_spec("torch_xla") is not None:
        try:
            hw = _xla_hardware()
            if hw == "NEURON":
                return NeuronStatus(True, "torch_xla device with NEURON hardware", tuple(probes))
            probes.append(f"torch_xla's device hardware is {hw!r}, not 'NEURON'")
        except Exception as exc:
            probes.append(f"torch_xla is installed but its device could not be queried: {type(exc).__name__}: {exc}")
    else:
        probes.append("torch_xla is not installed")
    return NeuronStatus(False, "", tuple(probes))


def neuron_status(refresh: bool = False) -> NeuronStatus:
    """Probe for a Neuron device once per process (``refresh=True`` probes again)."""
    global _status
    with _lock:
        # torch.neuron appearing later (torch_neuronx imported after the first probe) counts at once
        if _status is None or refresh or (not _status.available and _torch_has_neuron()):
            _status = _probe()
        return _status


def neuron_available() -> bool:
    """True when a Neuron device can run kernels here."""
    return neuron_status().available


def require_neuron(what: str = "a Neuron device") -> NeuronStatus:
    """Return the probe result, or raise :class:`NeuronUnavailableError` explaining what was tried."""
    status = neuron_status()
    if not status.available:
        raise NeuronUnavailableError(
            f"{what} was requested but this machine has no Neuron device; kernels do not fall back to the "
            f"simulator silently. Use device='cpu' to run on the simulator.\n{status}")
    return status


def resolve_device(device=None) -> str:
    """Map a user's device (None, ``"cpu"``, ``"neuron"``, ``"xla"``, a ``torch.device``) to a kernel
    device type: ``"cpu"`` (simulator) or ``"neuron"``. None means CPU unless a Neuron device exists."""
    if device is None:
        return NEURON if neuron_available() else "cpu"
    kind = getattr(device, "type", None) or str(device).split(":")[0]
    if kind == "cpu":
        return "cpu"
    if kind in (NEURON, "xla", "privateuseone"):
        require_neuron(f"device={str(device)!r}")
        return NEURON
    raise ValueError(f"device: nkihub kernels run on 'cpu' (the simulator) or 'neuron', got {str(device)!r}")


def backend_of(tensors) -> str:
    """The backend for a kernel call on these torch tensors: ``"simulator"`` when all are on the CPU,
    ``"neuron"`` when all are on a Neuron device. Mixed or other devices raise ValueError."""
    kinds = {t.device.type for t in tensors}
    if not kinds or kinds == {"cpu"}:
        return SIMULATOR
    if NEURON in kinds and kinds <= {"cpu", NEURON} and emulated():
        return SIMULATOR   # the emulated device's tensors are host memory: the kernel runs on the simulator
    if len(kinds) > 1:
        raise ValueError(f"tensors: kernel inputs must share one device, got {sorted(kinds)}")
    kind = kinds.pop()
    if kind == NEURON or (kind == "privateuseone" and neuron_available()):
        return NEURON
    if kind == "xla":
        try:
            hw = _xla_hardware(tensors[0].device)
        except Exception as exc:
            raise ValueError(f"tensors: cannot tell the hardware behind XLA device {tensors[0].device}: {exc}") from exc
        if hw == "NEURON":
            return NEURON
        raise ValueError(f"tensors: XLA device {tensors[0].device} is {hw!r} hardware, not NEURON")
    raise ValueError(f"tensors: nkihub kernels run on the CPU (simulator) or a Neuron device, got {kind!r}")


def neuron_runner(kernel):
    """A callable that runs ``@nki.jit`` kernel ``kernel`` on the Neuron device through the installed
    toolchain (torch_neuronx's ``nki_jit``). Raises NeuronUnavailableError when there is none."""
    require_neuron()
    fn = getattr(kernel, "fn", kernel)
    for module, attr in (("torch_neuronx", "nki_jit"), ("torch_neuronx.xla_impl.ops", "nki_jit")):
        try:
            return getattr(importlib.import_module(module), attr)(fn)
        except (ImportError, AttributeError):
            continue
    raise NeuronUnavailableError(
        "a Neuron device is present but no NKI launcher was found (torch_neuronx.nki_jit); "
        "install the Neuron SDK's torch-neuronx to run kernels on it")
