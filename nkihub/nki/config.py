"""Configuration of the nki package, read from the environment when asked, never at import.

Environment variables:

- ``NKI_CACHE_DIR``: directory of the on-disk compile cache (default ``$XDG_CACHE_HOME/nkihub/nki``,
  i.e. ``~/.cache/nkihub/nki``); ``off`` (or ``0``, ``none``) disables the disk cache.
- ``NEURON_PLATFORM_TARGET_OVERRIDE``: default target (trn1, trn2, trn3), read by ``simulator.targets``.
- ``NKI_PRINT_AUTOTUNING``: ``1`` makes ``nki.autotune`` print the report of every sweep.
- ``NKIHUB_DEBUG``: ``1`` makes the ``nki`` command print tracebacks.
"""
from __future__ import annotations

import os
from pathlib import Path

_TRUE = {"1", "on", "yes", "true"}
_OFF = {"off", "0", "none", "false", "no"}


def cache_dir() -> Path | None:
    """The compile cache directory, or None when the disk cache is disabled."""
    value = os.environ.get("NKI_CACHE_DIR", "").strip()
    if value.lower() in _OFF:
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "nkihub" / "nki"


def debug() -> bool:
    """True when NKIHUB_DEBUG asks for tracebacks."""
    return os.environ.get("NKIHUB_DEBUG", "").strip().lower() in _TRUE


def print_autotuning() -> bool:
    """True when NKI_PRINT_AUTOTUNING asks the autotuner to print each sweep's report (as Triton's
    TRITON_PRINT_AUTOTUNING)."""
    return os.environ.get("NKI_PRINT_AUTOTUNING", "").strip().lower() in _TRUE
