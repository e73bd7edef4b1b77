"""neuronxcc ``t.broadcast_to((M, F))`` of a one-partition float32 tile is a Tensor Engine matmul ("NKI invokes
such matmul under the hood", the Trainium/Inferentia2 architecture page): up to one PSUM tile (512 float32) the
result stays in PSUM, so the Vector instruction that reads it streams at N cycles, not 2N; a wider row is one
matmul per 512 columns copied into SBUF on the engine with less work so far ("based on engine workload")."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkihub.simulator import cost_rules as cr
from nkihub.simulator.costmodel import schedule
from nkihub.simulator.targets import get_target


@nki.jit
def scale_by_row(x, b):
    """x [128, F] * b [1, F] broadcast over the partitions."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.load(x)
    bt = nl.load(b)
    nl.store(out, nisa.tensor_tensor(xt, bt.broadcast_to(x.shape), op=nl.multiply))
    return out


@nki.jit
def busy_then_broadcast(x, b, busy_engine):
    """Some work on ``busy_engine`` ("vector" or "scalar"), then x * b broadcast over the partitions."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.load(x)
    if busy_engine == "vector":
        xt = nisa.tensor_scalar(xt, op0=nl.multiply, operand0=1.0)
    else:
        xt = nisa.activation(op=nl.exp, data=xt)
    bt = nl.load(b)
    nl.store(out, nisa.tensor_tensor(xt, bt.broadcast_to(x.shape), op=nl.multiply))
    return out


def _count(program):
    return collections.Counter((ins.opcode, ins.engine) for ins in program.instructions)


def _multiply_cycles(program, target="trn1"):
    sch = schedule(program, target)
    (idx,) = [i for i, ins in enumerate(program.instructions) if ins.opcode == "tensor_tensor"]
    return sch.cost[idx] * get_target(target).clock_hz("vector")


def _inputs(f, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((128, f)).astype(dtype), rng.standard_normal((1, f)).astype(dtype)


def test_fp32_partition_broadcast_is_a_matmul_into_psum_read_at_n_cycles():
    x, b = _inputs(512, np.float32)
    np.testing.assert_array_equal(scale_by_row(x, b), x * b)
    program = scale_by_row.trace(x, b, target="trn1")
    (mm,) = [ins for ins in program.instructions if ins.opcode == "nc_matmul"]
    assert mm.engine == "tensor" and mm.attrs["is_stationary_onezero"]
    assert program.tensors[mm.dst["dst"].tensor].buffer == "psum"
    assert _multiply_cycles(program) == pytest.approx(cr.vector_cycles(512, 2, fast=True))   # N, not 2N


@pytest.mark.parametrize("busy, copier", [("vector", "scalar"), ("scalar", "vector")])
def test_wider_rows_are_matmuls_per_psum_tile_copied_on_the_engine_with_less_work(busy, copier):
    x, b = _inputs(1200, np.float32, seed=1)
    np.testing.assert_allclose(busy_then_broadcast(x, b, busy), (x if busy == "vector" else np.exp(x)) * b,
                               rtol=1e-5)
    program = busy_then_broadcast.trace(x, b, busy, target="trn1")
    assert _count(program)[("nc_matmul", "tensor")] == 3            # 512 + 512 + 176 columns
    copies = [ins.engine for ins in program.instructions if ins.opcode == "tensor_copy"]
    assert len(copies) == 3 and copies[0] == copier                  # then each to the one less loaded
    assert _multiply_cycles(program) == pytest.approx(cr.vector_cycles(1200, 2))         # SBUF: 2N


def test_other_dtypes_stay_a_dma_into_sbuf():
    x, b = _inputs(512, np.float16, seed=2)
    np.testing.assert_array_equal(scale_by_row(x, b), x * b)
    assert ("nc_matmul", "tensor") not in _count(scale_by_row.trace(x, b, target="trn1"))


@nki.jit
def sum_of_broadcasts(a):
    """The sum over the n rows of a [n, 512], each row broadcast to 128 partitions and kept live at once."""
    out = nl.ndarray((128, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    rows = [nl.load(a[i:i + 1, :]) for i in range(a.shape[0])]
    wide = [r.broadcast_to((128, a.shape[1])) for r in rows]
    acc = wide[0] + wide[1]                      # two PSUM inputs: nl copies one to SBUF first
    for w in wide[2:]:
        acc = acc + w
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("n", [2, 12])
def test_broadcasts_psum_cannot_hold_move_to_sbuf(n):
    """Kernels that ran with broadcasts as DMAs still run: two PSUM broadcasts added, and more live at once
    than PSUM's 8 banks hold (then the broadcasts are placed in SBUF, not refused as psum-capacity)."""
    a = np.random.default_rng(3).standard_normal((n, 512)).astype(np.float32)
    np.testing.assert_allclose(sum_of_broadcasts(a), np.broadcast_to(a.sum(0), (128, 512)), rtol=1e-5, atol=1e-5)
    program = sum_of_broadcasts.trace(a, target="trn2")
    buffers = {program.tensors[ins.dst["dst"].tensor].buffer for ins in program.instructions
               if ins.opcode == "nc_matmul"}
    assert buffers == ({"psum"} if n == 2 else {"sbuf"})
