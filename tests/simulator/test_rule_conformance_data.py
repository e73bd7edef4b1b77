"""Conformance of the documented operand constraints of the data-movement and state instructions (issue 30).

Each row-specific rule of these rows states the constraints it checks (``rule.documents``, built with
``simulator.rules.documents``): the rule name its refusal carries, the operands, the AWS page. For every
constraint this module holds a case: a kernel that breaks it -- refused with that rule's name, naming the
operand, at the author's call line in this file -- and the same kernel keeping it, which runs (and is
checked against numpy where the result is simple). Cases run in both dialects (``nki.isa`` and the old
``neuronxcc.nki.isa``) where the function exists in both and the old dialect lets the author break the
constraint (its tile-returning calls build the destination themselves). Target gates
(``rules.target_gate``) are cased per target: refused on each older target, run on the first one that has
the instruction and on newer ones.

``COVERAGE`` lists, per public function in this scope, the rule names its cases cover; a test fails when a
function of the scope is missing there or when a rule of these rows has a constraint without a case. A
property test drives the instructions with arbitrary shapes and dtypes: a kernel mistake is an ``NkiError``
with a rule and a line, never a raw numpy or Python error.
"""
from __future__ import annotations

import inspect
from typing import Callable, NamedTuple

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nkihub import nki
from nkihub.nki import collectives as ncc
from nkihub.nki import isa as nisa, language as nl
from nkihub.nki.compat import isa as old_isa
from nkihub.simulator import rules as shared
from nkihub.simulator.errors import KernelRuleError, NkiError
from nkihub.simulator.isa import OPS
from nkihub.simulator.isa.gather import sequence_bounds_of

BF16 = ml_dtypes.bfloat16
P, F = 128, 64


def _line() -> int:
    """The caller's next line: the call a case makes."""
    return inspect.currentframe().f_back.f_lineno + 1


def _run(body, *args, target=None, grid=None):
    """Trace ``body`` as a kernel and run it on ``args`` (a launch of ``grid`` programs when given)."""
    kernel = nki.jit(body)
    if grid:
        return kernel[grid](*args)
    return kernel.run(*args, target=target)


def _out(t):
    """An HBM output holding tile ``t``."""
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _sb(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


X = np.arange(P * F, dtype=np.float32).reshape(P, F) / 7


class Case(NamedTuple):
    """``run(bad, new, lines) -> (got, want)``: the kernel breaking the constraint (``bad``) or keeping it, in
    the current (``new``) or old dialect, appending the line of the instruction call to ``lines``; ``want``
    None when the result is not checked. ``role``: the operand the refusal names (a prefix: a participant's
    ``p0_dst0`` is ``dst``, a scale quadrant ``dst_scale0`` is ``dst_scale``)."""
    run: Callable
    role: str | None
    old: bool = False          # the old dialect can break it too
    target: str | None = None  # the target both kernels run for (None: the default, trn2)


# -- dma_copy -------------------------------------------------------------------------------------------------
def _dma_copy(new, lines, **kw):
    """dma_copy in the current (``new``) or the old dialect, recording the call's line."""
    if new:
        lines.append(_line())
        nisa.dma_copy(**kw)
    else:
        lines.append(_line())
        old_isa.dma_copy(**kw)


def _dma_buffer(bad, new, lines):
    def k(x):
        d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum if bad else nl.sbuf)
        _dma_copy(new, lines, dst=d, src=x)
        t = _sb(x.shape)
        nisa.tensor_copy(dst=t, src=d)
        return _out(t)
    x = X[:, :8]
    return _run(k, x), x


def _dma_rmw(bad, new, lines):
    def k(x):
        t = x_sb(x)
        ops = (nl.multiply, nl.add) if new else (np.multiply, np.add)
        _dma_copy(new, lines, dst=t, src=x, dst_rmw_op=ops[0] if bad else ops[1])
        return _out(t)
    return _run(k, X), 2 * X


def _dma_size(bad, new, lines):
    def k(x):
        t = _sb((P, F))
        _dma_copy(new, lines, dst=t, src=x[:, 0:F - 1] if bad else x)
        return _out(t)
    return _run(k, X), X


def _dma_partitions(bad, new, lines):
    def k(x):
        t = _sb((2 * P if bad else P, 4))
        _dma_copy(new, lines, dst=t, src=x)
        out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        return out if bad else _out(t)
    x = np.arange((2 * P if bad else P) * 4, dtype=np.float32).reshape(-1, 4)
    return _run(k, x), x


# -- dma_copy through an indirect access pattern (rows of a table picked by a run-time index tile) ------------
IDX = np.array([[3], [0], [2], [1]], np.int32)
TABLE = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)


def _gather(bad_rows=False, psum=False):
    def run(bad, new, lines):
        def k(table, idx):
            ids = _sb((idx.shape[0] - (1 if bad and bad_rows else 0), 1), nl.int32)
            nisa.dma_copy(dst=ids, src=idx[0:ids.shape[0]])
            t = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.psum if bad and psum else nl.sbuf)
            lines.append(_line())
            nisa.dma_copy(dst=t, src=table.ap(pattern=[[8, 4], [1, 8]], offset=0, vector_offset=ids, indirect_dim=0))
            s = _sb((4, 8))
            nisa.tensor_copy(dst=s, src=t)
            return _out(s)
        return _run(k, TABLE, IDX), TABLE[IDX[:, 0]]
    return run


def _gather_where(offsets_in_hbm=False, table_on_chip=False):
    """The gather with its offsets left in HBM, or its table an SBUF tile, when ``bad``."""
    def run(bad, new, lines):
        def k(table, idx):
            ids = _sb((4, 1), nl.int32)
            nisa.dma_copy(dst=ids, src=idx)
            tab = table
            if bad and table_on_chip:
                tab = x_sb(table)
            t = _sb((4, 8))
            offsets = idx if bad and offsets_in_hbm else ids
            lines.append(_line())
            nisa.dma_copy(dst=t, src=tab.ap(pattern=[[8, 4], [1, 8]], offset=0, vector_offset=offsets, indirect_dim=0))
            return _out(t)
        return _run(k, TABLE, IDX), TABLE[IDX[:, 0]]
    return run


def _gather_size(bad, new, lines):
    def k(table, idx):
        ids = _sb((4, 1), nl.int32)
        nisa.dma_copy(dst=ids, src=idx)
        t = _sb((4, 7 if bad else 8))
        lines.append(_line())
        nisa.dma_copy(dst=t, src=table.ap(pattern=[[8, 4], [1, 8]], offset=0, vector_offset=ids, indirect_dim=0))
        return _out(t)
    return _run(k, TABLE, IDX), TABLE[IDX[:, 0]]


def _scatter(op=nl.add, skip=False):
    def run(bad, new, lines):
        def k(x, idx, out):
            ids = _sb((4, 1), nl.int32)
            nisa.dma_copy(dst=ids, src=idx)
            t = _sb(x.shape)
            nisa.dma_copy(dst=t, src=x)
            lines.append(_line())
            nisa.dma_copy(dst=out.ap(pattern=[[8, 4], [1, 8]], offset=0, vector_offset=ids, indirect_dim=0), src=t,
                          dst_rmw_op=op if bad else nl.add,
                          oob_mode=nisa.oob_mode.skip if bad and skip else nisa.oob_mode.error)
            return out
        x = np.ones((4, 8), np.float32)
        want = TABLE.copy()
        want[IDX[:, 0]] += 1
        return _run(k, x, IDX, TABLE.copy()), want
    return run


# -- dma_transpose ------------------------------------------------------------------------------------------------
def _transpose(dst_shape=None, axes=None, psum=False):
    """dma_transpose of an SBUF [8, 16] tile; ``dst_shape``/``axes``/``psum`` break it when ``bad``."""
    def run(bad, new, lines):
        def k(x):
            t = x_sb(x)
            if psum and bad:
                t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
                nisa.tensor_copy(dst=t, src=x_sb(x))
            ax = axes if bad else None
            if new:
                d = _sb(dst_shape if bad and dst_shape else x.shape[::-1])
                lines.append(_line())
                nisa.dma_transpose(dst=d, src=t, axes=ax)
            else:
                lines.append(_line())
                d = old_isa.dma_transpose(t, axes=ax)
            return _out(d)
        x = X[:8, :16]
        return _run(k, x), x.T
    return run


