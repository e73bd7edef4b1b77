"""benchmarks/bench_models.py: each family's published widths and token count, and the model flops MFU
is counted against (no tracing here: the benchmark itself costs minutes)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_models  # noqa: E402


@pytest.mark.parametrize("family, s, d, heads, hidden, act", [
    ("ViT", 197, 768, 12, 3072, "gelu"),
    ("DeiT", 198, 384, 6, 1536, "gelu"),                      # CLS and distillation tokens
    ("DINOv2 with registers", 1374, 384, 6, 1536, "gelu"),    # 37 x 37 patches, CLS and 4 registers
    ("SigLIP vision", 729, 1152, 16, 4304, "gelu_tanh"),      # no CLS; head dim 72
    ("CLIP vision", 257, 1024, 16, 4096, "quick_gelu"),
])
def test_shapes_follow_the_published_configs(family, s, d, heads, hidden, act):
    sh = bench_models.Shape.of(family)
    assert (sh.s, sh.d, sh.heads, sh.hidden, sh.act) == (s, d, heads, hidden, act)


def test_vit_b16_flops_per_image():
    # 12 layers of 24 S D^2 + 4 S^2 D (QKV, O, MLP at 4D; scores and PV) plus the patch embedding
    sh = bench_models.Shape.of("ViT")
    per_image = sh.flops() / bench_models.BATCH
    assert 34.5e9 < per_image < 35.5e9      # the usual "17.6 GMACs" of ViT-B/16 at 224
