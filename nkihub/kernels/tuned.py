"""The tuned configs a kernel package carries: ``tuned.json`` beside the package's kernels, written by
``nkihub tune-package`` / ``nkihub publish --tune`` (nki.autotune sweeps on the cost model), read at launch.

``configure(kernel, args, kwargs)`` returns the arguments with the tuned keyword constants of the
kernel for the current target and these exact tensor shapes and dtypes; other shapes keep the launcher's
own values. The target is ``NEURON_PLATFORM_TARGET_OVERRIDE`` (trn1, trn2, trn3), else trn2, as the
simulator chooses it.

This module stands alone (standard library only): ``nkihub publish`` vendors it into every published
kernel with :mod:`kernels.torch_ops`, so a package on the Hub applies its tuned configs with no nkihub
installed; the configs travel as data (``tuned.json``), not as code.
"""
from __future__ import annotations

import functools
import inspect
import json
import os
from pathlib import Path

FILE = "tuned.json"
FORMAT_VERSION = 1
DEFAULT_TARGET = "trn2"   # the simulator's default target (simulator.targets), restated: nothing is imported


def current_target() -> str:
    """The target whose configs apply: NEURON_PLATFORM_TARGET_OVERRIDE, else trn2."""
    return (os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "").strip() or DEFAULT_TARGET).lower()


def tensor_key(args) -> list:
    """[[shape], dtype] of each tensor argument (torch tensors or numpy arrays), in order."""
    out = []
    for a in args:
        shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
        if shape is not None and dtype is not None and not isinstance(a, (int, float, bool, str)):
            out.append([list(shape), str(dtype).replace("torch.", "")])
    return out


@functools.lru_cache(maxsize=None)
def _load(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if data.get("version") == FORMAT_VERSION else {}


def _function(kernel):
    return getattr(kernel, "fn", None) or getattr(kernel, "func", None) or kernel


def entries(kernel) -> list[dict]:
    """The tuned entries of ``kernel`` from the tuned.json beside its source file (none if absent)."""
    fn = _function(kernel)
    try:
        # not resolved: in a Hub cache snapshot the files are links into a blob store
        path = Path(os.path.abspath(inspect.getsourcefile(fn))).parent / FILE
    except TypeError:
        return []
    return _load(str(path)).get("kernels", {}).get(fn.__name__, [])


def lookup(kernel, args, target: str | None = None) -> dict | None:
    """The tuned config (keyword constants) of ``kernel`` for these tensor arguments on ``target``."""
    target = target or current_target()
    key = tensor_key(args)
    for entry in entries(kernel):
        if entry.get("target") == target and entry.get("tensors") == key:
            return dict(entry["config"])
    return None


def configure(kernel, args, kwargs):
    """(args, kwargs) with the tuned config applied: a tuned parameter replaces the value the launcher
    passed, positionally or by keyword; without a tuned entry both are returned unchanged."""
    config = lookup(kernel, list(args) + list(kwargs.values()))
    if not config:
        return args, kwargs
    try:
        sig = inspect.signature(_function(kernel))
        bound = sig.bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs
    # a parameter the kernel no longer has (tuned.json older than the kernel) is left out
    bound.arguments.update({k: v for k, v in config.items() if k in sig.parameters})
    return bound.args, bound.kwargs
