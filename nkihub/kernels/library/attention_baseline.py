"""Unfused attention: the math of neuron/vit-attn as three NKI kernels that round-trip through HBM.

    s = qk_kernel(q, k, scale)     # (B, H, S, S) = scale * q k^T, in q's dtype (as eager torch keeps it)
    p = softmax_kernel(s)          # row softmax, fp32 math, stored in s's dtype
    o = pv_kernel(p, v)            # (B, H, S, D) = p v

This is the baseline the fused kernel's speedup is measured against on the cost model, so each kernel is
written with the same care as the fused one (Tensor Engine transposes, rotating multi-buffered tiles, one
DMA per 128-row tile, and each tile's loads issued before the previous tile's compute and store, so loads
overlap compute under in-order DMA issue: ``loads_ahead``); only the fusion is missing. Not a Hub package.
"""
import nki
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.common import loads_ahead

P = 128
BANK = 512
# Loads are issued this many tiles (qk: heads) ahead of their compute: the fused kernel's pipeline distance
# (vit_attn AHEAD_SCORES). At (8, 12, 197, 64) on trn2 the unfused total is 826 / 576 / 483 / 444 us at
# AHEAD 1 / 2 / 3 / 4.
AHEAD = 3
SLOTS = AHEAD + 1    # rotating buffers per working tile: the tiles in flight


def row_tiles(n):
    """[(start, rows)] covering n rows in tiles of 128."""
    return [(s, min(P, n - s)) for s in range(0, n, P)]


def _load_rows(src, n, rows_ring, i):
    """src [n, D] rows (HBM) -> slot ``i`` of rows_ring, one DMA per 128-row tile."""
    rows = rows_ring[:, i % (2 * SLOTS)]
    for t, (s, r) in enumerate(row_tiles(n)):
        nisa.dma_copy(dst=rows[:r, t, :], src=src[s:s + r, :])


