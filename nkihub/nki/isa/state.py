"""``nki.isa`` names about engine state and versions: ranged random numbers (``rand2``), the random
generator's state (``rand_get_state`` / ``rand_set_state``), ``get_nc_sub_version`` and
``NkiInstruction``; and tensor_scalar_cumulative (a scan with the Vector Engine's accumulator)."""
from __future__ import annotations

from nkihub.nki import tracing
from nkihub.nki.isa import _engine, _scalar_or_tile, _tile, emit, engine
from nkihub.nki.tensor import NkiTensor


def rand2(dst, min, max, name=None):  # noqa: A002  (AWS's parameter names)
    """dst = uniform random values in [min, max] (numbers or [P, 1] tiles), fp32 cast to dst's dtype;
    Vector Engine, NeuronCore-v4. The stream is numpy's generator, not the hardware's XORWOW."""
    _tile(dst, "dst")
    src, attrs = {}, {}
    _scalar_or_tile(min, "min", src, attrs)
    _scalar_or_tile(max, "max", src, attrs)
    emit("rand2", "vector", {"dst": dst}, src, attrs)
    return dst


def rand_get_state(dst, engine=engine.gpsimd, name=None):
    """dst (uint32 [P, 6] on GpSimd, [P, 24] on Vector) = the random generator's state; rand_set_state
    with it replays the numbers that follow."""
    _tile(dst, "dst")
    emit("rand_get_state", _engine(engine, "gpsimd"), {"dst": dst}, {})
    return dst


def rand_set_state(src_seeds, engine=engine.gpsimd, name=None):
    """Load the random generator's state from uint32 ``src_seeds`` ([P, 6] GpSimd, [P, 24] Vector)."""
    _tile(src_seeds, "src_seeds")
    emit("rand_set_state", _engine(engine, "gpsimd"), {}, {"src_seeds": src_seeds})


def get_nc_sub_version() -> int:
    """The stepping of the target's NeuronCore generation: 1 for trn3 (NeuronCore-v4 with the Vector
    Engine's exponential, which nkihub models), else 0."""
    from nkihub.simulator.targets import get_target
    b = tracing.current()
    target = b.target if b is not None else get_target()
    return 1 if target.nc_version == "gen4" else 0


class NkiInstruction:
    """A handle on an emitted instruction; ``depends_on(*producers)`` orders it after them. The simulator
    and the cost model already keep program order and data dependencies, so the extra edges are recorded
    and change nothing."""

    def __init__(self, handle=None):
        self.handle = handle
        self.producers: list = []

    def depends_on(self, *producers) -> "NkiInstruction":
        self.producers.extend(producers)
        return self


def _vector_accumulator(dst):
    """The Vector Engine's accumulator registers (one fp32 per partition) of the program instance being
    traced, as a [partitions, 1] tensor of the Program, viewed on ``dst``'s partitions: instructions that
    continue an accumulation (``reduce_cmd=reduce``) read what the previous one left there, and the
    dependency is data like any other."""
    from nkihub.simulator.rules import start_partition
    b = tracing.current()
    key = len(b.instances)
    accs = b.__dict__.setdefault("_vector_acc", {})
    if key not in accs:
        accs[key] = NkiTensor(b.new_tensor((b.target.partitions, 1), "float32", "sbuf", name="vector_acc"))
    ap = dst.to_ap()
    start = start_partition(ap, b.program)
    return accs[key][start:start + ap.shape[0], 0:1]


def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd="reset_reduce", name=None):
    """dst[:, i] = reg = op1(op0(src[:, i], imm0), reg) along the free axis of each partition (Vector
    Engine); reg starts at op1's identity (``reset_reduce``), at ``imm1`` (``load_reduce``) or where the
    previous accumulating Vector instruction left it (``reduce``). op1 is one of add, subtract, multiply,
    maximum, minimum; imm0/imm1 are numbers or [P, 1] tiles."""
    from nkihub.nki.isa import _cmd
    from nkihub.nki.ops import op_name
    _tile(dst, "dst"), _tile(src, "src")
    cmd = _cmd(reduce_cmd)
    acc = _vector_accumulator(dst)
    srcs, attrs = {"src": src}, {"op0": op_name(op0), "op1": op_name(op1), "reduce_cmd": cmd}
    _scalar_or_tile(imm0, "imm0", srcs, attrs)
    _scalar_or_tile(imm1, "imm1", srcs, attrs)
    if cmd == "reduce":
        srcs["acc"] = acc
    emit("tensor_scalar_cumulative", "vector", {"dst": dst, "acc": acc}, srcs, attrs)
    return dst
