"""Estimate mode: cost a whole Python function that launches kernels, without running their math.

Inside ``with nki.estimating(("trn1", "trn2")) as est:`` every ``@nki.jit`` kernel launch is traced (or
taken from the cache) and costed on the cost model for each target instead of being simulated; the launch
returns zero-filled outputs of the right shapes and dtypes so the caller's code runs on. ``est`` then
holds one entry per launch and the summed latency per target. All figures are estimates.

    with nki.estimating(("trn1", "trn2")) as est:
        vit_attention(q, k, v)            # any function built on library kernels
    print(est.table())
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

import numpy as np

_ACTIVE: contextvars.ContextVar["Estimate | None"] = contextvars.ContextVar("nki_estimate", default=None)


@dataclass(frozen=True)
class Launch:
    """One kernel launch: its name, input shapes, and the cost-model report per target."""

    kernel: str
    shapes: tuple
    reports: dict


@dataclass
class Estimate:
    """The launches recorded inside :func:`estimating` and their summed estimated latency per target."""

    targets: tuple
    launches: list = field(default_factory=list)
    cost: bool = True

    def latency_s(self, target: str) -> float:
        """Sum of the estimated latencies of every launch on ``target`` (launches run back to back)."""
        return sum(launch.reports[target].latency_s for launch in self.launches)

    def table(self) -> str:
        """A readable table: one row per launch, estimated microseconds per target, and the total."""
        head = ["kernel (estimate)"] + [f"{t} us" for t in self.targets] + ["bottleneck"]
        rows = [[launch.kernel] + [f"{launch.reports[t].latency_s * 1e6:.1f}" for t in self.targets]
                + [launch.reports[self.targets[-1]].bottleneck] for launch in self.launches]
        rows.append(["total"] + [f"{self.latency_s(t) * 1e6:.1f}" for t in self.targets] + [""])
        widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [head] + rows)


def active() -> "Estimate | None":
    """The estimate being recorded, or None."""
    return _ACTIVE.get()


@contextlib.contextmanager
def estimating(targets=("trn2",), *, cost: bool = True):
    """Record and cost every kernel launch in the block on ``targets`` instead of simulating it.
    ``cost=False`` only compiles each launch (traced, checked and allocated for the first target, kept in
    the kernel's in-memory cache as a run would keep it) and records it with no reports: how a caller
    learns that a function's kernels fit a target at given shapes (a rule they break raises, as the run
    would) without running or costing them."""
    est = Estimate(tuple(targets), cost=cost)
    token = _ACTIVE.set(est)
    try:
        yield est
    finally:
        _ACTIVE.reset(token)


def record(kernel, args, kwargs, want_torch: bool):
    """Cost one launch of ``kernel`` on the active estimate's targets; return zero outputs shaped like the
    kernel's (torch tensors when ``want_torch``)."""
    from nkihub.nki.arrays import is_array, to_numpy, to_torch
    from nkihub.nki.outputs import returned_specs
    from nkihub.nki.profile import profile

    est = _ACTIVE.get()
    reports = {t: profile(kernel, *args, target=t, **kwargs) for t in est.targets} if est.cost else {}
    program = kernel.trace(*args, target=est.targets[0], **kwargs)
    shapes = tuple(tuple(to_numpy(a).shape) for a in args if is_array(a))
    est.launches.append(Launch(kernel.__name__, shapes, reports))
    outs = [np.zeros(shape, dtype) for shape, dtype in returned_specs(program)]
    if want_torch:
        outs = [to_torch(o) for o in outs]
    kind = program.meta.get("returns")
    if kind == "none":
        return None
    return outs[0] if kind == "single" else tuple(outs)


@contextlib.contextmanager
def paused():
    """Run the block with no estimate recording (the autotuner simulates and costs candidates itself
    even when called inside ``estimating``)."""
    token = _ACTIVE.set(None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
