"""NKI kernels of neuron/matmul: C = A @ B for any M, K, N, blocked for the Tensor Engine.

Design (hardware.md numbers, trn1): one nc_matmul takes a stationary [128 k, 128 m] and a moving
[128 k, 512 n] tile; at 512 columns it runs at the Tensor Engine's peak, so the kernel keeps it fed:

- A block of up to 4 x 128 rows of A is loaded once (contiguous rows), transposed on the Tensor Engine
  into A^T [k, m] tiles (the stationary operand) and kept in SBUF while every column block of B streams
  past it ("loads hoisted": A^T is built once per row block, not once per output tile).
- An output block is 4 x 2 PSUM banks ([128 m, 512 n] fp32 each), accumulating over all of K.
- B streams in DMAs of ``k_group`` x 128 rows by 1024 columns (2 KiB contiguous per row: full DMA
  bandwidth; 1 MiB per DMA amortises the fixed cost). Within a DMA group, partition p holds rows
  k0 + p * k_group + j, and A^T tile j of the group is transposed from A's columns k0 + j :: k_group,
  so both operands agree on which k each partition holds.
- Remainders (M, N, K not multiples of the tiles) use partial tiles; K left over after whole groups goes
  in single k-tiles of at most 128 rows.
- If A^T of a row block does not fit its SBUF budget, K is split into chunks whose A^T is rebuilt per
  column block, accumulating into the same PSUM banks.
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_K = 128          # contraction rows per matmul (partitions)
TILE_M = 128          # stationary free size
TILE_N = 512          # moving free size: one 2 KiB PSUM bank of fp32
N_TILES = 2           # PSUM banks per output row tile: 1024 columns = 2 KiB bf16 rows for B's DMAs
AT_BUDGET_BYTES = 64 * 1024   # SBUF bytes per partition for the hoisted A^T of one row block


def _cdiv(a, b):
    return (a + b - 1) // b


def k_slices(k_lo, k_hi, k_group):
    """The k-tiles of rows k_lo:k_hi as DMA groups: a list of (k0, g, kw); a group holds g k-tiles of kw
    rows where tile j covers rows k0 + p * g + j (p < kw). Whole groups first, then single tiles."""
    groups = []
    span = TILE_K * k_group
    k = k_lo
    while k_hi - k >= span and k_group > 1:
        groups.append((k, k_group, TILE_K))
        k += span
    while k < k_hi:
        kw = min(TILE_K, k_hi - k)
        groups.append((k, 1, kw))
        k += kw
    return groups


def b_group_view(b, k0, g, kw, n0, nw):
    """HBM view [kw, g, nw] of B for one DMA group: element [p, j, n] = b[k0 + p * g + j, n0 + n]."""
    if g == 1:
        return b[k0:k0 + kw, n0:n0 + nw]
    rows = b[k0:k0 + kw * g, :]
    return rows.reshape((kw, g, b.shape[1]))[:, :, n0:n0 + nw]


def copy_psum(dst, src, engine_index):
    """Evacuate a PSUM tile to SBUF, alternating the Vector and Scalar engines so neither is a bottleneck."""
    if engine_index % 2 == 0:
        nisa.tensor_copy(dst=dst, src=src, engine=nisa.vector_engine)
    else:
        nisa.activation(dst=dst, op=nl.copy, data=src)


def transpose_into(a_t, src, rows, col0, tiles, counter=0):
    """Transpose SBUF src [rows <= 128, F] on the Tensor Engine into a_t [128, n_tiles, C] at columns
    col0:col0+rows. ``tiles`` lists (index into a_t's middle dim, kw, column slice of src); up to four
    transposes fill one PSUM bank before one copy moves them out. Returns the updated copy counter
    (alternates the evacuation engine)."""
    c0 = 0
    while c0 < len(tiles):
        batch = [tiles[c0]]
        while len(batch) < 4 and c0 + len(batch) < len(tiles) and tiles[c0 + len(batch)][1] == batch[0][1] \
                and tiles[c0 + len(batch)][0] == batch[0][0] + len(batch):
            batch.append(tiles[c0 + len(batch)])
        kw = batch[0][1]
        t_psum = nl.ndarray((TILE_K, len(batch), TILE_M), dtype=nl.float32, buffer=nl.psum)
        for jj, (_, _, cols) in enumerate(batch):
            nisa.nc_transpose(dst=t_psum[:kw, jj, :rows], data=src[:rows, cols], engine=nisa.tensor_engine)
        v0 = batch[0][0]
        copy_psum(a_t[:kw, v0:v0 + len(batch), col0:col0 + rows], t_psum[:kw, :, :rows], counter)
        counter += 1
        c0 += len(batch)
    return counter


def plain_tiles(f):
    """The ``tiles`` argument of transpose_into for F consecutive columns in 128-wide tiles."""
    return [(t, min(TILE_K, f - t * TILE_K), slice(t * TILE_K, min(f, (t + 1) * TILE_K)))
            for t in range(_cdiv(f, TILE_K))]


def a_row_loads(a, m0, m_rows, groups):
    """The loads of :func:`build_a_transposed`, lazily: yields (128-row tile index, rows, SBUF tile
    [rows, k span of groups]) of rows m0:m0+m_rows of HBM a [M, K], its DMA traced when pulled."""
    k_lo = groups[0][0]
    k_hi = max(k0 + g * kw for k0, g, kw in groups)
    for i in range(_cdiv(m_rows, TILE_M)):
        mw = min(TILE_M, m_rows - i * TILE_M)
        a_nat = nl.ndarray((mw, k_hi - k_lo), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_nat, src=a[m0 + i * TILE_M:m0 + i * TILE_M + mw, k_lo:k_hi])
        yield i, mw, a_nat


def build_a_transposed(a, m0, m_rows, groups, loads=None):
    """A^T of rows m0:m0+m_rows of HBM a [M, K] for the k-tiles of ``groups`` (see k_slices): one SBUF
    tensor [128, n_ktiles, m_rows] (k on partitions) in a's dtype, built with Tensor Engine transposes
    of contiguous row loads. Also turns a torch Linear weight [out, in] into W^T [in, out] tiles.
    ``loads``: the row tiles already loaded (``list(a_row_loads(...))``, issued ahead by the caller);
    by default each row tile is loaded just before its transposes."""
    n_kt = sum(g for _, g, _ in groups)
    k_lo = groups[0][0]
    a_t = nl.ndarray((TILE_K, n_kt, m_rows), dtype=a.dtype, buffer=nl.sbuf)
    tiles = []  # (virtual k-tile index, kw, column slice of the natural A tile)
    for k0, g, kw in groups:
        for j in range(g):
            tiles.append((len(tiles), kw, slice(k0 - k_lo + j, k0 - k_lo + j + (kw - 1) * g + 1, g)))
    counter = 0
    for i, mw, a_nat in (a_row_loads(a, m0, m_rows, groups) if loads is None else loads):
        counter = transpose_into(a_t, a_nat, mw, i * TILE_M, tiles, counter)
    return a_t


def matmul_block(a_t, b, groups, m_rows, n0, n_cols, acc):
    """Accumulate A^T(groups).T @ B[k rows of groups, n0:n0+n_cols] into PSUM tiles acc[i][j]
    ([<=128 m, <=512 n] fp32), streaming B one DMA group at a time."""
    v = 0
    for k0, g, kw in groups:
        b_tile = nl.ndarray((kw, g, n_cols), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b_tile, src=b_group_view(b, k0, g, kw, n0, n_cols))
        for j in range(g):
            for i in range(len(acc)):
                mw = min(TILE_M, m_rows - i * TILE_M)
                for jn in range(len(acc[i])):
                    nw = min(TILE_N, n_cols - jn * TILE_N)
                    nisa.nc_matmul(dst=acc[i][jn], stationary=a_t[:kw, v, i * TILE_M:i * TILE_M + mw],
                                   moving=b_tile[:kw, j, jn * TILE_N:jn * TILE_N + nw])
            v += 1


@nki.jit
def matmul_kernel(a, b, k_group=4, m_tiles=4):
    """C = A @ B. a [M, K], b [K, N] (both bf16 or both fp32, HBM) -> [M, N] in a's dtype.
    ``k_group``: k-tiles per B DMA; ``m_tiles``: 128-row tiles of A per row block (at most 4, fewer when
    A^T would not fit AT_BUDGET_BYTES)."""
    m, k = a.shape
    _, n = b.shape
    out = nl.ndarray((m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    itemsize = a.itemsize
    kt_total = _cdiv(k, TILE_K)
    m_tiles = max(1, min(m_tiles, AT_BUDGET_BYTES // max(1, kt_total * TILE_M * itemsize)))
    block_m = m_tiles * TILE_M
    block_n = N_TILES * TILE_N
    # K chunks whose A^T fits the budget for one row block (one chunk in the common case).
    # (only when a single 128-row A^T tile holds more than the budget, i.e. very long K).
    span = TILE_K * k_group
    k_chunk = max(span, (AT_BUDGET_BYTES // (block_m * itemsize)) * TILE_K // span * span)
    chunks = [k_slices(k0, min(k, k0 + k_chunk), k_group) for k0 in range(0, k, k_chunk)]
    evac = 0
    for mb in nl.affine_range(_cdiv(m, block_m)):
        m0 = mb * block_m
        m_rows = min(block_m, m - m0)
        hoisted = build_a_transposed(a, m0, m_rows, chunks[0]) if len(chunks) == 1 else None
        for nb in nl.affine_range(_cdiv(n, block_n)):
            n0 = nb * block_n
            n_cols = min(block_n, n - n0)
            acc = [[nl.ndarray((min(TILE_M, m_rows - i * TILE_M), min(TILE_N, n_cols - jn * TILE_N)),
                               dtype=nl.float32, buffer=nl.psum)
                    for jn in range(_cdiv(n_cols, TILE_N))] for i in range(_cdiv(m_rows, TILE_M))]
            for groups in chunks:
                a_t = hoisted if hoisted is not None else build_a_transposed(a, m0, m_rows, groups)
                matmul_block(a_t, b, groups, m_rows, n0, n_cols, acc)
            for i in range(len(acc)):
                mw = min(TILE_M, m_rows - i * TILE_M)
                o_tile = nl.ndarray((mw, n_cols), dtype=a.dtype, buffer=nl.sbuf)
                for jn in range(len(acc[i])):
                    nw = min(TILE_N, n_cols - jn * TILE_N)
                    copy_psum(o_tile[:, jn * TILE_N:jn * TILE_N + nw], acc[i][jn], evac)
                    evac += 1
                nisa.dma_copy(dst=out[m0 + i * TILE_M:m0 + i * TILE_M + mw, n0:n0 + n_cols], src=o_tile)
    return out
