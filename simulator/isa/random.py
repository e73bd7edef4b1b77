"""Random-number instructions: rand (uniform [0, 1) values), dropout, and set_rng_seed.

The generator is the execution context's ``numpy.random.Generator`` (seeded per run), so results are
reproducible for a given seed but are not the hardware's XORWOW bit stream.
"""
from __future__ import annotations

import numpy as np

from simulator import cost_rules as cr
from simulator.isa.base import ELEMENTWISE, GENERATE, f32, fit, free_elems, register, store
from simulator.rules import COMPUTE_RULES, fail, same_free_size, same_partitions


def _cost(ins, program, target):
    n = (free_elems(ins.dst["dst"].shape) if ins.dst else 1) * cr.stride_slowdown(ins, program)
    return cr.seconds(cr.gpsimd_cycles(n), target, "gpsimd") if ins.engine == "gpsimd" else \
        cr.seconds(cr.vector_cycles(n), target, "vector")


def _rand(ins, src, dst, ctx):
    """dst = uniform random values in [0, 1) (integer dsts get uniform random bits)."""
    out = dst["dst"]
    if out.dtype.kind in "iu":
        info = np.iinfo(out.dtype)
        out[...] = ctx.rng.integers(info.min, info.max, size=out.shape, endpoint=True, dtype=out.dtype)
    else:
        store(out, ctx.rng.random(out.shape, dtype=np.float32))


register("rand", engines={"vector", "gpsimd"}, execute=_rand, cost=_cost, rules=COMPUTE_RULES,
         categories={GENERATE})


def _seed(ins, src, dst, ctx):
    """Reseed the random generator with the seed values of ``src_seeds`` (or the ``seed`` immediate)."""
    seed = [int(v) for v in np.asarray(src["src_seeds"]).reshape(-1)] if "src_seeds" in src else \
        [int(ins.attrs["seed"])]
    ctx.rng = np.random.default_rng(seed)


register("set_rng_seed", engines={"vector", "gpsimd"}, execute=_seed,
         cost=lambda ins, p, t: cr.seconds(cr.MIN_II_CYCLES, t, "vector"), rules=COMPUTE_RULES,
         categories={GENERATE})


def _prob_rule(ins, program, target):
    if "prob" not in ins.src and not 0.0 <= ins.attrs.get("prob", 0.0) <= 1.0:
        raise fail("dropout-prob", f"prob {ins.attrs.get('prob')} is not in [0, 1]", ins, program, "data")


def _dropout(ins, src, dst, ctx):
    """dst = data with each element zeroed with probability ``prob`` (an immediate or a [P, 1] column);
    kept elements are not rescaled."""
    out = dst["dst"]
    x = fit(f32(src["data"]), out.shape)
    prob = f32(src["prob"]).reshape(out.shape[0], *([1] * (out.ndim - 1))) if "prob" in src else \
        np.float32(ins.attrs["prob"])
    keep = ctx.rng.random(out.shape, dtype=np.float32) >= prob
    store(out, np.where(keep, x, np.float32(0)))


register("dropout", engines={"vector", "gpsimd"}, execute=_dropout, cost=_cost,
         rules=COMPUTE_RULES + (same_partitions("dst", "data", "prob"), same_free_size("dst", "data"),
                                _prob_rule),
         categories={ELEMENTWISE})
