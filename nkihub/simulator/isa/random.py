"""Random-number instructions: rand (uniform [0, 1) values), dropout, and set_rng_seed.

The generator is the execution context's ``numpy.random.Generator`` (seeded per run), so results are
reproducible for a given seed but are not the hardware's XORWOW bit stream.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa.base import ELEMENTWISE, GENERATE, RANDOM, f32, fit, free_elems, register, store
from nkihub.simulator.rules import (COMPUTE_RULES, NC_NAMES, NC_ORDER, Documented, cited_same_free_size,
                                  cited_same_partitions, documents, partitions, target_gate)


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


RNG_DTYPE = Documented("dtype", ("dst",), "nki.isa.rng", "dst is an integer tile: int8/16/32, uint8/16/32")
RNG_ENGINE = Documented("rng-engine", ("dst",), "nki.isa.rng", "the Vector Engine, or GpSimd from NeuronCore-v3")
STATE_ENGINE = Documented("rng-engine", ("dst", "src_seeds"), None,
                          "GpSimd from NeuronCore-v3, the Vector Engine from NeuronCore-v4")


def _engine_rule(ins, program, target, constraint: Documented, role: str | None, gpsimd_from: str,
                 vector_from: str = "gen2") -> None:
    """Refuse the engine ``ins`` runs on when ``target`` is older than the engine's first version."""
    first = gpsimd_from if ins.engine == "gpsimd" else vector_from
    if NC_ORDER.index(target.nc_version) < NC_ORDER.index(first):
        raise constraint.fail(f"{ins.opcode} on the {ins.engine} engine needs {NC_NAMES[first]} or newer, not "
                              f"{target.name}", ins, program, role)


@documents(RNG_DTYPE, RNG_ENGINE)
def _rng_rule(ins, program, target):
    """nisa.rng (attr ``bits``): an integer dst; GpSimd from NeuronCore-v3."""
    spec = program.tensor_of(ins.dst["dst"])
    if ins.attrs.get("bits") and spec.np_dtype.kind not in "iu":
        raise RNG_DTYPE.fail(f"rng writes random bits into an integer tile, not {spec.dtype}", ins, program, "dst")
    _engine_rule(ins, program, target, RNG_ENGINE, "dst", gpsimd_from="gen3")


register("rand", engines={"vector", "gpsimd"}, execute=_rand, cost=_cost, rules=COMPUTE_RULES + (_rng_rule,),
         categories={GENERATE, RANDOM})


def _seed(ins, src, dst, ctx):
    """Reseed the random generator with the seed values of ``src_seeds`` (or the ``seed`` immediate)."""
    seed = [int(v) for v in np.asarray(src["src_seeds"]).reshape(-1)] if "src_seeds" in src else \
        [int(ins.attrs["seed"])]
    ctx.rng = np.random.default_rng(seed)


SEED_SHAPE = Documented("rng-seed", ("src_seeds",), "nki.isa.set_rng_seed", "src_seeds is a [1, 1] tensor")
SEED_DTYPE = Documented("rng-seed-dtype", ("src_seeds",), "nki.isa.set_rng_seed", "src_seeds holds a 32-bit value")


@documents(SEED_SHAPE, SEED_DTYPE)
def _seed_rule(ins, program, target):
    """A seed tile is one 32-bit value."""
    ap = ins.src.get("src_seeds")
    if ap is None:
        return
    if ap.size != 1:
        raise SEED_SHAPE.fail(f"src_seeds holds {ap.size} values; the seed is a [1, 1] tensor", ins, program,
                              "src_seeds")
    if program.tensor_of(ap).np_dtype.itemsize != 4:
        raise SEED_DTYPE.fail(f"src_seeds is {program.tensor_of(ap).dtype}; the seed is a 32-bit value", ins,
                              program, "src_seeds")


register("set_rng_seed", engines={"vector", "gpsimd"}, execute=_seed,
         cost=lambda ins, p, t: cr.seconds(cr.MIN_II_CYCLES, t, "vector"), rules=COMPUTE_RULES + (_seed_rule,),
         categories={GENERATE, RANDOM})


def _columns(ins, program, constraint: Documented, ref: str, *roles: str) -> None:
    """Refuse a tile operand among ``roles`` that is not a [P, 1] column of ``ref``'s P partitions."""
    p = partitions(ins.dst.get(ref) or ins.src[ref])
    for role in roles:
        ap = ins.src.get(role)
        if ap is not None and (partitions(ap) != p or ap.size != p):
            raise constraint.fail(f"'{role}' must be a number or a ({p}, 1) tile, one value per partition",
                                  ins, program, role)


PROB = Documented("dropout-prob", ("data",), "nki.isa.dropout", "prob, a number, is a probability in [0, 1]")
PROB_SHAPE = Documented("scalar-operand-shape", ("prob",), "nki.isa.dropout",
                        "prob, a tile, is [P, 1]: one probability per partition of data")


@documents(PROB, PROB_SHAPE)
def _prob_rule(ins, program, target):
    """A numeric prob in [0, 1]; a prob tile one column of data's partitions."""
    if "prob" not in ins.src and not 0.0 <= ins.attrs.get("prob", 0.0) <= 1.0:
        raise PROB.fail(f"prob {ins.attrs.get('prob')} is not in [0, 1]", ins, program, "data")
    _columns(ins, program, PROB_SHAPE, "data", "prob")


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
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "data"), cited_same_free_size("dst", "data"),
                                _prob_rule),
         categories={ELEMENTWISE, RANDOM})


