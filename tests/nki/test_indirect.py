"""Indirect access patterns (AWS NKI ``tensor.ap(pattern, offset, scalar_offset=, vector_offset=,
indirect_dim=)``), written from the NKI access-pattern guide: a scalar offset moves the whole pattern by
that many elements of ``indirect_dim``; a vector offset gives each index of the pattern's first dim its own
start; the offsets are read when the DMA runs, so one compiled kernel serves any index values."""
from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.nki.errors import KernelRuleError


@nki.jit
def rows_from(table, start, n: int = 4):
    s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=start)
    t = nl.ndarray((n, table.shape[1]), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=table.ap(pattern=[[table.shape[1], n], [1, table.shape[1]]], offset=0,
                                      scalar_offset=s, indirect_dim=0))
    out = nl.ndarray(t.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def gather(table, idx):
    ids = nl.ndarray(idx.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    n, f = idx.shape[0], table.shape[1]
    t = nl.ndarray((n, f), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=table.ap(pattern=[[f, n], [1, f]], offset=0, vector_offset=ids, indirect_dim=0))
    out = nl.ndarray((n, f), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def scatter_rows(x, dst_rows, out, skip: bool):
    ids = nl.ndarray(dst_rows.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=dst_rows)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    n, f = x.shape
    nisa.dma_copy(dst=out.ap(pattern=[[f, n], [1, f]], offset=0, vector_offset=ids, indirect_dim=0), src=t,
                  oob_mode=nisa.oob_mode.skip if skip else nisa.oob_mode.error)
    return out


TABLE = np.arange(10 * 4, dtype=np.float32).reshape(10, 4)


def test_scalar_offset_moves_the_pattern_and_is_read_at_run_time():
    assert np.array_equal(rows_from(TABLE, np.array([[5]], np.int32)), TABLE[5:9])
    assert np.array_equal(rows_from(TABLE, np.array([[1]], np.int32)), TABLE[1:5])   # same Program, new value
    assert len(rows_from._cache) == 1


def test_scalar_offset_counts_elements_of_the_indirect_dim():
    @nki.jit
    def column(table, col):
        c = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c, src=col)
        t = nl.ndarray((table.shape[0], 1), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=table.ap(pattern=[[table.shape[1], table.shape[0]], [1, 1]], offset=0,
                                          scalar_offset=c, indirect_dim=1))
        out = nl.ndarray(t.shape, dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    assert np.array_equal(column(TABLE, np.array([[3]], np.int32)), TABLE[:, 3:4])


def test_vector_offset_gathers_one_row_per_index():
    idx = np.array([[7], [0], [7], [2]], np.int32)
    assert np.array_equal(gather(TABLE, idx), TABLE[[7, 0, 7, 2]])


def test_vector_offset_scatters_and_out_of_bounds_rows_are_skipped_on_request():
    x = np.full((3, 4), -1.0, np.float32)
    out = np.zeros((6, 4), np.float32)
    got = scatter_rows(x, np.array([[4], [9], [1]], np.int32), out, True)
    want = np.zeros((6, 4), np.float32)
    want[[4, 1]] = -1.0
    assert np.array_equal(got, want)
    # as AWS's simulator: an IndexError naming the first flat element outside the tensor (row 9 of 6x4)
    with pytest.raises(IndexError, match="index 36 is out of bounds for axis 0 with size 24"):
        scatter_rows(x, np.array([[4], [9], [1]], np.int32), np.zeros((6, 4), np.float32), False)


def test_indirect_views_are_dma_operands_only():
    @nki.jit
    def misuse(table, start):
        s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=start)
        v = table.ap(pattern=[[4, 2], [1, 4]], offset=0, scalar_offset=s, indirect_dim=0)
        t = nl.ndarray((2, 4), dtype=table.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=v)
        return table
    with pytest.raises(KernelRuleError, match="indirect-access"):
        misuse(TABLE, np.array([[0]], np.int32))


def test_dma_compute_adds_gathered_rows():
    """A gathering view as a dma_compute source: each output row is acc + table[idx[i]] in fp32."""
    @nki.jit
    def add_rows(table, idx, acc):
        ids = nl.ndarray(idx.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        n, f = acc.shape
        a = nl.ndarray((n, f), dtype=acc.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=acc)
        rows = table.ap(pattern=[[f, n], [1, f]], offset=0, vector_offset=ids, indirect_dim=0)
        nisa.dma_compute(dst=a, srcs=[rows, a], reduce_op=nl.add)
        out = nl.ndarray((n, f), dtype=acc.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out
    acc = np.full((3, 4), 0.5, np.float32)
    for idx in ([[9], [0], [9]], [[1], [2], [3]]):     # the same Program reads new indices
        got = add_rows(TABLE, np.array(idx, np.int32), acc)
        assert np.array_equal(got, TABLE[np.array(idx)[:, 0]] + 0.5)


@nki.jit
def accumulate_into(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    t = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=y)
    nisa.dma_copy(dst=out, src=t, dst_rmw_op=nl.add)
    return out


def test_dma_copy_read_modify_write_adds_into_the_destination():
    # the dma_copy page (2.28): dst = dst_rmw_op(dst, src), add being the one operator
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    y = np.full((4, 6), 0.5, np.float32)
    np.testing.assert_array_equal(accumulate_into(x, y), x + y)