def _transpose_dge(mode=None, dtype=None):
    """dma_transpose with dge_mode=hwdge of a [16, 128] float16 HBM tensor (the page's hardware-DGE shape);
    ``mode``/``dtype`` break it when ``bad``."""
    def run(bad, new, lines):
        def k(x):
            src = x
            if bad and dtype is not None:
                src = _sb(x.shape, dtype)
                nisa.dma_copy(dst=src, src=x)
            m = mode if bad and mode else "hwdge"
            if new:
                d = _sb(x.shape[::-1], nl.float16)
                lines.append(_line())
                nisa.dma_transpose(dst=d, src=src, dge_mode=getattr(nisa.dge_mode, m))
            else:
                lines.append(_line())
                d = old_isa.dma_transpose(src, dge_mode=getattr(old_isa.dge_mode, m), dtype=nl.float16)
            return _out(d)
        x = (np.arange(16 * 128) % 97).reshape(16, 128).astype(np.float16)
        return _run(k, x), x.T
    return run


def _transpose_gather(table_dtype=np.float32, idx_dtype=nl.int32, rows=4, width=8, target=None):
    """The current dialect's dma_transpose of rows of an HBM table picked by an SBUF index tile (a
    vector_offset view, the page's indirect transpose). Kept: a float16 [32, 8] table, 16 uint32 indices
    (the page's limits); broken: ``table_dtype``/``idx_dtype``/``rows``/``width``/``target`` (by default the
    old-dialect test's float32 table and 4 int32 indices)."""
    def run(bad, new, lines):
        dt, it, n, w = (table_dtype, idx_dtype, rows, width) if bad else (np.float16, nl.uint32, 16, 8)

        def k(table, idx):
            ids = _sb((n, 1), it)
            nisa.dma_copy(dst=ids, src=idx)
            # a src wider than 128 transposes into HBM (an SBUF dst would have more than 128 partitions)
            d = nl.ndarray((w, n), dtype=table.dtype, buffer=nl.shared_hbm if w > P else nl.sbuf)
            lines.append(_line())
            nisa.dma_transpose(dst=d, src=table.ap(pattern=[[w, n], [1, w]], offset=0, vector_offset=ids,
                                                   indirect_dim=0))
            return d if w > P else _out(d)
        table = (np.arange(32 * w) % 251).reshape(32, w).astype(dt)
        idx = ((np.arange(n) * 7) % 32).reshape(n, 1).astype(np.int32 if it == nl.int32 else np.uint32)
        got = _run(k, table, idx, target=target if bad else None)
        return got, table[idx[:, 0]].T
    return run


def x_sb(x):
    t = _sb(x.shape)
    nisa.dma_copy(dst=t, src=x)
    return t


# -- dma_compute ---------------------------------------------------------------------------------------------------
def _dma_compute(sources=2, psum=False, size=False, op=nl.add, scales=None):
    def run(bad, new, lines):
        def k(a, b):
            s0, s1 = x_sb(a), x_sb(b)
            if bad and psum:
                s1 = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.psum)
                nisa.tensor_copy(dst=s1, src=x_sb(b))
            if bad and size:
                s1 = s1[:, 0:7]
            srcs = [s0] + [s1] * (sources - 1 if bad else 1)
            d = _sb(a.shape)
            lines.append(_line())
            nisa.dma_compute(dst=d, srcs=srcs, reduce_op=op if bad else nl.add, scales=scales if bad else None)
            return _out(d)
        a, b = X[:16, :8], X[16:32, :8]
        return _run(k, a, b), a + b
    return run


# -- local_gather --------------------------------------------------------------------------------------------------
LG_SRC = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
LG_IDX = (np.arange(16, dtype=np.uint16) % 7).reshape(16, 1)


def _lg_want(e=1):
    idx = LG_IDX[:, 0].astype(np.int64)
    cols = (idx[:, None] + np.arange(e)[None, :]).reshape(-1)
    return LG_SRC[:, cols]


def _local_gather(parts=16, index_dtype=nl.uint16, dst_dtype=nl.float32, e=1, valid=None, dst_free=None):
    """local_gather of a [16, 8] src_buffer with a [16, 1] uint16 index; the arguments break it when ``bad``."""
    def run(bad, new, lines):
        def k(src, index):
            s = x_sb(src)
            i = _sb(index.shape, nl.uint16)
            nisa.dma_copy(dst=i, src=index)
            if bad and index_dtype != nl.uint16:
                i = _sb(index.shape, index_dtype)
                nisa.dma_copy(dst=i, src=index)
            if bad and parts != 16:
                i = _sb((parts, 1), nl.uint16)
                nisa.memset(dst=i, value=0)
            ee = e if bad else 1
            nv = valid if bad else None
            if new:
                d = nl.ndarray((16, (dst_free if bad and dst_free else 16 * ee)),
                               dtype=dst_dtype if bad else nl.float32, buffer=nl.sbuf)
                lines.append(_line())
                nisa.local_gather(d, s, i, num_elem_per_idx=ee, num_valid_indices=nv)
            else:
                lines.append(_line())
                d = old_isa.local_gather(s, i, num_elem_per_idx=ee, num_valid_indices=nv)
            return _out(d)
        return _run(k, LG_SRC, LG_IDX), _lg_want()
    return run


# -- sequence_bounds -----------------------------------------------------------------------------------------------
SEG = np.array([[1, 1, 2, 2, 2, 0, 3, 3]], np.float32)


def _sequence_bounds(parts=1, ids_dtype=nl.float32, dst_shape=None):
    def run(bad, new, lines):
        def k(ids):
            s = _sb((parts if bad else 1, 8), ids_dtype if bad else nl.float32)
            nisa.memset(dst=s, value=0.0)
            nisa.dma_copy(dst=s[0:1, :], src=ids)
            if new:
                d = _sb(dst_shape if bad and dst_shape else (1, 2, 8))
                lines.append(_line())
                nisa.sequence_bounds(d, s)
            else:
                lines.append(_line())
                d = old_isa.sequence_bounds(segment_ids=s)
            return _out(d)
        return _run(k, SEG), sequence_bounds_of(SEG.astype(np.float64)).astype(np.float32)
    return run


def _sequence_bounds_dst_dtype(bad, new, lines):
    def k(ids):
        s = x_sb(ids)
        if new:
            d = _sb((1, 2, 8), nl.bfloat16 if bad else nl.float32)
            lines.append(_line())
            nisa.sequence_bounds(d, s)
        else:
            lines.append(_line())
            d = old_isa.sequence_bounds(segment_ids=s, dtype=nl.bfloat16 if bad else nl.float32)
        return _out(d)
    return _run(k, SEG), sequence_bounds_of(SEG.astype(np.float64)).astype(np.float32)


# -- nonzero_with_count --------------------------------------------------------------------------------------------
NZ = (np.arange(64 * 6).reshape(64, 6) % 3 == 0).astype(np.float32)


def _nz_want(rows=(0,)):
    want = np.full((len(rows), 7), -1, np.int32)
    for j, r in enumerate(rows):
        nz = np.flatnonzero(NZ[r])
        want[j, :nz.size], want[j, 6] = nz, nz.size
    return want


def _nonzero(src_view, dst_parts=None, dst_free=None, dst_dtype=nl.int32, imm=None):
    """nonzero_with_count of ``src_view(tile)`` of a [64, 6] tile into a [dst_parts, 7] int32 tile; ``imm``
    (index_offset, padding_val) break it (kept: 0, -1)."""
    def run(bad, new, lines):
        def k(x):
            t = x_sb(x)
            src = src_view(t) if bad else t[0:32]
            d = nl.ndarray((dst_parts if bad and dst_parts else 32, dst_free if bad and dst_free else 7),
                           dtype=dst_dtype if bad else nl.int32, buffer=nl.sbuf)
            nisa.memset(dst=d, value=-1)
            lines.append(_line())
            nisa.nonzero_with_count(dst=d, src=src, index_offset=imm[0] if bad and imm else 0,
                                    padding_val=imm[1] if bad and imm else -1)
            out = nl.ndarray((2, d.shape[1]), dtype=d.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=d[0:32:16])
            return out
        return _run(k, NZ), _nz_want((0, 16))
    return run


