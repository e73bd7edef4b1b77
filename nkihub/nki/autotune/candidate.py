"""One candidate of a sweep, evaluated where it runs (this process, a local worker or a Ray worker):
trace the kernel with the config at the full shapes and check it against the target's rules, simulate
it on the small check inputs against the reference, and estimate it on the target's cost model.

A task carries everything by value (the kernel as a reference that a worker can import or rebuild from
its source, tensor arguments as shapes and dtypes, the check inputs with the expected outputs), so the
same task gives the same result wherever it runs.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nkihub.nki.arrays import is_array, to_numpy
from nkihub.nki.autotune.space import Config
from nkihub.nki.dtypes import TOLERANCE, relative_error
from nkihub.simulator.dtypes import as_dtype, dtype_name
from nkihub.simulator.errors import KernelRuleError, NkiError

OK, INVALID, WRONG, ERROR = "ok", "invalid", "wrong", "error"


@dataclass(frozen=True)
class KernelRef:
    """Where a worker finds the kernel: an importable module, else a file (with its text, for a worker
    on another machine), and the kernel's name in it; or, for a kernel of the running script or notebook
    (``__main__``), the kernel itself pickled by value (cloudpickle: its function, and the helpers and
    constants of the script it uses), because running the script again in a worker would run whatever
    its top level does, the sweep included."""

    name: str
    module: str | None = None
    path: str | None = None
    source: str | None = None
    grid: tuple = ()
    pickled: bytes | None = field(default=None, repr=False)

    @classmethod
    def of(cls, kernel) -> "KernelRef":
        fn, grid = kernel.fn, tuple(kernel.grid)
        if "." in fn.__qualname__ or "<locals>" in fn.__qualname__:
            return cls(fn.__qualname__, grid=grid)   # not reachable from a module: this process only
        mod = sys.modules.get(fn.__module__)
        name = fn.__module__
        if name == "__main__":
            return cls(fn.__name__, pickled=_by_value(kernel), grid=grid)
        if getattr(mod, "__spec__", None) is not None and \
                importlib.util.find_spec(name) is not None and not name.startswith("_nki_cli_"):
            return cls(fn.__name__, module=name, grid=grid)
        path = getattr(mod, "__file__", None)
        if path is None:
            return cls(fn.__qualname__, grid=grid)
        return cls(fn.__name__, path=str(Path(path).resolve()), source=Path(path).read_text(), grid=grid)

    @property
    def portable(self) -> bool:
        """True when another process can find the kernel."""
        return self.module is not None or self.path is not None or self.pickled is not None

    def resolve(self):
        """The ``JitKernel`` this names (loaded once per process)."""
        from nkihub.nki.jit import JitKernel, jit
        if not self.portable:
            raise ValueError(f"kernel {self.name!r} is not defined at the top level of a module: it can be "
                             "tuned in this process only (workers=1)")
        if self.pickled is not None:
            kernel = _unpickled(self.pickled)
            return kernel[self.grid] if self.grid else kernel
        if self.module is not None:
            obj = getattr(importlib.import_module(self.module), self.name)
        else:
            from nkihub.nki.cli.common import load_object
            obj = load_object(f"{self._local_file()}:{self.name}")
        obj = getattr(obj, "kernel", obj)   # an autotuned kernel: the @nki.jit kernel inside
        kernel = obj if isinstance(obj, JitKernel) else jit(obj)
        return kernel[self.grid] if self.grid else kernel

    def _local_file(self) -> str:
        path = Path(self.path)
        if path.is_file() and self.source is not None and path.read_text() == self.source:
            return str(path)
        # another machine (a Ray worker): the file as the caller had it, in a folder of its own
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:16]
        copy = Path(tempfile.gettempdir()) / f"nki-autotune-{digest}" / path.name
        if not copy.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            tmp = copy.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(self.source)
            os.replace(tmp, copy)
        return str(copy)


def _by_value(kernel) -> bytes | None:
    """The kernel of the running script as bytes a worker rebuilds it from without the script (its class,
    function and options; None when something it refers to cannot be pickled: it is then tuned in this
    process)."""
    import cloudpickle
    try:
        return cloudpickle.dumps((type(kernel), kernel.fn, dict(kernel.options)))
    except Exception:   # a lock, an open file ... among what the kernel refers to
        return None


_UNPICKLED: dict = {}


def _unpickled(data: bytes):
    key = hashlib.sha256(data).hexdigest()
    if key not in _UNPICKLED:
        import pickle
        cls, fn, options = pickle.loads(data)   # cloudpickle's bytes load with pickle (cloudpickle installed)
        _UNPICKLED[key] = cls(fn, **options)
    return _UNPICKLED[key]


@dataclass(frozen=True)
class ArgSpec:
    """A tensor argument by shape and dtype (estimates read no values)."""

    shape: tuple
    dtype: str

    @classmethod
    def of(cls, value) -> "ArgSpec":
        arr = to_numpy(value)
        return cls(tuple(arr.shape), dtype_name(arr.dtype))

    def zeros(self) -> np.ndarray:
        return np.zeros(self.shape, as_dtype(self.dtype))


def specs(args) -> tuple:
    """``args`` with every tensor replaced by its ArgSpec (constants kept)."""
    return tuple(ArgSpec.of(a) if is_array(a) else a for a in args)


@dataclass(frozen=True)
class CheckCase:
    """Small inputs, the reference's outputs for them, and the tolerance a candidate must meet: max
    |error| / max |expected| per output at most ``rtol`` (default by the output's dtype, as ``nki
    simulate``: bf16 2e-2, fp32 1e-4)."""

    args: tuple
    kwargs: dict
    expected: tuple
    rtol: float | None = None
    against: str = "the reference"

    def digest(self) -> str:
        """sha256 of the inputs, expected outputs and tolerance (once per case: the inputs may be the
        call's own, 2^24 elements)."""
        cached = self.__dict__.get("_digest")
        if cached is not None:
            return cached
        arrays = {k: v for k, v in self.kwargs.items() if isinstance(v, np.ndarray)}
        h = hashlib.sha256(repr((self.rtol, sorted((k, v) for k, v in self.kwargs.items()
                                                   if k not in arrays))).encode())
        for a in (*self.args, *(arrays[k] for k in sorted(arrays)), *self.expected):
            if isinstance(a, np.ndarray):
                h.update(str((a.shape, a.dtype.str)).encode())
                h.update(np.ascontiguousarray(a).tobytes())
            else:
                h.update(repr(a).encode())
        object.__setattr__(self, "_digest", h.hexdigest())   # frozen: the memo is not a field
        return self.__dict__["_digest"]

    def mismatch(self, outs) -> str | None:
        """Why ``outs`` differ from the expected outputs, or None when they match."""
        outs = outs if isinstance(outs, tuple) else (outs,)
        if len(outs) != len(self.expected):
            return f"returned {len(outs)} outputs, {self.against} {len(self.expected)}"
        for i, (got, want) in enumerate(zip(outs, self.expected)):
            got = to_numpy(got)
            if tuple(got.shape) != tuple(want.shape):
                return f"output {i} has shape {tuple(got.shape)}, {self.against} {tuple(want.shape)}"
            tol = self.rtol if self.rtol is not None else TOLERANCE.get(dtype_name(got.dtype), 1e-4)
            rel = relative_error(got, want)
            if not rel <= tol:
                return f"output {i} differs from {self.against}: max error {rel:.3g} of max |expected| (tolerance {tol:g})"
        return None


@dataclass(frozen=True)
class Task:
    """One config of one kernel on one target."""

    kernel: KernelRef
    config: Config
    target: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    check: CheckCase | None = None


@dataclass(frozen=True)
class Result:
    """What a candidate came to: status ``ok`` with its estimate, or ``invalid`` (a kernel rule),
    ``wrong`` (differs from the reference) or ``error`` (the kernel raised), with the reason."""

    config: Config
    target: str
    status: str
    latency_s: float | None = None
    reason: str = ""
    bottleneck: str = ""
    cached: bool = False

    def to_json(self) -> dict:
        return {"config": self.config.kwargs, "target": self.target, "status": self.status,
                "latency_s": self.latency_s, "reason": self.reason, "bottleneck": self.bottleneck}

    @classmethod
    def from_json(cls, d: dict, cached: bool = False) -> "Result":
        return cls(Config(d["config"]), d["target"], d["status"], d["latency_s"], d["reason"],
                   d.get("bottleneck", ""), cached)


def _why(exc: Exception) -> str:
    """One line: the rule and the error line of a kernel error, else the exception's first line."""
    if isinstance(exc, NkiError):
        text = exc.message.splitlines()[0] if exc.message else type(exc).__name__
        where = f" ({Path(exc.loc.file).name}:{exc.loc.line})" if getattr(exc, "loc", None) else ""
        return f"{exc.rule + ': ' if exc.rule else ''}{text}{where}"
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def evaluate(task: Task, kernel=None) -> Result:
    """Trace, validate, simulate against the check and estimate one candidate; never raises for what
    the kernel does (that becomes the result's status and reason)."""
    from nkihub.nki.estimate import paused
    from nkihub.nki.profile import profile

    kernel = kernel if kernel is not None else task.kernel.resolve()
    before = set(kernel._cache)
    try:
        with paused():
            return _evaluate(task, kernel, profile)
    finally:
        # a sweep traces many configs: keep the worker's memory to one candidate at a time
        for key in set(kernel._cache) - before:
            kernel._cache.pop(key, None)


def _evaluate(task: Task, kernel, profile) -> Result:
    config, target = task.config, task.target
    try:
        args = [a.zeros() if isinstance(a, ArgSpec) else a for a in task.args]
        # trace at the full shapes, check the rules, allocate and schedule (the disk compile cache
        # makes a resumed sweep skip this)
        report = profile(kernel, *args, target=target, **task.kwargs, **config.kwargs)
        if task.check is not None:
            check = task.check
            outs = kernel.run(*check.args, target=target, **check.kwargs, **config.kwargs)
            wrong = check.mismatch(outs)
            if wrong is not None:
                return Result(config, target, WRONG, None, wrong)
        return Result(config, target, OK, report.latency_s, "", report.bottleneck)
    except (KernelRuleError, NkiError) as exc:
        return Result(config, target, INVALID, None, _why(exc))
    except Exception as exc:  # a config the kernel cannot take: the candidate fails, the sweep goes on
        return Result(config, target, ERROR, None, _why(exc))
