"""Measure one library function on one case: correct against the torch reference, simulator time against
torch doing the same math in the same run, and cost-model estimates per target (with the fused-over-
unfused speedup where the package has an unfused baseline).

The main job and ``benchmarks/bench_all.py`` both measure through here, so the kernel cards on the Hub
and the benchmark tables show the same numbers.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from nkihub.kernels.library.cases import TOLERANCE, Case, max_rel_error

TARGETS = ("trn1", "trn2")


@dataclass(frozen=True)
class Check:
    """A run on the simulator against the torch reference (times measured side by side)."""

    repo: str
    size: str
    dtype: str
    ok: bool
    max_rel_error: float
    sim_s: float          # replayed call (traced once before)
    torch_s: float        # the torch reference on the CPU
    first_call_s: float   # tracing + checking + allocation + run

    @property
    def sim_over_torch(self) -> float:
        return self.sim_s / max(self.torch_s, 1e-9)


@dataclass(frozen=True)
class CostEstimate:
    """Cost-model estimates (seconds) of one call per target, and of the unfused baseline if any."""

    repo: str
    size: str
    dtype: str
    latency_s: dict
    bottleneck: str
    mfu: float
    baseline_s: dict | None
    launches: int

    def speedup(self, target: str) -> float | None:
        """Estimated fused-over-unfused speedup on ``target``."""
        if not self.baseline_s:
            return None
        return self.baseline_s[target] / self.latency_s[target]

    def card_row(self) -> dict:
        """A row of the kernel card's benchmark table."""
        from nkihub.simulator.uncertainty import latency_band
        row = {"shape": self.size, "dtype": self.dtype}
        for t, lat in self.latency_s.items():
            lo, hi = latency_band(lat, t)
            row[f"{t} estimated latency (us)"] = f"{lat * 1e6:.1f} ({lo * 1e6:.1f}-{hi * 1e6:.1f})"
        row["bottleneck engine"] = self.bottleneck
        if self.baseline_s:
            row["vs unfused (trn2)"] = f"{self.speedup('trn2'):.2f}x"
        return row

    def to_json(self) -> dict:
        return asdict(self)


def _timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def check(module, case: Case, size: str = "small", dtype=torch.bfloat16) -> Check:
    """Run ``case`` through ``module``'s function on the simulator and compare with the reference."""
    fn = getattr(module, case.function)
    kwargs = case.inputs(size, dtype)
    t0 = time.perf_counter()
    out = fn(**kwargs)
    first = time.perf_counter() - t0
    expected = case.reference(**kwargs)
    err = max_rel_error(out, expected)
    sim_s = _timed(lambda: fn(**kwargs))
    torch_s = _timed(lambda: case.reference(**kwargs))
    return Check(case.repo, size, str(dtype).replace("torch.", ""), err <= TOLERANCE[dtype], err, sim_s, torch_s,
                 first)


def estimate(module, case: Case, size: str, dtype=torch.bfloat16, targets=TARGETS) -> CostEstimate:
    """Cost ``case`` at ``size`` on ``targets`` (nothing is simulated), and its unfused baseline."""
    import nki

    kwargs = case.inputs(size, dtype)
    with nki.estimating(targets) as est:
        getattr(module, case.function)(**kwargs)
    baseline = None
    if case.baseline is not None:
        with nki.estimating(targets) as base:
            case.baseline(**kwargs)
        baseline = {t: base.latency_s(t) for t in targets}
    heaviest = max(est.launches, key=lambda launch: launch.reports[targets[-1]].latency_s)
    report = heaviest.reports[targets[-1]]
    return CostEstimate(case.repo, case.describe(size), str(dtype).replace("torch.", ""),
                        {t: est.latency_s(t) for t in targets}, report.bottleneck, report.mfu, baseline,
                        len(est.launches))
