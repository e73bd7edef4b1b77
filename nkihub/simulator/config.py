"""Configuration of the simulator, read from the environment each time it is asked (never at import), so
tests and users just set a variable.

- ``NKIHUB_SIM_ENGINE``: ``fast`` (default) runs Programs on the replay engine (``simulator.replay``);
  ``reference`` on the instruction-by-instruction executor (``simulator.executor``). Both give the same
  bits; the reference is the one to read and to check against.
- ``NKIHUB_SIM_THREADS``: threads a simulation may compute on. The fast engine runs its batched plan on
  that many threads (default 2, at most the CPU count), each with one BLAS and one torch thread; the
  reference engine gives numpy's BLAS that many threads (default 1). ``0`` leaves every thread pool as the
  process set it and runs on the calling thread.
- ``NKIHUB_SIM_BATCH``: ``1`` (default) lets the fast engine execute independent, same-shaped
  instructions as one stacked operation (once the plan, made a slice after each call of a Program of some
  size, is complete); ``always`` batches every Program from its first call (what the bit-identity tests
  use); ``0`` replays instruction by instruction.
- ``NKIHUB_SIM_PLAN_BUDGET``: the share of a call's run time the fast engine may spend after the run on
  planning and binding the batched schedule (default ``0.1``): calls stay ahead of the reference engine
  while the plan is made over several calls. ``inf`` plans whole after the first call.
- ``NKIHUB_SIM_CROSSCHECK``: ``1`` runs every fast-engine run on the reference executor too and raises
  ``SimulationError`` unless both give the same bits (the test suite sets it for the tutorials and the
  library kernels). Default ``0``.
- ``NKIHUB_SIM_BATCH_MEMORY``: bytes (``K``/``M``/``G`` suffixes) the renamed storage of a batched plan
  may take: a Program is planned whole when that storage stays within twice it, else in windows, and one
  that still does not fit twice the budget replays unbatched. Default ``256M``.
- ``NKIHUB_SIM_KEEP_MEMORY``: bytes of workspace memory the process keeps resident between runs (beyond
  it the least recently used engines hand back their workspaces' pages, then their plans). Default ``256M``.
- ``NKIHUB_SIM_REASSOCIATE``: ``1`` allows optimisations that change the order of fp32 sums (a whole
  PSUM accumulation group as one GEMM): faster, within fp32 rounding of the reference but no longer
  bit-identical to it. Default ``0``.
"""
from __future__ import annotations

import os

ENGINES = ("fast", "reference")
_TRUE = {"1", "on", "yes", "true"}
_FALSE = {"0", "off", "no", "false"}


def engine() -> str:
    """The engine ``nki.jit`` kernels replay on: ``fast`` or ``reference``."""
    value = os.environ.get("NKIHUB_SIM_ENGINE", "").strip().lower() or "fast"
    if value not in ENGINES:
        raise ValueError(f"NKIHUB_SIM_ENGINE must be one of {', '.join(ENGINES)}, got {value!r}")
    return value


def sim_threads(default: int) -> int:
    """``NKIHUB_SIM_THREADS`` (a non-negative integer), or ``default`` when unset."""
    value = os.environ.get("NKIHUB_SIM_THREADS", "").strip()
    if not value:
        return default
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"NKIHUB_SIM_THREADS must be a non-negative integer, got {value!r}")
    return n


def fast_threads() -> int:
    """Compute threads of the fast engine: ``NKIHUB_SIM_THREADS``, default min(2, CPU count); 0 means
    the calling thread only, thread pools untouched."""
    return sim_threads(min(2, os.cpu_count() or 1))


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name} must be 0 or 1, got {value!r}")


def batching() -> str:
    """How the fast engine batches independent same-shaped instructions (``NKIHUB_SIM_BATCH``):
    ``auto``, ``always`` or ``never``."""
    value = os.environ.get("NKIHUB_SIM_BATCH", "").strip().lower()
    if value == "always":
        return "always"
    return "auto" if _flag("NKIHUB_SIM_BATCH", True) else "never"


def crosscheck() -> bool:
    """Whether each fast-engine run is checked against the reference executor (``NKIHUB_SIM_CROSSCHECK``)."""
    return _flag("NKIHUB_SIM_CROSSCHECK", False)


def reassociate() -> bool:
    """Whether optimisations that change fp32 summation order are allowed (``NKIHUB_SIM_REASSOCIATE``)."""
    return _flag("NKIHUB_SIM_REASSOCIATE", False)


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _bytes(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip().lower().removesuffix("b").removesuffix("i")
    if not value:
        return default
    try:
        n = float(value[:-1]) * _UNITS[value[-1]] if value[-1] in _UNITS else float(value)
    except (ValueError, KeyError):
        n = -1
    if n < 0:
        raise ValueError(f"{name} must be a number of bytes (suffix K, M or G), got {os.environ[name]!r}")
    return int(n)


def batch_memory() -> int:
    """Bytes the renamed storage of a batched plan may take (``NKIHUB_SIM_BATCH_MEMORY``, default 256 MiB)."""
    return _bytes("NKIHUB_SIM_BATCH_MEMORY", 256 << 20)


def keep_memory() -> int:
    """Bytes of workspace memory kept resident between runs over the process (``NKIHUB_SIM_KEEP_MEMORY``,
    default 256 MiB)."""
    return _bytes("NKIHUB_SIM_KEEP_MEMORY", 256 << 20)


def plan_budget() -> float:
    """Share of a call's run time spent afterwards on the batched plan (``NKIHUB_SIM_PLAN_BUDGET``,
    default 0.1; ``inf`` finishes the plan after the first call)."""
    value = os.environ.get("NKIHUB_SIM_PLAN_BUDGET", "").strip().lower()
    if not value:
        return 0.1
    try:
        share = float(value)
    except ValueError:
        share = -1.0
    if not share >= 0:
        raise ValueError(f"NKIHUB_SIM_PLAN_BUDGET must be a non-negative number (a share of a run), got {value!r}")
    return share