# -- topk ----------------------------------------------------------------------------------------------------------
TK = np.random.default_rng(1).permutation(16 * 4).reshape(16, 4).astype(np.float32).astype(BF16)


def _topk(src_dtype=nl.bfloat16, src_parts=16, val_parts=16, n=40, k=4, idx_k=None, src_free=4):
    def run(bad, new, lines):
        def kern(x):
            s = _sb((src_parts if bad else 16, src_free if bad else 4), src_dtype if bad else nl.bfloat16)
            nisa.memset(dst=s, value=0.0)
            nisa.dma_copy(dst=s[0:16, 0:4], src=x)
            kk = k if bad else 4
            v = _sb((val_parts if bad else 16, kk), nl.bfloat16)
            i = _sb((val_parts if bad else 16, idx_k if bad and idx_k else kk), nl.uint32)
            lines.append(_line())
            nisa.topk(v, i, s, n=n if bad else 40, sorted=True)
            return _out(v)
        snake = TK.astype(np.float32).T.reshape(-1)[:40]
        want = np.full((16, 4), np.nan, np.float32)   # the rest of the written position: NaN (simulator.isa.topk)
        want[0:4, 0] = np.sort(snake)[::-1][:4]
        got = _run(kern, TK)
        return got[:, 0:1].astype(np.float32), want[:, 0:1]
    return run


