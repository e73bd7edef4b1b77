"""Instruction issue: program order for ``nki`` kernels, list scheduling for ``neuronxcc.nki`` kernels (the
compiler interleaves independent ``affine_range`` iterations), and at most 8 PSUM banks in use at once."""
from __future__ import annotations

import numpy as np

import neuronxcc.nki as onki
import neuronxcc.nki.isa as onisa
import neuronxcc.nki.language as onl
from nkihub.simulator import issue
from nkihub.simulator.costmodel import schedule
from nkihub.simulator.targets import TRN2


def _scale_exp_reduce(x):
    """Per row block: Vector scales, Scalar exps, Vector reduces what Scalar made; blocks are independent."""
    out = onl.ndarray((x.shape[0], 1), dtype=np.float32, buffer=onl.shared_hbm)
    for i in onl.affine_range(x.shape[0] // 128):
        t = onl.load(x[i * 128:(i + 1) * 128, :])
        v = onisa.tensor_scalar(data=t, op0=onl.multiply, operand0=2.0)
        e = onisa.activation(op=onl.exp, data=v)
        s = onisa.tensor_reduce(onl.add, data=e, axis=(1,))
        onl.store(out[i * 128:(i + 1) * 128, :], s)
    return out


listed = onki.jit(_scale_exp_reduce)


def _both(program):
    """The schedule as the program's compiler issues it, and the same program issued in program order."""
    as_given = schedule(program, TRN2)
    meta = program.meta
    program.meta = {**meta, "issue": "order"}
    try:
        return as_given, schedule(program, TRN2)
    finally:
        program.meta = meta


def test_neuronxcc_kernels_are_list_scheduled_and_overlap_their_iterations():
    program = listed.trace(np.zeros((1024, 2048), np.float32), target="trn2")
    assert issue.policy(program) is issue.LIST
    interleaved, ordered = _both(program)
    for sch in (interleaved, ordered):
        for i in range(len(program.instructions)):
            assert all(sch.end[j] <= sch.start[i] + 1e-12 for j in sch.waits[i])
    # In order, block i+1's scaling waits behind block i's reduce, which waits for its exp: the Scalar
    # Engine idles. Interleaved, the next block's scaling runs while the exp does.
    assert interleaved.latency_s < 0.8 * ordered.latency_s


def test_in_order_queues_run_each_engine_in_program_order():
    program = listed.trace(np.zeros((1024, 2048), np.float32), target="trn2")
    _, ordered = _both(program)
    for q, idxs in ordered.queue_order().items():
        if not q.startswith("dma"):
            starts = [ordered.start[i] for i in idxs]
            assert starts == sorted(starts), q


@onki.jit
def many_psum_tiles(a, b):
    """Sixteen independent accumulation groups, each copied out: more PSUM tiles than banks."""
    out = onl.ndarray((16 * 128, 512), dtype=np.float32, buffer=onl.shared_hbm)
    bt = onl.load(b)
    for g in onl.affine_range(16):
        acc = onl.zeros((128, 512), dtype=np.float32, buffer=onl.psum)
        acc += onisa.nc_matmul(onl.load(a[:, g * 128:(g + 1) * 128]), bt)
        onl.store(out[g * 128:(g + 1) * 128, :], onl.copy(acc))
    return out


def test_at_most_eight_psum_banks_are_in_use_at_once():
    a = np.zeros((128, 16 * 128), np.float32)
    b = np.zeros((128, 512), np.float32)
    program = many_psum_tiles.trace(a, b, target="trn2")
    sch = schedule(program, TRN2)
    spans = {}
    for i, ins in enumerate(program.instructions):
        for ap in (*ins.src.values(), *ins.dst.values()):
            if program.tensors[ap.tensor].buffer == "psum":
                lo, hi = spans.get(ap.tensor, (sch.start[i], sch.end[i]))
                spans[ap.tensor] = (min(lo, sch.start[i]), max(hi, sch.end[i]))
    events = sorted([(lo, 1) for lo, _ in spans.values()] + [(hi, -1) for _, hi in spans.values()],
                    key=lambda e: (e[0], e[1]))
    live = peak = 0
    for _, step in events:
        live += step
        peak = max(peak, live)
    assert len(spans) == 16 and peak <= TRN2.psum_banks


@onki.jit
def invariant_in_loop(x, y):
    """x * y does not change across the loop: neuronxcc computes it once; each iteration adds its own."""
    out = onl.ndarray((4 * 128, 512), dtype=np.float32, buffer=onl.shared_hbm)
    a, b = onl.load(x), onl.load(y)
    for i in onl.affine_range(4):
        prod = onisa.tensor_tensor(a, b, op=onl.multiply)
        onl.store(out[i * 128:(i + 1) * 128, :], onisa.tensor_scalar(data=prod, op0=onl.add, operand0=float(i)))
    return out


def test_a_computation_repeated_on_unchanged_inputs_costs_once():
    x = np.ones((128, 512), np.float32)
    program = invariant_in_loop.trace(x, x, target="trn2")
    same = issue.recomputed(program)
    products = [i for i, ins in enumerate(program.instructions) if ins.opcode == "tensor_tensor"]
    assert len(products) == 4 and same == {i: products[0] for i in products[1:]}
    once, every = _both(program)
    assert [once.cost[i] for i in products[1:]] == [0.0] * 3 and every.cost[products[1]] > 0
    assert all(once.start[i] >= once.end[products[0]] for i in products[1:])
    np.testing.assert_allclose(invariant_in_loop(x, x)[128:256], np.full((128, 512), 2.0))   # values unchanged
