"""Read plans of the batched schedule's Dataflow (simulator.dataflow): the plans made from the latest
write records of a tile (``Dataflow._covering``) are the plans the event-per-element map makes, on
kernels whose tiles are written in column blocks and read whole (flash-attn's transposes into PSUM, a
ViT block's projections)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from nkihub.simulator import dataflow
from nkihub.simulator.dataflow import Dataflow


def _bf16(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32).astype(ml_dtypes.bfloat16)


def _flash():
    from nkihub.kernels.library.flash_attn.nki_kernels import flash_fwd_kernel
    q, k, v = (_bf16((1, 2, 512, 128), s) for s in range(3))
    return flash_fwd_kernel.specialize(q, k, v, True, 1 / math.sqrt(128), target="trn2").program


def _vit():
    from nkihub.kernels.library.vit_block.nki_kernels import vit_block_kernel
    s, d, h = 197, 768, 3072
    vec = lambda n, seed: _bf16((n,), seed, 0.1)  # noqa: E731
    mat = lambda o, i, seed: _bf16((o, i), seed, 0.03)  # noqa: E731
    params = [1 + vec(d, 1), vec(d, 2), mat(d, d, 3), vec(d, 4), mat(d, d, 5), vec(d, 6), mat(d, d, 7), vec(d, 8),
              mat(d, d, 9), vec(d, 10), 1 + vec(d, 11), vec(d, 12), mat(h, d, 13), vec(h, 14), mat(d, h, 15),
              vec(d, 16)]
    return vit_block_kernel.specialize(_bf16((1, s, d), 0), *params, 12, 1e-12, target="trn2").program


def _canonical(df: Dataflow, plan):
    """A read plan with its events named by what they are (event ids differ: the map makes a tile's
    initial-contents event when first asked for it)."""
    gather = None if plan.gather is None else ([df.events[int(e)] for e in plan.gather[0].ravel()],
                                               plan.gather[1].tolist())
    return (plan.memory, [(b.axis, b.start, b.stop, df.events[b.event], b.base, b.strides) for b in plan.boxes],
            gather, plan.via, plan.dtype)


@pytest.mark.parametrize("make", [_flash, _vit], ids=["flash-attn", "vit-block"])
def test_plans_from_the_write_records_are_the_maps_plans(make, monkeypatch):
    program = make()
    maps = {"calls": 0}
    events_of = Dataflow._events_of

    def counted(self, name):
        maps["calls"] += 1
        return events_of(self, name)
    monkeypatch.setattr(Dataflow, "_events_of", counted)
    fast = Dataflow(program)
    from_records = maps["calls"]
    monkeypatch.setattr(dataflow, "COVER_WRITES", 0)
    maps["calls"] = 0
    ref = Dataflow(program)
    assert from_records < maps["calls"]     # some reads the last write does not cover were planned from records
    multi = sum(len(p.boxes) > 1 for plans in fast.src_plans for p in plans.values())
    assert multi > 0
    assert fast.levels == ref.levels and fast.dropped == ref.dropped
    for mine, theirs in ((fast.src_plans, ref.src_plans), (fast.old_plans, ref.old_plans)):
        for a, b in zip(mine, theirs):
            assert a.keys() == b.keys()
            assert all(_canonical(fast, a[r]) == _canonical(ref, b[r]) for r in a)
