"""The harness's rows: one per public nki-library kernel entry point that has a torch reference or an
integration test, each with small legal inputs (from the parameter lists of the library's integration
tests where possible) and the tolerance that test uses.

A row is a function decorated with :func:`row` that receives a :class:`Lib` (imports from the snapshot)
and returns a :class:`Case`. Importing the kernel and the reference happens inside the row function, so
an import failure is reported as the row's first stage.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

ROWS: dict[str, "Row"] = {}


@dataclass(frozen=True)
class Row:
    name: str
    kernel: str          # "module:attr" under nkilib_src.nkilib, the entry point being measured
    reference: str       # "module:attr" of the torch reference (or a note when the test has none)
    source: str          # where the shapes come from (integration test and case)
    build: Callable
    needs: str = ""      # what the row depends on beyond the basics (mx, collectives, lnc2), for the table


@dataclass
class Case:
    """What a row runs: ``kernel(**inputs)`` launched on ``lnc`` logical cores, compared output by
    output (in return order) with ``expected`` (a callable returning the reference outputs, or arrays),
    or validated by ``check`` where the library's test validates with its own code.

    A multi-rank row (the library's ``collective_ranks=N`` tests) gives ``ranks``, one keyword-argument
    dict per rank, instead of ``inputs``; the ranks run as one Program (``nki.multicore.run_ranks``) and
    their outputs are compared rank by rank, in rank order, with ``expected()`` (all ranks' outputs, flat).
    """

    kernel: Callable
    inputs: dict
    expected: Callable
    lnc: int = 1
    rtol: float = 1e-5
    atol: float = 1e-8
    notes: str = ""
    check: Callable | None = None   # custom validation ``check(outputs) -> (ok, summary)`` replacing expected
    ranks: list | None = None       # per-rank keyword arguments of a multi-rank launch (``inputs`` unused)
    target: str | None = None       # the platform the test runs on ("trn3" for the MX kernels), else the default


FULL: dict[str, "Row"] = {}   # row name -> the same kernel at the largest shape of its test's parameter list


def full_shape(name: str, *, source: str):
    """Register ``fn(lib) -> Case``: row ``name``'s kernel at the largest shape its integration test lists
    (``source`` says which), run by the harness's ``--full`` mode instead of the small shape."""
    def deco(fn):
        if name not in ROWS:
            raise ValueError(f"full shape of unknown row {name!r} (define the row first)")
        if name in FULL:
            raise ValueError(f"full shape of row {name!r} is defined twice")
        small = ROWS[name]
        FULL[name] = Row(name, small.kernel, small.reference, source, fn, small.needs)
        return fn
    return deco


def row(name: str, *, kernel: str, reference: str, source: str, needs: str = ""):
    """Register a row builder ``fn(lib) -> Case``."""
    def deco(fn):
        if name in ROWS:
            raise ValueError(f"row {name!r} is defined twice")
        ROWS[name] = Row(name, kernel, reference, source, fn, needs)
        return fn
    return deco


class Lib:
    """Imports from the snapshot's ``nkilib_src.nkilib`` package."""

    PREFIX = "nkilib_src.nkilib."

    def module(self, dotted: str):
        return importlib.import_module(self.PREFIX + dotted)

    def get(self, spec: str):
        """``"core.cumsum.cumsum:cumsum"`` -> the object."""
        mod, _, attr = spec.partition(":")
        obj = self.module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


def torch_reference(fn, *, cast_back=None, drop=()):
    """Call a torch reference the way the library's tests do: numpy arrays become torch tensors
    (fp16/bf16 computed in fp32), other arguments pass through; returns the outputs as numpy arrays
    (cast to ``cast_back`` when given, as the tests' ``preserve_lower_precision`` does)."""
    import torch

    def call(**kwargs):
        args = {}
        for k, v in kwargs.items():
            if k in drop:
                continue
            if isinstance(v, np.ndarray):
                if v.dtype.kind == "f" or "bfloat16" in str(v.dtype) or "float8" in str(v.dtype):
                    v = torch.from_numpy(np.ascontiguousarray(v.astype(np.float32))) \
                        if v.dtype != np.float32 else torch.from_numpy(np.ascontiguousarray(v))
                else:
                    v = torch.from_numpy(np.ascontiguousarray(v))
            args[k] = v
        out = fn(**args)
        vals = list(out.values()) if isinstance(out, dict) else list(out) if isinstance(out, (tuple, list)) \
            else [out]
        res = []
        for v in vals:
            a = v.detach().float().numpy() if hasattr(v, "detach") and v.is_floating_point() else \
                (v.detach().numpy() if hasattr(v, "detach") else np.asarray(v))
            res.append(a.astype(cast_back) if cast_back is not None and a.dtype.kind == "f" else a)
        return res
    return call


def rng(seed: int = 42) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(shape, dtype, seed: int = 42, scale: float = 1.0) -> np.ndarray:
    """Gaussian values rounded to ``dtype``."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32).astype(dtype)
