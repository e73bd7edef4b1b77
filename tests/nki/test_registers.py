"""Virtual registers (nisa.register_alloc / register_move / register_load / register_store) and the
dynamic loops they drive (nl.dynamic_range, nl.fori_loop, nl.while_loop, ``while reg:``), plus a
register as a run-time DMA offset. Kernels whose Python reads a register are traced with the call's
data, once per distinct data."""
from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.simulator.errors import KernelRuleError


def _int_tile(hbm):
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=hbm)
    return t


def test_register_round_trip_through_memory():
    @nki.jit
    def k(x):
        out = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.shared_hbm)
        tile = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.sbuf)
        a = nisa.register_alloc(7)                 # from an immediate
        b = nisa.register_alloc(a)                 # from another register
        c = nisa.register_alloc()
        nisa.register_load(c, _int_tile(x))        # from memory
        nisa.register_store(tile[0:1, 0:1], a)
        nisa.register_store(tile[0:1, 1:2], b)
        nisa.register_move(b, -4)
        nisa.register_store(tile[0:1, 2:3], c)
        nisa.dma_copy(dst=out, src=tile)
        return out

    got = k(np.array([[123]], np.int32))
    np.testing.assert_array_equal(got, [[7, 7, 123]])


def test_register_load_truncates_floats():
    @nki.jit
    def k(x):
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        f = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=f, src=x)
        r = nisa.register_alloc()
        nisa.register_load(r, f)
        t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(t, r)
        nisa.dma_copy(dst=out, src=t)
        return out

    assert k(np.array([[-2.75]], np.float32))[0, 0] == -2
    assert k(np.array([[9.9]], np.float32))[0, 0] == 9


def test_register_operands_hold_one_value():
    @nki.jit
    def k(x):
        t = nl.ndarray((2, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.register_load(nisa.register_alloc(), t)
        return x

    with pytest.raises(KernelRuleError, match="one value"):
        k(np.zeros((2, 1), np.int32))


def _row_copier(loop):
    """A kernel copying the first n rows of x (n read from memory at run time) with ``loop``."""
    @nki.jit
    def k(x, n):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        zero = nl.ndarray((x.shape[0], x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=zero, value=0.0)
        nisa.dma_copy(dst=out, src=zero)
        reg = nisa.register_alloc()
        nisa.register_load(reg, _int_tile(n))
        loop(x, out, reg)
        return out
    return k


def _copy_row(x, out, i):
    row = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=x.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=i, indirect_dim=0))
    nisa.dma_copy(dst=out.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=i, indirect_dim=0), src=row)


def _with_dynamic_range(x, out, reg):
    i = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=i, value=0)
    for _ in nl.dynamic_range(reg):
        _copy_row(x, out, i)
        nisa.tensor_scalar(dst=i, data=i, op0=nl.add, operand0=1)


def _with_fori_loop(x, out, reg):
    nl.fori_loop(0, reg, lambda i: _copy_row(x, out, i))


def _with_while(x, out, reg):
    i = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=i, value=0)
    left = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.register_store(left, reg)
    while reg:                                     # a register as a Python condition
        _copy_row(x, out, i)
        nisa.tensor_scalar(dst=i, data=i, op0=nl.add, operand0=1)
        nisa.tensor_scalar(dst=left, data=left, op0=nl.subtract, operand0=1)
        nisa.register_load(reg, left)


def _with_while_loop(x, out, reg):
    i = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=i, value=0)
    left = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.register_store(left, reg)

    def body(r):
        _copy_row(x, out, i)
        nisa.tensor_scalar(dst=i, data=i, op0=nl.add, operand0=1)
        nisa.tensor_scalar(dst=left, data=left, op0=nl.subtract, operand0=1)
        nxt = nisa.register_alloc()
        nisa.register_load(nxt, left)
        return nxt
    nl.while_loop(reg, body)


@pytest.mark.parametrize("loop", [_with_dynamic_range, _with_fori_loop, _with_while, _with_while_loop],
                         ids=["dynamic_range", "fori_loop", "while reg", "while_loop"])
def test_dynamic_trip_count_comes_from_the_data(loop):
    k = _row_copier(loop)
    x = np.arange(1, 6 * 4 + 1, dtype=np.float32).reshape(6, 4)
    for n in (3, 0, 6, 3):                         # other data traces again; repeated data is reused
        want = np.where(np.arange(6)[:, None] < n, x, 0)
        np.testing.assert_array_equal(k(x, np.array([[n]], np.int32)), want)
    program = k.trace(x, np.array([[2]], np.int32))
    assert program.meta.get("data_dependent")


def test_dynamic_range_bounds_and_step():
    seen = []

    @nki.jit
    def k(x):
        lo = nisa.register_alloc(2)
        for i in nl.dynamic_range(lo, 9, 3):       # register start, int stop, compile-time step
            seen.append(i)
        return x

    k(np.zeros((1, 1), np.float32))
    assert seen == [2, 5, 8]
    with pytest.raises(ValueError, match="step"):
        list(nl.dynamic_range(0, 4, 0))


def test_fori_loop_body_gets_a_copy_of_the_index():
    @nki.jit
    def k(x):
        out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)

        def body(i):
            dst = t.ap([[4, 1], [1, 1]], scalar_offset=i, indirect_dim=1)
            nisa.dma_copy(dst=dst, src=_reg_tile(i))
            nisa.register_move(i, 100)             # writing i does not change the loop
        nl.fori_loop(0, 4, body)
        nisa.dma_copy(dst=out, src=t)
        return out

    def _reg_tile(r):
        s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(s, r)
        return s

    np.testing.assert_array_equal(k(np.zeros((1, 1), np.float32)), [[0, 1, 2, 3]])


def test_a_static_kernel_is_not_data_dependent():
    @nki.jit
    def k(x):
        reg = nisa.register_alloc(3)               # registers alone need no data
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(t, reg)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.zeros((1, 1), np.float32)
    assert k(x)[0, 0] == 3
    assert not k.trace(x).meta.get("data_dependent")
