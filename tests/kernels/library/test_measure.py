"""What the kernel cards' benchmark rows say: each estimate with the range the hardware likely falls in."""
from __future__ import annotations

from nkihub.kernels.library.measure import CostEstimate
from nkihub.simulator.uncertainty import latency_band


def test_a_card_row_gives_each_estimate_its_likely_range():
    est = CostEstimate("neuron/matmul", "[512, 512] @ [512, 512]", "bfloat16",
                       {"trn1": 20e-6, "trn2": 10e-6}, "tensor", 0.5, None, 1)
    row = est.card_row()
    for target, lat in est.latency_s.items():
        lo, hi = latency_band(lat, target)
        assert row[f"{target} estimated latency (us)"] == f"{lat * 1e6:.1f} ({lo * 1e6:.1f}-{hi * 1e6:.1f})"
        assert lo <= lat <= hi and lo < hi
