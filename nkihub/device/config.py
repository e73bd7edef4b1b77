"""Configuration of the emulated device, read from the environment when asked, never at import.

- ``NKIHUB_EMULATE_NEURON``: ``1`` turns the emulation on when torch is imported (torch's device-backend
  autoload runs nkihub's entry point; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` disables all such hooks).
- ``NKIHUB_NEURON_DEVICE_COUNT``: how many NeuronCores to emulate (default 1; e.g. 2 as on a trn1.2xlarge).
- ``NKIHUB_NEURON_NATIVE_GUARD``: the C++ device guard (nkihub.device.native): ``auto`` (default: used when
  it builds, else the Python guard with a warning), ``1`` (required: an error where it cannot be built),
  ``0`` (never: pure Python).
"""
from __future__ import annotations

import os

_TRUE = {"1", "on", "yes", "true"}


def emulate_requested() -> bool:
    """True when NKIHUB_EMULATE_NEURON asks for the emulated device."""
    return os.environ.get("NKIHUB_EMULATE_NEURON", "").strip().lower() in _TRUE


def device_count() -> int:
    """NKIHUB_NEURON_DEVICE_COUNT, default 1; ValueError when it is not a positive integer."""
    value = os.environ.get("NKIHUB_NEURON_DEVICE_COUNT", "").strip() or "1"
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"NKIHUB_NEURON_DEVICE_COUNT: a positive number of NeuronCores, got {value!r}")
    return count


def native_guard():
    """NKIHUB_NEURON_NATIVE_GUARD as True (required), False (never) or None (auto, the default)."""
    value = os.environ.get("NKIHUB_NEURON_NATIVE_GUARD", "").strip().lower()
    if value in ("", "auto"):
        return None
    if value in _TRUE:
        return True
    if value in {"0", "off", "no", "false"}:
        return False
    raise ValueError(f"NKIHUB_NEURON_NATIVE_GUARD: auto, 1 or 0, got {value!r}")
