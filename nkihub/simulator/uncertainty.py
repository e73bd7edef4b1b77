"""How far from the hardware an estimate may be: a band from the cost model's error on published measurements.

``benchmarks/bench_calibration.py`` estimates every row of the calibration set (published latencies of NKI
kernels, ``benchmarks/calibration/rows.toml``) and prints, per target, the spread of estimate/measured
ratios. ``RATIO_BAND`` keeps the 10th and 90th percentile of that ratio from its last run, so an estimate
``e`` says the hardware likely takes between ``e / high`` and ``e / low``: four rows in five of the
calibration set fell inside such a band. A target without rows borrows the widest band of the others: no
band is narrower than the evidence behind it.
"""
from __future__ import annotations

# estimate / measured, 10th and 90th percentile over the scored rows (fit and held-out) of the last run of
# benchmarks/bench_calibration.py; the run is named in docs/cost_model.md ("Calibration").
RATIO_BAND = {
    "trn1": (0.77, 1.20),   # 24 rows
    "trn2": (0.92, 1.07),   # 4 rows (one kernel): the band is their whole spread
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
