"""Tiles that do not fit in program order fit in the order a scheduler would pick: a kernel written loop by
loop (all of Q@K into PSUM, then the row maxima, then the subtraction) keeps every PSUM block live across
the loops in program order; the compiler schedules by data dependencies, so each row's blocks live only
while that row is processed (simulator.reorder)."""
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkihub.nki.errors import KernelRuleError
from nkihub.simulator.allocate import allocate
from nkihub.simulator.executor import Executor
from nkihub.simulator.reorder import demand_order
from nkihub.simulator.targets import get_target


@nki.jit
def row_softmax_shift(q, k):
    """(q.T @ k) minus each row's maximum; q, k: [128, n] float32, n a multiple of 512."""
    d, n = q.shape
    out = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.shared_hbm)
    qs, ks = nl.load(q), nl.load(k)
    scores = nl.ndarray((n // 128, n // 512, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(n // 128):
        for j in nl.affine_range(n // 512):
            scores[i, j, :, :] = nisa.nc_matmul(qs[:, nl.ds(i * 128, 128)], ks[:, nl.ds(j * 512, 512)])
    row_max = nl.ndarray((nl.par_dim(128), n // 128, 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(n // 128):
        part = nl.ndarray((nl.par_dim(128), n // 512), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(n // 512):
            part[:, j] = nisa.tensor_reduce(op=nl.max, data=scores[i, j], axis=1)
        row_max[:, i, :] = nisa.tensor_reduce(op=nl.max, data=part[:, :], axis=1)
    for i in nl.affine_range(n // 128):
        shifted = nl.ndarray((nl.par_dim(128), n), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(n // 512):
            shifted[:, nl.ds(j * 512, 512)] = nisa.tensor_scalar(data=scores[i, j], op0=nl.subtract,
                                                                 operand0=row_max[:, i, :])
        nl.store(out[nl.ds(i * 128, 128), :], shifted)
    return out


def test_psum_blocks_over_capacity_in_program_order_fit_by_dependencies():
    # n = 1024: 8 x 2 blocks of one 2 KiB bank each, all written before any is read: 16 banks in program
    # order, PSUM has 8. Row by row, two banks are live at a time.
    r = np.random.default_rng(0)
    q, k = (r.standard_normal((128, 1024)).astype(np.float32) for _ in range(2))
    s = q.T.astype(np.float64) @ k
    np.testing.assert_allclose(row_softmax_shift(q, k), s - s.max(axis=1, keepdims=True), rtol=1e-4, atol=1e-3)
    prog = row_softmax_shift.trace(q, k)
    assert prog.meta["instruction_order"] == "demand"
    stores = [n for n, i in enumerate(prog.instructions) if not prog.tensors[i.dst["dst"].tensor].on_chip]
    matmuls = [n for n, i in enumerate(prog.instructions) if i.opcode == "nc_matmul"]
    assert stores[0] < matmuls[2]   # row 0 is stored before row 1's scores are computed


def test_a_kernel_that_fits_keeps_its_order():
    r = np.random.default_rng(1)
    q, k = (r.standard_normal((128, 512)).astype(np.float32) for _ in range(2))
    assert "instruction_order" not in row_softmax_shift.trace(q, k).meta


def test_what_no_order_can_fit_is_still_the_capacity_error():
    @nki.jit
    def too_big(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)                        # one tile of 200 KiB per partition: more than SBUF
        nl.store(out, nl.exp(t))
        return out

    with pytest.raises(KernelRuleError, match="sbuf-capacity"):
        too_big.run(np.zeros((128, 50 * 1024), np.float32), target="trn1")


def test_demand_order_keeps_reads_before_later_overwrites():
    # The first store needs a's overwrite; the copy of a into b, held back until the second store needs it,
    # must still run before that overwrite (write after read). c is loaded only when the last store needs it.
    @nki.jit
    def kernel(x, y):
        out = nl.ndarray((3, 128, 64), nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        a[...] = nl.load(x)
        c = nl.load(y)
        b[...] = nl.copy(a)
        a[...] = nl.multiply(a, 3.0)
        nl.store(out[1], a)
        nl.store(out[0], b)
        nl.store(out[2], c)
        return out

    r = np.random.default_rng(2)
    x, y = (r.standard_normal((128, 64)).astype(np.float32) for _ in range(2))
    prog = kernel.trace(x, y)
    order = demand_order(prog)
    ops = [prog.instructions[i].opcode for i in order]
    assert order.index(1) > order.index(4)              # c's load moved to where it is needed
    assert order.index(2) < order.index(3)              # the copy still reads a before the overwrite
    prog.instructions = [prog.instructions[i] for i in order]
    allocate(prog, get_target("trn2"))
    (got,) = Executor(prog, "trn2").run([x, y])
    np.testing.assert_allclose(got, np.stack([x, 3 * x, y]), rtol=1e-6)
    assert ops.count("dma_copy") == 5