def _rand2(ins, src, dst, ctx):
    """dst = uniform random values in [min, max] (immediates or [P, 1] columns), computed in fp32 and cast
    to dst's dtype."""
    out = dst["dst"]
    col = (out.shape[0],) + (1,) * (out.ndim - 1)
    lo = f32(src["min"]).reshape(col) if "min" in src else np.float32(ins.attrs["min"])
    hi = f32(src["max"]).reshape(col) if "max" in src else np.float32(ins.attrs["max"])
    store(out, lo + (hi - lo) * ctx.rng.random(out.shape, dtype=np.float32))


_gen4 = target_gate("gen4")   # the rand2 page: NeuronCore-v4 and newer
BOUNDS_SHAPE = Documented("scalar-operand-shape", ("min", "max"), "nki.isa.rand2",
                          "min and max are scalars or vectors: a tile is [P, 1] for dst's P partitions")
BOUNDS_ORDER = Documented("rand2-range", ("dst",), "nki.isa.rand2", "min < max for a valid range")


@documents(BOUNDS_SHAPE, BOUNDS_ORDER)
def _rand2_rules(ins, program, target):
    """min/max tiles are [P, 1] columns of dst; immediate bounds have min < max."""
    _columns(ins, program, BOUNDS_SHAPE, "dst", "min", "max")
    lo, hi = ins.attrs.get("min"), ins.attrs.get("max")
    if lo is not None and hi is not None and not lo < hi:
        raise BOUNDS_ORDER.fail(f"min {lo:g} is not below max {hi:g}", ins, program, "dst")


register("rand2", engines={"vector"}, execute=_rand2, cost=_cost, rules=COMPUTE_RULES + (_gen4, _rand2_rules),
         categories={GENERATE, RANDOM})

# The generator state as the engines expose it: XORWOW keeps 6 32-bit words per lane (24 on the Vector
# Engine of v4). Here the state is a set of seed words of numpy's generator: reading it draws fresh words
# and reseeds the generator with them, so writing the words back replays the stream that followed.
STATE_WORDS = {"gpsimd": 6, "vector": 24}


STATE_DTYPE = Documented("rng-state-dtype", ("dst", "src_seeds"), None, "the state tile is uint32")
STATE_SIZE = Documented("rng-state", ("dst", "src_seeds"), None,
                        "the state tile holds 6 words per partition on GpSimd, 24 on the Vector Engine")
STATE_BUFFER = Documented("rng-state-buffer", ("dst", "src_seeds"), None,
                          "src_seeds is in SBUF; dst in SBUF (PSUM too on the Vector Engine of NeuronCore-v4)")


@documents(STATE_DTYPE, STATE_SIZE, STATE_BUFFER, STATE_ENGINE)
def _state_rule(ins, program, target):
    """The engine's version, the buffer, dtype and words of the generator-state tile."""
    role = "dst" if ins.dst else "src_seeds"
    ap = ins.dst.get("dst") or ins.src["src_seeds"]
    _engine_rule(ins, program, target, STATE_ENGINE, role, gpsimd_from="gen3", vector_from="gen4")
    if program.tensor_of(ap).buffer == "psum" and (role == "src_seeds" or ins.engine != "vector"):
        raise STATE_BUFFER.fail(f"{role} must be in SBUF", ins, program, role)
    want = STATE_WORDS[ins.engine]
    if program.tensor_of(ap).dtype != "uint32":
        raise STATE_DTYPE.fail("the state tile must be uint32", ins, program, role)
    if ap.size // max(1, ap.shape[0]) != want:
        raise STATE_SIZE.fail(f"the state tile must hold {want} uint32 words per partition on the {ins.engine} "
                              "engine", ins, program, role)


_gen3 = target_gate("gen3", role=None)   # the rand_get_state / rand_set_state pages: NeuronCore-v3 and newer


def _get_state(ins, src, dst, ctx):
    """dst (uint32 [P, 6] on GpSimd, [P, 24] on Vector) = the generator state; the generator continues from
    that state, so rand_set_state with these words replays what follows."""
    out = dst["dst"]
    words = ctx.rng.integers(0, 2**32, size=out.shape, dtype=np.uint32)
    out[...] = words
    ctx.rng = np.random.default_rng(words.reshape(-1).tolist())


def _set_state(ins, src, dst, ctx):
    """Load the generator state from ``src_seeds`` (uint32 words, as rand_get_state wrote them)."""
    ctx.rng = np.random.default_rng(np.asarray(src["src_seeds"]).astype(np.uint32).reshape(-1).tolist())


_state_cost = lambda ins, p, t: cr.seconds(cr.gpsimd_cycles(STATE_WORDS[ins.engine]), t, ins.engine)  # noqa: E731
register("rand_get_state", engines={"gpsimd", "vector"}, execute=_get_state, cost=_state_cost,
         rules=COMPUTE_RULES + (_gen3, _state_rule), categories={GENERATE, RANDOM})
register("rand_set_state", engines={"gpsimd", "vector"}, execute=_set_state, cost=_state_cost,
         rules=COMPUTE_RULES + (_gen3, _state_rule), categories={GENERATE, RANDOM})