def _transposed(n, d, rows_ring, ring_psum, ring_sb, i):
    """Slot ``i`` of rows_ring ([n, D] rows, loaded by ``_load_rows``) -> SBUF [D, n]: Tensor Engine
    transposes, one copy per PSUM bank."""
    rows = rows_ring[:, i % (2 * SLOTS)]
    xT = ring_sb[:, (i // 2) % SLOTS, :]
    for c0 in range(0, n, BANK):
        w = min(BANK, n - c0)
        tp = ring_psum[:, i % 2, :]
        for s, r in row_tiles(w):
            nisa.nc_transpose(dst=tp[:d, s:s + r], data=rows[:r, (c0 + s) // P, :])
        nisa.tensor_copy(dst=xT[:, c0:c0 + w], src=tp[:d, :w])
    return xT


@nki.jit
def qk_kernel(q, k, scale):
    """s = scale * q k^T. q, k (B, H, S, D) -> s (B, H, S, S) in q's dtype."""
    bsz, heads, n, d = q.shape
    s_out = nl.ndarray((bsz, heads, n, n), dtype=q.dtype, buffer=nl.shared_hbm)
    tp = nl.ndarray((P, 2, BANK), dtype=nl.float32, buffer=nl.psum, name="tp")
    qT_ring = nl.ndarray((d, SLOTS, n), dtype=q.dtype, buffer=nl.sbuf, name="qT")
    kT_ring = nl.ndarray((d, SLOTS, n), dtype=q.dtype, buffer=nl.sbuf, name="kT")
    s_psum = nl.ndarray((P, 2, BANK), dtype=nl.float32, buffer=nl.psum, name="s_psum")
    s_ring = nl.ndarray((P, SLOTS, n), dtype=q.dtype, buffer=nl.sbuf, name="s_sb")
    rows_ring = nl.ndarray((P, 2 * SLOTS, len(row_tiles(n)), d), dtype=q.dtype, buffer=nl.sbuf, name="rows")
    nt = len(row_tiles(n))

    def load(hi):
        b, h = divmod(hi, heads)
        _load_rows(q[b, h], n, rows_ring, 2 * hi)
        _load_rows(k[b, h], n, rows_ring, 2 * hi + 1)

    def compute(hi):
        b, h = divmod(hi, heads)
        qT = _transposed(n, d, rows_ring, tp, qT_ring, 2 * hi)
        kT = _transposed(n, d, rows_ring, tp, kT_ring, 2 * hi + 1)
        for t, (q0, r) in enumerate(row_tiles(n)):
            i = hi * nt + t
            s_sb = s_ring[:, i % SLOTS, :]
            for c0 in range(0, n, BANK):
                w = min(BANK, n - c0)
                ps = s_psum[:, i % 2, :]
                nisa.nc_matmul(dst=ps[:r, :w], stationary=qT[:, q0:q0 + r], moving=kT[:, c0:c0 + w],
                               accumulate=False)
                nisa.activation(dst=s_sb[:r, c0:c0 + w], op=nl.copy, data=ps[:r, :w], scale=scale)
            nisa.dma_copy(dst=s_out[b, h, q0:q0 + r, :], src=s_sb[:r, :])

    loads_ahead(range(bsz * heads), load, compute, AHEAD)    # AHEAD heads ahead
    return s_out


@nki.jit
def softmax_kernel(s):
    """Row softmax of s (B, H, S, S) over the last dim, fp32 math; returns p in s's dtype."""
    bsz, heads, n, m = s.shape
    rows = s.reshape((bsz * heads * n, m))
    p_out = nl.ndarray((bsz, heads, n, m), dtype=s.dtype, buffer=nl.shared_hbm)
    p_rows = p_out.reshape((bsz * heads * n, m))
    x_ring = nl.ndarray((P, SLOTS, m), dtype=s.dtype, buffer=nl.sbuf, name="x")
    e_ring = nl.ndarray((P, SLOTS, m), dtype=nl.float32, buffer=nl.sbuf, name="e")
    y_ring = nl.ndarray((P, SLOTS, m), dtype=s.dtype, buffer=nl.sbuf, name="y")
    st = nl.ndarray((P, SLOTS, 2), dtype=nl.float32, buffer=nl.sbuf, name="stats")
    tiles = row_tiles(bsz * heads * n)

    def load(i):
        r0, r = tiles[i]
        nisa.dma_copy(dst=x_ring[:r, i % SLOTS, :], src=rows[r0:r0 + r, :])

    def compute(i):
        r0, r = tiles[i]
        j = i % SLOTS
        nisa.tensor_reduce(dst=st[:r, j, 0:1], op=nl.maximum, data=x_ring[:r, j, :], axis=1, negate=True)
        nisa.activation(dst=e_ring[:r, j, :], op=nl.exp, data=x_ring[:r, j, :], bias=st[:r, j, 0:1],
                        reduce_op=nl.add, reduce_res=st[:r, j, 1:2])
        nisa.tensor_scalar(dst=y_ring[:r, j, :], data=e_ring[:r, j, :], op0=nl.divide, operand0=st[:r, j, 1:2])
        nisa.dma_copy(dst=p_rows[r0:r0 + r, :], src=y_ring[:r, j, :])

    loads_ahead(range(len(tiles)), load, compute, AHEAD)
    return p_out


@nki.jit
def pv_kernel(p, v):
    """o = p v. p (B, H, S, S), v (B, H, S, D) -> o (B, H, S, D) in v's dtype."""
    bsz, heads, n, _ = p.shape
    d = v.shape[3]
    o_out = nl.ndarray((bsz, heads, n, d), dtype=v.dtype, buffer=nl.shared_hbm)
    kts = row_tiles(n)
    nk = len(kts)
    v_ring = nl.ndarray((P, SLOTS, nk, d), dtype=v.dtype, buffer=nl.sbuf, name="v")
    p_ring = nl.ndarray((P, SLOTS, n), dtype=p.dtype, buffer=nl.sbuf, name="p")
    pT_psum = nl.ndarray((P, 2, 4, P), dtype=nl.float32, buffer=nl.psum, name="pT_psum")
    pT_ring = nl.ndarray((P, SLOTS, nk, P), dtype=p.dtype, buffer=nl.sbuf, name="pT")
    o_psum = nl.ndarray((P, 2, BANK), dtype=nl.float32, buffer=nl.psum, name="o_psum")
    o_ring = nl.ndarray((P, SLOTS, d), dtype=v.dtype, buffer=nl.sbuf, name="o")

    def load(i):    # tile i: (head, row tile); a head's first tile also brings its v
        hi, qt = divmod(i, nk)
        b, h = divmod(hi, heads)
        if qt == 0:
            for t, (s0, r) in enumerate(kts):
                nisa.dma_copy(dst=v_ring[:r, hi % SLOTS, t, :], src=v[b, h, s0:s0 + r, :])
        q0, r = kts[qt]
        nisa.dma_copy(dst=p_ring[:r, i % SLOTS, :], src=p[b, h, q0:q0 + r, :])

    def compute(i):
        hi, qt = divmod(i, nk)
        b, h = divmod(hi, heads)
        hv, j = hi % SLOTS, i % SLOTS
        q0, r = kts[qt]
        ops = o_psum[:, i % 2, :]
        for t, (k0, kc) in enumerate(kts):
            tp = pT_psum[:, (i * nk + t) % 2, t % 4, :]
            nisa.nc_transpose(dst=tp[:kc, :r], data=p_ring[:r, j, k0:k0 + kc])
            nisa.tensor_copy(dst=pT_ring[:kc, j, t, :r], src=tp[:kc, :r])
            nisa.nc_matmul(dst=ops[:r, :d], stationary=pT_ring[:kc, j, t, :r],
                           moving=v_ring[:kc, hv, t, :], accumulate=t > 0)
        nisa.tensor_copy(dst=o_ring[:r, j, :], src=ops[:r, :d])
        nisa.dma_copy(dst=o_out[b, h, q0:q0 + r, :], src=o_ring[:r, j, :])

    loads_ahead(range(bsz * heads * nk), load, compute, AHEAD)    # AHEAD row tiles ahead
    return o_out


def unfused_attention(q, k, v, scale):
    """The three kernels in sequence (numpy arrays or CPU torch tensors (B, H, S, D)); returns o."""
    return pv_kernel(softmax_kernel(qk_kernel(q, k, scale)), v)


KERNELS = (qk_kernel, softmax_kernel, pv_kernel)
