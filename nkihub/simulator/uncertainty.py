"""How far from the hardware an estimate may be: a band from the cost model's error on published measurements.

``benchmarks/bench_calibration.py`` estimates every row of the calibration set (published latencies of NKI
kernels, ``benchmarks/calibration/rows.toml``) and prints, per target, the band of estimate/measured ratios of its
held-out rows (kernels no rule was chosen for): the 10th..90th percentile with ten rows or more, else their
whole spread. ``RATIO_BAND`` keeps that band from its last run, so an estimate ``e`` says the hardware
likely takes between ``e / high`` and ``e / low``. A target without rows borrows the widest band of the others: no
band is narrower than the evidence behind it.
"""
from __future__ import annotations

# estimate / measured over the held-out rows of the last run of benchmarks/bench_calibration.py (its
# "RATIO_BAND[...] from N held-out rows" lines); the run is named in docs/cost_model.md ("Calibration").
RATIO_BAND = {
    "trn1": (0.86, 1.02),   # 22 held-out rows, p10..p90 (2026-12-05, issue 31 fourth pass: partition broadcasts)
    "trn2": (0.99, 1.16),   # 4 held-out rows (of 11 trn2 rows), whole spread
}


def ratio_band(target: str) -> tuple[float, float]:
    """(low, high) estimate/measured ratios for ``target`` (a name): its own band, else the widest band
    of any target; widened to hold 1, so the estimate itself is always inside its range (a band from a few
    rows can sit on one side of 1)."""
    lo, hi = RATIO_BAND.get(target) or (min(b[0] for b in RATIO_BAND.values()),
                                        max(b[1] for b in RATIO_BAND.values()))
    return min(lo, 1.0), max(hi, 1.0)


def latency_band(latency_s: float, target: str) -> tuple[float, float]:
    """The range (low, high) in seconds the hardware's latency likely falls in for an estimate of
    ``latency_s`` on ``target``."""
    lo, hi = ratio_band(target)
    return latency_s / hi, latency_s / lo