# -- quantize_mx / nc_matmul_mx (NeuronCore-v4) --------------------------------------------------------------------
def _scale(p, f, bad=False):
    return nl.ndarray(((p // 8 if p <= 32 else p) - (1 if bad else 0), f), dtype=nl.uint8, buffer=nl.sbuf)


def _quantize(src_dtype=nl.bfloat16, parts=32, free=16, dst_shape=None, dst_dtype=nl.float8_e4m3fn_x4,
              psum=False, scale_bad=False):
    def run(bad, new, lines):
        def k(x):
            p, f = (parts, free) if bad else (32, 16)
            t = nl.ndarray((p, f), dtype=src_dtype if bad else nl.bfloat16,
                           buffer=nl.psum if bad and psum else nl.sbuf)
            nisa.memset(dst=t, value=1.0)
            q = nl.ndarray(dst_shape if bad and dst_shape else (p, f // 4), dtype=dst_dtype if bad else
                           nl.float8_e4m3fn_x4, buffer=nl.sbuf)
            s = _scale(p, f // 4, bad and scale_bad)
            lines.append(_line())
            nisa.quantize_mx(dst=q, src=t, dst_scale=s)
            return _out(s)
        return _run(k, X, target="trn3"), None
    return run


def _matmul_mx(st_dtype=nl.float8_e4m3fn_x4, k_st=32, k_mv=32, m=16, n=24, dst=(16, 24), dst_buffer=nl.psum,
               st_psum=False, scale_bad=False, tile=None):
    def run(bad, new, lines):
        def kern(a):
            ks, km, mm, nn = (k_st, k_mv, m, n) if bad else (32, 32, 16, 24)
            st = nl.ndarray((ks, mm), dtype=st_dtype if bad else nl.float8_e4m3fn_x4,
                            buffer=nl.psum if bad and st_psum else nl.sbuf)
            mv = nl.ndarray((km, nn), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
            nisa.memset(dst=st, value=0)
            nisa.memset(dst=mv, value=0)
            # The front end reads the scales by the stationary's partitions (the contraction dim).
            ss, ms = _scale(ks, mm), _scale(ks, km * nn // ks, bad and scale_bad)
            nisa.memset(dst=ss, value=127)
            nisa.memset(dst=ms, value=127)
            acc = nl.ndarray(dst if bad else (16, 24), dtype=nl.float32, buffer=dst_buffer if bad else nl.psum)
            # kept: the stationary's 32 rows in the second 32-row tile of the array
            pos, size = tile if bad and tile else ((32, 0), (32, 128))
            lines.append(_line())
            nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=ss, moving_scale=ms,
                              tile_position=pos, tile_size=size)
            o = _sb(acc.shape)
            nisa.tensor_copy(dst=o, src=acc)
            return _out(o)
        return _run(kern, X, target="trn3"), np.zeros((16, 24), np.float32)
    return run


def _matmul_mx_bf16(n: int, lines: list):
    """nc_matmul_mx of zero MX data into a bfloat16 PSUM dst [16, n] on trn3 (the page: n up to 8192 with a
    bfloat16 dst, the 8 PSUM banks; the shared free-size-limit counts PSUM in bytes, 16 KiB per partition)."""
    def kern(a):
        st = nl.ndarray((32, 16), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        mv = nl.ndarray((32, n), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.memset(dst=st, value=0)
        nisa.memset(dst=mv, value=0)
        ss, ms = _scale(32, 16), _scale(32, n)
        nisa.memset(dst=ss, value=127)
        nisa.memset(dst=ms, value=127)
        acc = nl.ndarray((16, n), dtype=nl.bfloat16, buffer=nl.psum)
        lines.append(_line())
        nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=ss, moving_scale=ms)
        o = _sb((16, n))
        nisa.tensor_copy(dst=o, src=acc)
        return _out(o)
    return _run(kern, X, target="trn3")


def test_matmul_mx_bf16_dst_fills_the_8_psum_banks():
    got = _matmul_mx_bf16(8192, [])
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.zeros((16, 8192), np.float32))
    lines: list = []
    with pytest.raises(KernelRuleError) as err:
        _matmul_mx_bf16(8193, lines)
    assert err.value.rule == "matmul-moving-size" and err.value.loc.line == lines[-1], str(err.value)
    assert "8192" in str(err.value)


# -- registers -----------------------------------------------------------------------------------------------------
def _register(store=False, psum=False, alloc=False):
    def run(bad, new, lines):
        def k(x):
            t = nl.ndarray((1, 2 if bad and not psum else 1), dtype=nl.int32,
                           buffer=nl.psum if bad and psum else nl.sbuf)
            nisa.memset(dst=t, value=7)
            if store:
                r = nisa.register_alloc(5)
                lines.append(_line())
                nisa.register_store(t, r)
            elif alloc:
                lines.append(_line())
                r = nisa.register_alloc(t)
            else:
                r = nisa.register_alloc()
                lines.append(_line())
                nisa.register_load(r, t)
            back = _sb((1, 1), nl.int32)
            nisa.register_store(back, r)
            return _out(back)
        return _run(k, X), np.array([[5 if store else 7]], np.int32)
    return run


# -- random state, dropout -----------------------------------------------------------------------------------------
def _state_call(op, s, lines, **kw):
    """rand_set_state from ``s`` (set to 1 first) or rand_get_state into it, recording the call's line."""
    if op == "set":
        nisa.memset(dst=s, value=1)
        lines.append(_line())
        nisa.rand_set_state(src_seeds=s, **kw)
    else:
        lines.append(_line())
        nisa.rand_get_state(dst=s, **kw)


def _state(op, dtype=nl.uint32, words=6):
    def run(bad, new, lines):
        def k(x):
            s = _sb((1, words if bad else 6), dtype if bad else nl.uint32)
            _state_call(op, s, lines)
            r = _sb((1, 4))
            nisa.memset(dst=r, value=0.0)
            return _out(r)
        return _run(k, X), np.zeros((1, 4), np.float32)
    return run


def _rng(dtype=False, gpsimd=False):
    """nisa.rng into an int32 tile; a float32 dst, or GpSimd on trn1, breaks it (kept: GpSimd on trn2)."""
    def run(bad, new, lines):
        def k(x):
            d = _sb((P, 8), nl.float32 if bad and dtype else nl.int32)
            lines.append(_line())
            nisa.rng(dst=d, engine=nisa.engine.gpsimd if gpsimd else nisa.engine.vector)
            ok = _sb((P, 8))
            nisa.memset(dst=ok, value=1.0)
            return _out(ok)
        return _run(k, X, target="trn1" if bad and gpsimd else "trn2"), np.ones((P, 8), np.float32)
    return run


def _seed(shape=(1, 1), dtype=nl.int32):
    def run(bad, new, lines):
        def k(x):
            s = _sb(shape if bad else (1, 1), dtype if bad else nl.int32)
            nisa.memset(dst=s, value=7)
            lines.append(_line())
            nisa.set_rng_seed(src_seeds=s)
            d = _sb((P, 8), nl.int32)
            nisa.rng(dst=d)
            return _out(d)
        return _run(k, X), None
    return run


def _state_engine(op, psum=False):
    """The state on the Vector Engine: NeuronCore-v4 only (broken on trn2), src_seeds in SBUF (broken: PSUM)."""
    def run(bad, new, lines):
        def k(x):
            s = nl.ndarray((1, 24), dtype=nl.uint32, buffer=nl.psum if bad and psum else nl.sbuf)
            _state_call(op, s, lines, engine=nisa.engine.vector)
            ok = _sb((1, 4))
            nisa.memset(dst=ok, value=0.0)
            return _out(ok)
        return _run(k, X, target="trn2" if bad and not psum else "trn3"), np.zeros((1, 4), np.float32)
    return run


def _dropout(tile=False):
    def run(bad, new, lines):
        def k(x):
            t = x_sb(x)
            d = _sb(x.shape)
            prob = 1.5 if bad else 0.0
            if tile:
                prob = _sb((P, 3 if bad else 1))
                nisa.memset(dst=prob, value=0.0)
            lines.append(_line())
            nisa.dropout(dst=d, data=t, prob=prob)
            return _out(d)
        return _run(k, X[:, :8]), X[:, :8]
    return run


def _rand2(tile=False):
    def run(bad, new, lines):
        def k(x):
            d = _sb((P, 8))
            lo, hi = (2.0, 1.0) if bad else (1.0, 2.0)
            if tile:
                lo, hi = _sb((P, 3 if bad else 1)), _sb((P, 1))
                nisa.memset(dst=lo, value=1.0)
                nisa.memset(dst=hi, value=2.0)
            lines.append(_line())
            nisa.rand2(dst=d, min=lo, max=hi)
            below = _sb((P, 8))
            nisa.tensor_scalar(dst=below, data=d, op0=nl.greater_equal, operand0=1.0, op1=nl.multiply, operand1=1.0)
            return _out(below)
        return _run(k, X, target="trn3"), np.ones((P, 8), np.float32)
    return run


# -- collectives and sendrecv (launch grids of 2 or 4 programs) ----------------------------------------------------
def _collective(opcode, op=None, wrong_size=False):
    """One collective over the 2 programs of a launch, [4, 8] sources."""
    def run(bad, new, lines):
        def k(x):
            r = ncc.rank_id()
            t = _sb((4, 8))
            nisa.dma_copy(dst=t, src=x[r])
            shapes = {"all_reduce": (4, 8), "all_gather": (8, 8), "reduce_scatter": (2, 8), "all_to_all": (4, 8)}
            shape = shapes[opcode]
            d = _sb((shape[0], shape[1] - (1 if bad and wrong_size else 0)))
            group = ncc.ReplicaGroup([[0, 1]])
            rop = op if bad and op is not None else nl.add
            if opcode == "all_reduce":
                lines.append(_line())
                ncc.all_reduce([t], [d], group, rop)
            elif opcode == "all_gather":
                lines.append(_line())
                ncc.all_gather([t], [d], group, 0)
            elif opcode == "reduce_scatter":
                lines.append(_line())
                ncc.reduce_scatter([t], [d], group, 0, rop)
            else:
                lines.append(_line())
                ncc.all_to_all([t], [d], group, 0)
            out = nl.ndarray((2,) + tuple(d.shape), dtype=nl.float32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out[r], src=d)
            return out
        x = np.arange(2 * 4 * 8, dtype=np.float32).reshape(2, 4, 8)
        want = {"all_reduce": np.stack([x.sum(0)] * 2), "all_gather": np.stack([x.reshape(8, 8)] * 2),
                "reduce_scatter": x.sum(0).reshape(2, 2, 8),
                "all_to_all": np.stack([np.concatenate([x[0, 2 * i:2 * i + 2], x[1, 2 * i:2 * i + 2]])
                                        for i in (0, 1)])}
        return _run(k, x, grid=2), want[opcode]
    return run


def _barrier(cores=(0, 1), on_chip=False):
    """core_barrier of two cores on the shared HBM tensor both write half of; ``cores``/``on_chip`` break it."""
    def run(bad, new, lines):
        def k(x):
            c = nl.program_id(0)
            shared_t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=shared_t[c * 4:(c + 1) * 4], src=x[c * 4:(c + 1) * 4])
            data = x_sb(x) if bad and on_chip else shared_t
            lines.append(_line())
            nisa.core_barrier(data, cores if bad else (0, 1))
            return shared_t
        x = X[:8, :4]
        return nki.jit(k)[2](x), x
    return run


def _sendrecv(dst_shape=(4, 8), dtype=nl.float32, buffer=nl.sbuf):
    """Two cores swap [4, 8] float32 SBUF tiles; the receiving tile's shape/dtype/buffer break it when ``bad``."""
    return lambda bad, new, lines: _swap(bad, lines, dst_shape, dtype, buffer)


def _swap(bad, lines, dst_shape, dtype, buffer):
    def k(x):
        c = nl.program_id(0)
        t = x_sb(x[c])
        got = nl.ndarray(dst_shape if bad else (4, 8), dtype=dtype if bad else nl.float32,
                         buffer=buffer if bad else nl.sbuf)
        lines.append(_line())
        nisa.sendrecv(src=t, dst=got, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)
        out = nl.ndarray((2,) + tuple(got.shape), dtype=got.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[c], src=got)
        return out
    x = np.arange(2 * 4 * 8, dtype=np.float32).reshape(2, 4, 8)
    return _run(k, x, grid=2), x[::-1]


def _sendrecv_ring(bad, new, lines):
    """Kept: two cores swap tiles (ranks 0 and 1). Broken: a ring over a launch of 4 programs, core c sending
    to (c + 1) % 4 (a consistent pairing, but ranks 2 and 3 are not cores of an LNC=2 Logical NeuronCore)."""
    if not bad:
        return _swap(False, lines, (4, 8), nl.float32, nl.sbuf)

    def k(x):
        c = nl.program_id(0)
        t = x_sb(x[c])
        got = _sb((4, 8))
        lines.append(_line())
        nisa.sendrecv(src=t, dst=got, send_to_rank=(c + 1) % 4, recv_from_rank=(c + 3) % 4, pipe_id=0)
        out = nl.ndarray((4, 4, 8), dtype=got.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[c], src=got)
        return out
    x = np.arange(4 * 4 * 8, dtype=np.float32).reshape(4, 4, 8)
    return _run(k, x, grid=4), np.roll(x, 1, axis=0)


# (table row, rule name) -> case. The row is the instruction the public function emits (dma_copy through an
# indirect access pattern is the row dma_copy_indirect).
CASES: dict[tuple[str, str], Case] = {
    ("dma_copy", "dma-buffer"): Case(_dma_buffer, "dst", old=True),
    ("dma_copy", "dma-rmw-op"): Case(_dma_rmw, "dst", old=True),
    ("dma_copy", "dma-size"): Case(_dma_size, "src", old=True),
    ("dma_copy", "partition-dim-limit"): Case(_dma_partitions, "dst", old=True),
    ("dma_copy_indirect", "dma-buffer"): Case(_gather(psum=True), "dst"),
    ("dma_copy_indirect", "dma-rmw-op"): Case(_scatter(op=nl.multiply), "table"),
    ("dma_copy_indirect", "dma-rmw-oob"): Case(_scatter(skip=True), "table"),
    ("dma_copy_indirect", "dma-size"): Case(_gather_size, "dst"),
    ("dma_copy_indirect", "indirect-offsets"): Case(_gather(bad_rows=True), "offsets"),
    ("dma_copy_indirect", "indirect-offsets-buffer"): Case(_gather_where(offsets_in_hbm=True), "offsets"),
    ("dma_copy_indirect", "indirect-table-buffer"): Case(_gather_where(table_on_chip=True), "table"),
    ("dma_transpose", "dma-buffer"): Case(_transpose(psum=True), "src", old=True),
    ("dma_transpose", "dma-size"): Case(_transpose(dst_shape=(16, 7)), "src"),
    ("dma_transpose", "transpose-axes"): Case(_transpose(axes=(0, 1)), "src", old=True),
    ("dma_transpose", "transpose-dge-mode"): Case(_transpose_dge(mode="swdge"), "src", old=True),
    ("dma_transpose", "transpose-hwdge"): Case(_transpose_dge(dtype=nl.float32), "src", old=True),
    ("dma_transpose", "transpose-shape"): Case(_transpose(dst_shape=(8, 16)), "dst"),
    ("dma_transpose", "transpose-swdge"): Case(_transpose_gather(), "src"),
    ("dma_compute", "dma-compute-sources"): Case(_dma_compute(sources=17), "dst"),
    ("dma_compute", "dma-buffer"): Case(_dma_compute(psum=True), "src1"),
    ("dma_compute", "dma-size"): Case(_dma_compute(size=True), "src1"),
    ("dma_compute", "reduce-op"): Case(_dma_compute(op=nl.multiply), "dst"),
    ("dma_compute", "dma-compute-scales"): Case(_dma_compute(scales=[1.0, 2.0]), "dst"),
    ("local_gather", "local-gather-partitions"): Case(_local_gather(parts=32), "index", old=True),
    ("local_gather", "index-dtype"): Case(_local_gather(index_dtype=nl.int32), "index", old=True),
    ("local_gather", "dtype-mismatch"): Case(_local_gather(dst_dtype=nl.bfloat16), "dst"),
    ("local_gather", "num-elem-per-idx"): Case(_local_gather(e=3), "index", old=True),
    ("local_gather", "num-valid-indices"): Case(_local_gather(valid=17), "index", old=True),
    ("local_gather", "shape-mismatch"): Case(_local_gather(dst_free=15), "dst"),
    ("sequence_bounds", "partition-dim"): Case(_sequence_bounds(parts=2), "segment_ids", old=True),
    ("sequence_bounds", "dtype"): Case(_sequence_bounds_dst_dtype, "dst", old=True),
    ("sequence_bounds", "shape-mismatch"): Case(_sequence_bounds(dst_shape=(1, 8)), "dst"),
    ("nonzero_with_count", "partition-step"): Case(_nonzero(lambda t: t[0:64:2]), "src"),
    ("nonzero_with_count", "start-partition"): Case(_nonzero(lambda t: t[1:33]), "src"),
    ("nonzero_with_count", "partition-mismatch"): Case(_nonzero(lambda t: t[0:32], dst_parts=16), "dst"),
    ("nonzero_with_count", "shape-mismatch"): Case(_nonzero(lambda t: t[0:32], dst_free=6), "dst"),
    ("nonzero_with_count", "nonzero-immediate"): Case(_nonzero(lambda t: t[0:32], imm=(0, -1.5)), None),
    ("topk", "dtype"): Case(_topk(src_dtype=nl.float32), "src"),
    ("topk", "topk-partitions"): Case(_topk(src_parts=24, val_parts=24), "src"),
    ("topk", "partition-mismatch"): Case(_topk(val_parts=32), "val_dst"),
    ("topk", "topk-n"): Case(_topk(n=4), "src"),
    ("topk", "topk-k"): Case(_topk(n=8, k=12), "val_dst"),
    ("topk", "topk-indices"): Case(_topk(idx_k=5), "idx_dst"),
    ("topk", "topk-src-size"): Case(_topk(n=80, src_free=4), "src"),
    ("quantize_mx", "mx-buffer"): Case(_quantize(psum=True), "src", target="trn3"),
    ("quantize_mx", "mx-dtype"): Case(_quantize(src_dtype=nl.float32), "src", target="trn3"),
    # The front end places the scales by the data's quadrants: data off the 32-partition grid is refused there.
    ("quantize_mx", "mx-partitions"): Case(_quantize(parts=16), "dst_scale", target="trn3"),
    ("quantize_mx", "mx-free-size"): Case(_quantize(free=18, dst_shape=(32, 4)), "src", target="trn3"),
    ("quantize_mx", "mx-shape"): Case(_quantize(dst_shape=(16, 4)), "dst", target="trn3"),
    ("quantize_mx", "mx-scale-layout"): Case(_quantize(scale_bad=True), "dst_scale", target="trn3"),
    ("nc_matmul_mx", "mx-buffer"): Case(_matmul_mx(st_psum=True), "stationary", target="trn3"),
    ("nc_matmul_mx", "mx-dtype"): Case(_matmul_mx(st_dtype=nl.bfloat16), "stationary", target="trn3"),
    ("nc_matmul_mx", "matmul-contraction"): Case(_matmul_mx(k_mv=64, n=12, dst=(16, 12)), "moving", target="trn3"),
    ("nc_matmul_mx", "mx-partitions"): Case(_matmul_mx(k_st=16, k_mv=16), "stationary_scale", target="trn3"),
    ("nc_matmul_mx", "matmul-stationary-size"): Case(_matmul_mx(m=15, dst=(15, 24)), "stationary",
                                                     target="trn3"),
    ("nc_matmul_mx", "matmul-buffer"): Case(_matmul_mx(dst_buffer=nl.sbuf), "dst", target="trn3"),
    ("nc_matmul_mx", "matmul-moving-size"): Case(_matmul_mx(n=4100, dst=(16, 4100)), "moving", target="trn3"),
    ("nc_matmul_mx", "matmul-output-shape"): Case(_matmul_mx(dst=(16, 23)), "dst", target="trn3"),
    ("nc_matmul_mx", "mx-scale-layout"): Case(_matmul_mx(scale_bad=True), "moving_scale", target="trn3"),
    ("nc_matmul_mx", "matmul-tile-position"): Case(_matmul_mx(tile=((16, 0), (32, 128))), "stationary",
                                                   target="trn3"),
    ("register_load", "register-operand"): Case(_register(), "src"),
    ("register_load", "register-buffer"): Case(_register(psum=True), "src"),
    ("register_store", "register-operand"): Case(_register(store=True), "dst"),
    ("register_store", "register-buffer"): Case(_register(store=True, psum=True), "dst"),
    ("rand_get_state", "rng-state-dtype"): Case(_state("get", dtype=nl.int32), "dst"),
    ("rand_get_state", "rng-state"): Case(_state("get", words=5), "dst"),
    ("rand_set_state", "rng-state-dtype"): Case(_state("set", dtype=nl.int32), "src_seeds"),
    ("rand_set_state", "rng-state"): Case(_state("set", words=24), "src_seeds"),
    ("rand", "dtype"): Case(_rng(dtype=True), "dst"),
    ("rand", "rng-engine"): Case(_rng(gpsimd=True), "dst"),
    ("set_rng_seed", "rng-seed"): Case(_seed(shape=(1, 2)), "src_seeds"),
    ("set_rng_seed", "rng-seed-dtype"): Case(_seed(dtype=nl.uint16), "src_seeds"),
    ("rand_get_state", "rng-engine"): Case(_state_engine("get"), "dst"),
    ("rand_set_state", "rng-engine"): Case(_state_engine("set"), "src_seeds"),
    ("rand_set_state", "rng-state-buffer"): Case(_state_engine("set", psum=True), "src_seeds"),
    ("dropout", "dropout-prob"): Case(_dropout(), "data"),
    ("dropout", "scalar-operand-shape"): Case(_dropout(tile=True), "prob"),
    ("rand2", "scalar-operand-shape"): Case(_rand2(tile=True), "min", target="trn3"),
    ("rand2", "rand2-range"): Case(_rand2(), "dst", target="trn3"),
    ("all_reduce", "collective-size"): Case(_collective("all_reduce", wrong_size=True), "dst"),
    ("all_reduce", "collective-op"): Case(_collective("all_reduce", op=nl.subtract), None),
    ("all_gather", "collective-size"): Case(_collective("all_gather", wrong_size=True), "dst"),
    ("reduce_scatter", "collective-size"): Case(_collective("reduce_scatter", wrong_size=True), "dst"),
    ("reduce_scatter", "collective-op"): Case(_collective("reduce_scatter", op=nl.subtract), None),
    ("all_to_all", "collective-size"): Case(_collective("all_to_all", wrong_size=True), "dst"),
    ("sendrecv", "shape-mismatch"): Case(_sendrecv(dst_shape=(2, 16)), "dst"),
    ("sendrecv", "dtype-mismatch"): Case(_sendrecv(dtype=nl.bfloat16), "dst"),
    ("sendrecv", "sendrecv-buffer"): Case(_sendrecv(buffer=nl.shared_hbm), "dst"),
    ("sendrecv", "sendrecv-rank"): Case(_sendrecv_ring, "src"),
    ("core_barrier", "core-barrier-cores"): Case(_barrier(cores=(0,)), "data"),
    ("core_barrier", "core-barrier-data"): Case(_barrier(on_chip=True), "data"),
    ("nonzero_with_count", "dtype"): Case(_nonzero(lambda t: t[0:32], dst_dtype=nl.float32), "dst"),
}

# Constraints of these rows the author cannot break through the API, with the reason.
BY_CONSTRUCTION = {
    # register_load/register_store's 'reg' is cased through their other operand (the same rule): a register
    # comes from register_alloc, one int32 in its own SBUF tile.
    ("register_move", "register-operand"): "'reg' and 'src' are registers from register_alloc: one int32 each",
    ("register_move", "register-buffer"): "registers live in no buffer an author chooses",
    ("dma_copy_indirect", "partition-dim-limit"): "the plain side is the same operand rule as dma_copy's "
                                                  "(cased there); an index tile cannot reach more partitions",
    ("dma_transpose", "partition-dim-limit"): "the same rule as dma_copy's (cased there): a DMA rule",
    ("dma_compute", "partition-dim-limit"): "the same rule as dma_copy's (cased there): a DMA rule",
    ("rand_get_state", "rng-state-buffer"): "a GpSimd dst in PSUM is refused first by the shared engine-buffer "
                                            "rule; the Vector Engine (NeuronCore-v4) may write PSUM",
}

# The public functions of this scope (issue 30, data movement and state) and the table rows they emit.
FUNCTION_ROWS = {
    "dma_copy": ("dma_copy", "dma_copy_indirect"), "dma_transpose": ("dma_transpose",),
    "dma_compute": ("dma_compute",), "local_gather": ("local_gather",), "sequence_bounds": ("sequence_bounds",),
    "nonzero_with_count": ("nonzero_with_count",), "topk": ("topk",), "nc_matmul_mx": ("nc_matmul_mx",),
    "quantize_mx": ("quantize_mx",), "register_alloc": ("register_move", "register_load"),
    "register_load": ("register_load",), "register_move": ("register_move",), "register_store": ("register_store",),
    "core_barrier": ("core_barrier",), "sendrecv": ("sendrecv",), "rng": ("rand",), "rand2": ("rand2",),
    "rand_set_state": ("rand_set_state",), "rand_get_state": ("rand_get_state",), "set_rng_seed": ("set_rng_seed",),
}

COVERAGE: dict[str, tuple[str, ...]] = {
    "dma_copy": ("dma-buffer", "dma-rmw-op", "dma-rmw-oob", "dma-size", "indirect-offsets", "indirect-offsets-buffer",
                 "indirect-table-buffer", "partition-dim-limit"),
    "dma_transpose": ("dma-buffer", "dma-size", "transpose-axes", "transpose-shape", "transpose-dge-mode",
                      "transpose-hwdge", "transpose-swdge"),
    "dma_compute": ("dma-compute-sources", "dma-buffer", "dma-size", "reduce-op", "dma-compute-scales"),
    "local_gather": ("local-gather-partitions", "index-dtype", "dtype-mismatch", "num-elem-per-idx",
                     "num-valid-indices", "shape-mismatch"),
    "sequence_bounds": ("partition-dim", "dtype", "shape-mismatch"),
    "nonzero_with_count": ("target-support", "partition-step", "start-partition", "partition-mismatch",
                           "shape-mismatch", "dtype", "nonzero-immediate"),
    "topk": ("target-support", "dtype", "topk-partitions", "partition-mismatch", "topk-n", "topk-k",
             "topk-indices", "topk-src-size"),
    "nc_matmul_mx": ("target-support", "mx-buffer", "mx-dtype", "matmul-contraction", "mx-partitions",
                     "matmul-stationary-size", "matmul-buffer", "matmul-moving-size", "matmul-output-shape",
                     "mx-scale-layout", "matmul-tile-position"),
    "quantize_mx": ("target-support", "mx-buffer", "mx-dtype", "mx-partitions", "mx-free-size", "mx-shape",
                    "mx-scale-layout"),
    "register_alloc": ("register-operand",),
    "register_load": ("register-operand", "register-buffer"),
    # nki.isa.register_move page: an immediate or another register; both come from the API, nothing to break.
    "register_move": (),
    "register_store": ("register-operand", "register-buffer"),
    "core_barrier": ("target-support", "core-barrier-cores", "core-barrier-data"),
    "sendrecv": ("target-support", "shape-mismatch", "dtype-mismatch", "sendrecv-buffer", "sendrecv-rank"),
    "rng": ("dtype", "rng-engine"),
    "rand2": ("target-support", "scalar-operand-shape", "rand2-range"),
    "rand_set_state": ("target-support", "rng-state-dtype", "rng-state", "rng-engine", "rng-state-buffer"),
    "rand_get_state": ("target-support", "rng-state-dtype", "rng-state", "rng-engine"),
    "set_rng_seed": ("rng-seed", "rng-seed-dtype"),
}

# The isa modules of this scope: every rule of a row defined in them must case its constraints (partition.py:
# only dma_transpose's rule; its other rows are compute instructions). Target gates come from rules.target_gate.
MODULES = {"dma": None, "dma_compute": None, "dma_indirect": None, "partition": {"_dma_transpose_rules"},
           "gather": None, "collectives": None, "random": None, "registers": None, "topk": None, "mx": None}


def _in_scope(rule) -> bool:
    mod = getattr(rule, "__module__", "").rsplit(".", 1)[-1]
    if rule in shared.COMPUTE_RULES:
        return False
    if hasattr(rule, "first"):
        return True
    return mod in MODULES and (MODULES[mod] is None or rule.__name__ in MODULES[mod])


def _scope_constraints():
    """(row, rule function, constraint) of every documented constraint a rule of this scope checks."""
    for opcode, row in sorted(OPS.items()):
        for rule in row.rules:
            if _in_scope(rule):
                for c in getattr(rule, "documents", ()):
                    yield opcode, rule, c


CONSTRAINTS = list(_scope_constraints())


def test_every_function_in_scope_is_covered():
    assert set(COVERAGE) == set(FUNCTION_ROWS)
    for fn in FUNCTION_ROWS:
        assert hasattr(nisa, fn), fn


def test_every_rule_of_these_rows_states_its_constraints():
    for opcode, row in OPS.items():
        for rule in row.rules:
            if _in_scope(rule):
                assert getattr(rule, "documents", ()), f"{opcode}: rule {rule.__name__} states no constraint"
                for c in rule.documents:
                    assert c.page(opcode).startswith(("nki.isa.", "nki.collectives.", "nki.language.")), c


@pytest.mark.parametrize("opcode,rule,constraint", CONSTRAINTS,
                         ids=[f"{o}-{c.rule}" for o, _, c in CONSTRAINTS])
def test_every_constraint_has_a_case(opcode, rule, constraint):
    if constraint.rule == "target-support":
        assert opcode in GATED, f"{opcode}: its target gate has no per-target case"
        return
    key = (opcode, constraint.rule)
    assert key in CASES or key in BY_CONSTRUCTION, f"{opcode}: constraint {constraint} has no case"


def test_coverage_lists_what_the_cases_cover():
    for fn, rows in FUNCTION_ROWS.items():
        cased = {r for (o, r) in CASES if o in rows} | {"target-support" for o in rows if o in GATED}
        if fn == "register_alloc":
            cased = {"register-operand"}     # register_alloc(tile) is a register_load, cased below
        assert set(COVERAGE[fn]) == cased, fn


CASED = [(o, r, new) for (o, r), c in CASES.items() for new in ((True, False) if c.old else (True,))]
_IDS = [f"{o}-{r}-{'nki.isa' if n else 'neuronxcc'}" for o, r, n in CASED]


def _constraint(opcode, rule_name):
    return next(c for o, _, c in CONSTRAINTS if o == opcode and c.rule == rule_name)


@pytest.mark.parametrize("opcode,rule,new", CASED, ids=_IDS)
def test_breaking_the_constraint_is_refused_at_the_authors_line(opcode, rule, new):
    case = CASES[(opcode, rule)]
    lines: list = []
    with pytest.raises(KernelRuleError) as err:
        case.run(True, new, lines)
    assert err.value.rule == rule, str(err.value)
    if case.role is None:
        assert err.value.operand is None
    else:
        assert (err.value.operand or "").split("_", 1)[-1].startswith(case.role) or \
            (err.value.operand or "").startswith(case.role), str(err.value)
    assert err.value.loc.line == lines[-1] and err.value.loc.file == __file__
    assert _constraint(opcode, rule).page(opcode) in str(err.value)


@pytest.mark.parametrize("opcode,rule,new", CASED, ids=_IDS)
def test_keeping_the_constraint_runs(opcode, rule, new):
    got, want = CASES[(opcode, rule)].run(False, new, [])
    if want is not None:
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=1e-6)


@pytest.mark.parametrize("imm", [(1.0, -1), (2 ** 31, -1), (0, -2 ** 31 - 1), (True, -1), (0, nl.float32)])
def test_nonzero_immediates_are_int32(imm):
    lines: list = []
    with pytest.raises(KernelRuleError) as err:
        _nonzero(lambda t: t[0:32], imm=imm)(True, True, lines)
    assert err.value.rule == "nonzero-immediate" and err.value.loc.line == lines[-1], str(err.value)


def test_nonzero_immediates_at_the_int32_bounds_run():
    def k(x):
        t = x_sb(x)
        d = nl.ndarray((32, 7), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=d, src=t[0:32], index_offset=2 ** 31 - 7, padding_val=-2 ** 31)
        out = nl.ndarray((1, 7), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=d[0:1])
        return out
    want = np.full((1, 7), -2 ** 31, np.int64)
    nz = np.flatnonzero(NZ[0])
    want[0, :nz.size], want[0, 6] = nz + 2 ** 31 - 7, nz.size
    np.testing.assert_array_equal(np.asarray(_run(k, NZ), np.int64), want)


@pytest.mark.parametrize("kw,why", [
    (dict(table_dtype=np.float16, idx_dtype=nl.uint32, rows=16, target="trn1"), "NeuronCore-v3"),
    (dict(table_dtype=np.float16, idx_dtype=nl.uint32, rows=16, width=136), "src.shape[-1] = 136"),
    (dict(table_dtype=np.float32, idx_dtype=nl.uint32, rows=16), "2-byte"),
    (dict(table_dtype=np.float16, idx_dtype=nl.uint32, rows=8), "multiple of 16"),
    (dict(table_dtype=np.float16, idx_dtype=nl.int32, rows=16), "uint32"),
], ids=["trn1", "wide", "float32", "8-rows", "int32-indices"])
def test_each_indirect_transpose_limit_is_refused(kw, why):
    lines: list = []
    with pytest.raises(KernelRuleError) as err:
        _transpose_gather(**kw)(True, True, lines)
    assert err.value.rule == "transpose-swdge" and why in str(err.value), str(err.value)
    assert err.value.loc.line == lines[-1]


def test_the_old_dialect_transposes_gathered_rows_without_the_indirect_limits():
    # The 2.2x dma_transpose page states no indirect limits: a float32 table and 4 int32 indices run there.
    table = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)

    def k(t, idx):
        from nkihub.nki.compat import language as old_nl
        i = old_nl.load(idx)
        ip, iy = old_nl.arange(4)[:, None], old_nl.arange(8)[None, :]
        d = old_isa.dma_transpose(t[i[ip, 0], iy])
        out = old_nl.ndarray(d.shape, dtype=d.dtype, buffer=old_nl.shared_hbm)
        old_nl.store(out, d)
        return out
    np.testing.assert_array_equal(_run(k, table, IDX), table[IDX[:, 0]].T)


def test_register_alloc_of_a_tile_is_a_register_load():
    lines: list = []
    with pytest.raises(KernelRuleError) as err:
        _register(alloc=True)(True, True, lines)
    assert err.value.rule == "register-operand" and err.value.loc.line == lines[-1]
    got, want = _register(alloc=True)(False, True, [])
    np.testing.assert_array_equal(got, want)


# -- target gates: refused on every older target, run on the first target that has the instruction and after -------
def _gate_exponential(target, lines):
    def k(x):
        t, d = x_sb(x), _sb(x.shape)
        lines.append(_line())
        nisa.exponential(dst=d, src=t)
        return _out(d)
    return _run(k, X[:, :8], target=target)


def _gate_activate2(target, lines):
    def k(x):
        t, d = x_sb(x), _sb(x.shape)
        lines.append(_line())
        nisa.activate2(dst=d, op=nl.copy, data=t, imm0=1.0, imm1=0.0, op0=nl.multiply, op1=nl.add)
        return _out(d)
    return _run(k, X[:, :8], target=target)


def _gate_range_select(target, lines):
    def k(x):
        t, d = x_sb(x), _sb(x.shape)
        b0, b1 = _sb((P, 1)), _sb((P, 1))
        nisa.memset(dst=b0, value=0.0)
        nisa.memset(dst=b1, value=4.0)
        lines.append(_line())
        nisa.range_select(dst=d, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=b0, bound1=b1)
        return _out(d)
    return _run(k, X[:, :8], target=target)


def _gate_topk(target, lines):
    def k(x):
        s, v, i = _sb(x.shape, nl.bfloat16), _sb((16, 4), nl.bfloat16), _sb((16, 4), nl.uint32)
        nisa.dma_copy(dst=s, src=x)
        lines.append(_line())
        nisa.topk(v, i, s, n=40)
        return _out(v)
    return _run(k, TK, target=target)


def _gate_nonzero(target, lines):
    def k(x):
        t, d = x_sb(x), _sb((16, 7), nl.int32)
        lines.append(_line())
        nisa.nonzero_with_count(dst=d, src=t)
        return _out(d[0:1])
    return _run(k, NZ[:16], target=target)


def _gate_quantize(target, lines):
    def k(x):
        t = _sb((32, 16), nl.bfloat16)
        nisa.memset(dst=t, value=1.0)
        q, s = nl.ndarray((32, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf), _scale(32, 4)
        lines.append(_line())
        nisa.quantize_mx(dst=q, src=t, dst_scale=s)
        return _out(s)
    return _run(k, X, target=target)


def _gate_matmul_mx(target, lines):
    def k(x):
        st, mv = (nl.ndarray((32, f), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf) for f in (16, 24))
        ss, ms = _scale(32, 16), _scale(32, 24)
        for t in (st, mv, ss, ms):
            nisa.memset(dst=t, value=0)
        acc = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.psum)
        lines.append(_line())
        nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=ss, moving_scale=ms)
        o = _sb(acc.shape)
        nisa.tensor_copy(dst=o, src=acc)
        return _out(o)
    return _run(k, X, target=target)


def _gate_rand2(target, lines):
    def k(x):
        d = _sb((P, 8))
        lines.append(_line())
        nisa.rand2(dst=d, min=0.0, max=1.0)
        return _out(d)
    return _run(k, X, target=target)


def _gate_state(op):
    def case(target, lines):
        def k(x):
            s = _sb((1, 6), nl.uint32)
            _state_call(op, s, lines)
            return _out(s)
        return _run(k, X, target=target)
    return case


def _gate_core_barrier(target, lines):
    def k(x):
        c = nl.program_id(0)
        shared_t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=shared_t[c * 4:(c + 1) * 4], src=x[c * 4:(c + 1) * 4])
        lines.append(_line())
        nisa.core_barrier(shared_t, (0, 1))
        return shared_t
    return nki.jit(k, platform_target=target)[2](X[:8, :4])


def _gate_sendrecv(target, lines):
    def k(x):
        c = nl.program_id(0)
        t, got = x_sb(x[c]), _sb((4, 8))
        lines.append(_line())
        nisa.sendrecv(src=t, dst=got, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)
        out = nl.ndarray((2, 4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[c], src=got)
        return out
    return nki.jit(k, platform_target=target)[2](np.zeros((2, 4, 8), np.float32))


GATED = {
    "exponential": _gate_exponential, "activate2": _gate_activate2, "range_select": _gate_range_select,
    "topk": _gate_topk, "nonzero_with_count": _gate_nonzero, "quantize_mx": _gate_quantize,
    "nc_matmul_mx": _gate_matmul_mx, "rand2": _gate_rand2, "rand_get_state": _gate_state("get"),
    "rand_set_state": _gate_state("set"), "core_barrier": _gate_core_barrier, "sendrecv": _gate_sendrecv,
}
TARGETS = {"gen2": "trn1", "gen3": "trn2", "gen4": "trn3"}


def _gate_of(opcode):
    return next(r for r in OPS[opcode].rules if hasattr(r, "first"))


GATE_CASES = [(o, t) for o in GATED for t in TARGETS.values()]


@pytest.mark.parametrize("opcode,target", GATE_CASES, ids=[f"{o}-{t}" for o, t in GATE_CASES])
def test_target_gate_per_target(opcode, target):
    first = _gate_of(opcode).first
    lines: list = []
    if shared.NC_ORDER.index({v: k for k, v in TARGETS.items()}[target]) < shared.NC_ORDER.index(first):
        with pytest.raises(KernelRuleError) as err:
            GATED[opcode](target, lines)
        assert err.value.rule == "target-support" and target in str(err.value)
        assert err.value.loc.line == lines[-1] and err.value.loc.file == __file__
        assert f"nki.isa.{opcode}" in str(err.value)
    else:
        GATED[opcode](target, lines)


def test_every_gated_row_has_gate_cases():
    gated = {o for o, row in OPS.items() if any(hasattr(r, "first") for r in row.rules)}
    assert gated == set(GATED)


# -- no raw numpy or Python error from a kernel mistake ------------------------------------------------------------
DTYPES = [nl.float32, nl.bfloat16, nl.int32, nl.uint16, nl.uint32, nl.uint8]
SHAPES = st.tuples(st.sampled_from([1, 2, 16, 24, 32, 128, 130]), st.sampled_from([1, 3, 4, 8, 16, 600]))


def _fuzz(which, a_shape, b_shape, a_dtype, b_dtype):
    """One instruction of this scope on operands of arbitrary shapes and dtypes (SBUF tiles set to 0/1)."""
    def k(x):
        a = _sb(a_shape, a_dtype)
        b = _sb(b_shape, b_dtype)
        nisa.memset(dst=a, value=1)
        nisa.memset(dst=b, value=0)
        if which == "old_dma_copy":
            old_isa.dma_copy(dst=b, src=a)
        elif which == "old_dma_transpose":
            old_isa.dma_transpose(a)
        elif which == "old_local_gather":
            old_isa.local_gather(a, _sb((a_shape[0], b_shape[1]), nl.uint16), num_elem_per_idx=b_shape[0])
        elif which == "old_sequence_bounds":
            old_isa.sequence_bounds(segment_ids=a, dtype=b_dtype)
        elif which == "dma_copy":
            nisa.dma_copy(dst=b, src=a)
        elif which == "dma_transpose":
            nisa.dma_transpose(dst=b, src=a)
        elif which == "dma_compute":
            nisa.dma_compute(dst=b, srcs=[a, a], reduce_op=nl.add)
        elif which == "local_gather":
            nisa.local_gather(b, a, _sb((a_shape[0], 1), nl.uint16))
        elif which == "sequence_bounds":
            nisa.sequence_bounds(b, a)
        elif which == "nonzero_with_count":
            nisa.nonzero_with_count(dst=b, src=a)
        elif which == "topk":
            nisa.topk(b, _sb(b_shape, nl.uint32), a, n=max(8, a_shape[1]))
        elif which == "quantize_mx":
            nisa.quantize_mx(dst=b, src=a, dst_scale=_scale(max(8, a_shape[0]), max(1, a_shape[1] // 4)))
        elif which == "register":
            nisa.register_store(b, nisa.register_alloc(a))
        elif which == "rand_get_state":
            nisa.rand_get_state(dst=b)
        elif which == "indirect":
            ids = _sb(a_shape, a_dtype)
            nisa.memset(dst=ids, value=0)
            nisa.dma_copy(dst=b, src=x.ap(pattern=[[F, b_shape[0]], [1, b_shape[1]]], offset=0, vector_offset=ids,
                                          indirect_dim=0))
        elif which == "rng":
            nisa.rng(dst=b)
        elif which == "set_rng_seed":
            nisa.set_rng_seed(src_seeds=a)
        elif which == "rand2":
            nisa.rand2(dst=b, min=a, max=2.0)
        elif which == "dropout":
            nisa.dropout(dst=b, data=b, prob=a)
        elif which == "sendrecv":
            c = nl.program_id(0)
            nisa.sendrecv(src=a, dst=b, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)
        done = _sb((1, 1))
        nisa.memset(dst=done, value=1.0)
        return _out(done)
    if which == "sendrecv":
        return nki.jit(k, platform_target="trn3")[2](X)
    return _run(k, X, target="trn3")


FUZZED = ["dma_copy", "dma_transpose", "dma_compute", "local_gather", "sequence_bounds", "nonzero_with_count", "topk",
          "quantize_mx", "register", "rand_get_state", "rand2", "dropout", "rng", "set_rng_seed", "indirect",
          "sendrecv", "old_dma_copy", "old_dma_transpose", "old_local_gather", "old_sequence_bounds"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(FUZZED),
       a_shape=SHAPES, b_shape=SHAPES, a_dtype=st.sampled_from(DTYPES), b_dtype=st.sampled_from(DTYPES))
def test_kernel_mistakes_surface_as_rule_errors(which, a_shape, b_shape, a_dtype, b_dtype):
    try:
        _fuzz(which, a_shape, b_shape, a_dtype, b_dtype)
    except NkiError as e:
        assert e.rule and e.loc is not None, e
    except Exception as e:   # numpy's broadcasting ValueError, an IndexError, a TypeError...
        pytest.fail(f"raw {type(e).__name__} reached the author for {which} {a_shape} {a_dtype} -> {b_shape} "
                    f"{b_dtype}: {e}")


def test_hardware_dge_transpose_needs_neuroncore_v3():
    def k(x):
        d = _sb(x.shape[::-1], nl.float16)
        nisa.dma_transpose(dst=d, src=x, dge_mode=nisa.dge_mode.hwdge)
        return _out(d)
    x = np.ones((16, 128), np.float16)
    with pytest.raises(KernelRuleError, match=r"NeuronCore-v3 or newer, not trn1 .*transpose-hwdge"):
        _run(k, x, target="trn1")
    np.testing.assert_array_equal(_run(k, x, target="trn2"), x.T)


def test_dma_compute_without_sources_is_a_rule_error():
    def k(x):
        d = _sb((16, 8))
        lines.append(_line())
        nisa.dma_compute(dst=d, srcs=[], reduce_op=nl.add)
        return _out(d)
    lines: list = []
    with pytest.raises(KernelRuleError) as err:
        _run(k, X)
    assert err.value.rule == "dma-compute-sources" and err.value.loc.line == lines[-1]


def test_local_gather_index_outside_src_buffer_is_a_rule_error_at_run_time():
    # The page leaves an out-of-bounds index undefined; the simulator stops at the author's line.
    def k(src):
        s = x_sb(src)
        i = _sb((16, 1), nl.uint16)
        nisa.memset(dst=i, value=20)
        d = _sb((16, 16))
        lines.append(_line())
        nisa.local_gather(d, s, i)
        return _out(d)
    lines: list = []
    with pytest.raises(KernelRuleError) as err:
        _run(k, LG_SRC)
    assert err.value.rule == "local-gather-index" and err.value.operand == "index"
    assert err.value.loc.line == lines[-1] and err.value.loc.file == __file__
