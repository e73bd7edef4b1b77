"""The three stages of one image's pass through the fused ViT block, as generators.

Each stage yields after every unit of work (one PSUM group of a projection, one LayerNorm row tile, one
attention step), so vit_block_kernel can interleave, in program order, the Vector/Scalar-heavy attention
of one image with the Tensor-heavy projections and MLP of its neighbours; the in-order engine queues then
overlap them. Every per-unit tile is allocated inside its loop, so next-fit allocation gives it a fresh
address and units in flight never wait on each other through write-after-read dependencies.

    pre_stage   x -> LN1 -> x^T -> Q^T (pre-scaled by 1/sqrt(dh)), K^T, V rows       (Tensor heavy)
    attention   per (q tile, head): S = Q K^T in PSUM, softmax, P V                  (Vector/Scalar heavy)
    post_stage  attn^T -> o_proj + bias + x -> LN2 -> fc1 + GELU -> fc2 + bias + h1    (Tensor heavy)
"""
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.gelu_mlp.nki_kernels import ktile, linear_rows_units, linear_t_units, transposed_rows
from nkihub.kernels.library.layernorm.nki_kernels import normalized_tile
from nkihub.kernels.library.matmul.nki_kernels import TILE_K, TILE_M, TILE_N, _cdiv, copy_psum, plain_tiles
from nkihub.kernels.library.vit_attn.nki_kernels import Ring, psum_width, row_tiles

from .ln_transposed import transposed_affine

# attention pipeline distances: step n issues the scores of step n+4, the exp of n+3, the P^T transposes
# of n+1 and P V of n, so each stage's inputs were issued at least a step earlier (exp sits two steps
# behind the row max: the Scalar queue also carries the neighbours' GELU and Q/K evacuations)
AHEAD_SCORES = 4
AHEAD_EXP = 3
AHEAD_TRANSPOSE = 1
LN_LAG = 3          # units issued between a LayerNorm and the transposes of its output (its chain is long)


PACKED_HEAD_DIMS = (32, 64, 128)   # heads of these dims pack into 128-feature tiles at legal start partitions


def head_layout(d, heads):
    """Where Q^T and K^T keep each head's features: (out_tiles, per_head). ``out_tiles`` [(first feature,
    rows)] are the projections' output tiles (each on partitions 0..rows-1 of its column of q_t/k_t);
    ``per_head[h]`` lists the head's chunks as (tile, start partition, rows). Head dims 32, 64, 128 pack
    128 features a tile (two heads share the Tensor Engine's stationary columns); any other head dim gets
    its own tiles (one, or two over 128), so no head straddles a tile or starts at an illegal partition."""
    dh = d // heads
    if dh in PACKED_HEAD_DIMS:
        tiles = [(t * TILE_K, min(TILE_K, d - t * TILE_K)) for t in range(_cdiv(d, TILE_K))]
        return tiles, [[((h * dh) // TILE_K, (h * dh) % TILE_K, dh)] for h in range(heads)]
    chunks = row_tiles(dh)
    tiles = [(h * dh + c0, dc) for h in range(heads) for c0, dc in chunks]
    return tiles, [[(h * len(chunks) + c, 0, dc) for c, (_, dc) in enumerate(chunks)] for h in range(heads)]


def _added(a, b, rows, d):
    """A new fp32 SBUF tile a[:rows] + b[:rows] ([rows, d]), on GpSimd (bias + residual, off the busy
    Vector Engine)."""
    out = nl.ndarray((rows, d), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=out, data1=a[:rows], data2=b[:rows], op=nl.add, engine=nisa.gpsimd_engine)
    return out


def pre_stage(x, b, w, st, s, d, eps, scale, heads):
    """Image b of x [B, S, D] (HBM) up to the attention inputs, stored in the dict ``st``: x_rows (row
    tiles [rows, D]), q_t and k_t [128, ntiles, S] (features on partitions in the tiles of
    ``head_layout``; Q^T scaled by ``scale``), v_rows [(tile [rows, D], rows)]; all in x's dtype. ``w``
    gives SBUF weights by name (q and k bias columns in the head layout's tiles)."""
    dt = x.dtype
    ln1_w, ln1_b = w["ln1"]
    x_rows, xn_rows = [], []
    for i in range(_cdiv(s, TILE_M)):
        rows = min(TILE_M, s - i * TILE_M)
        xt = nl.ndarray((rows, d), dtype=dt, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[b, i * TILE_M:i * TILE_M + rows, :])
        x_rows.append(xt)
        xn_rows.append((normalized_tile(xt, rows, eps, dt), rows))
        yield
    for _ in range(LN_LAG):
        yield
    xn_t = transposed_affine(xn_rows, d, dt, ln1_w, ln1_b)
    yield
    tiles = head_layout(d, heads)[0]
    n_dt = len(tiles)
    q_w, q_b = w["q"]
    # the softmax scale rides on the Q evacuation (activation computes f(scale * x + bias)): bias * scale
    q_bs = nl.ndarray((TILE_K, n_dt), dtype=nl.float32, buffer=nl.sbuf)
    for rows in sorted({hw for _, hw in tiles}):
        cols = [t for t, (_, hw) in enumerate(tiles) if hw == rows]
        if cols == list(range(cols[0], cols[-1] + 1)):
            nisa.tensor_scalar(dst=q_bs[:rows, cols[0]:cols[-1] + 1], data=q_b[:rows, cols[0]:cols[-1] + 1],
                               op0=nl.multiply, operand0=scale)
        else:   # head dims over 128: the chunks of each head alternate 128 and the rest
            for t in cols:
                nisa.tensor_scalar(dst=q_bs[:rows, t:t + 1], data=q_b[:rows, t:t + 1], op0=nl.multiply,
                                   operand0=scale)
    q_t = nl.ndarray((TILE_K, n_dt, s), dtype=dt, buffer=nl.sbuf)
    yield from linear_t_units(xn_t, d, s, q_w, q_bs, d, nl.copy, q_t, scale, out_tiles=tiles)
    k_t = nl.ndarray((TILE_K, n_dt, s), dtype=dt, buffer=nl.sbuf)
    yield from linear_t_units(xn_t, d, s, *w["k"], d, nl.copy, k_t, out_tiles=tiles)
    v_b, v_rows = w["v_b"], []
    yield from linear_rows_units(xn_t, d, s, w["v"], d, lambda i, rows: v_b, dt, v_rows)
    st.update(x_rows=x_rows, q_t=q_t, k_t=k_t, v_rows=v_rows)


class _Step:
    """One (128-query tile, head) step of the attention pipeline."""

    def __init__(self, i, q0, qw, h):
        self.i, self.q0, self.qw, self.h = i, q0, qw, h


def attention_stage(st, s, d, heads, dt):
    """softmax(Q K^T) V of one image from st's q_t, k_t, v_rows (pre_stage); leaves st["attn"] = [(tile
    [rows, D] of ``dt``, rows)] per 128 queries. A software pipeline over (q tile, head) steps: step n
    issues the scores of step n+AHEAD_SCORES (Tensor, then the row max on Vector), the exp of step
    n+AHEAD_EXP (Scalar, row sum fused), the P^T transposes of step n+1 (Tensor, copied out on
    Vector/Scalar) and P V of step n
    (Tensor), so no queue waits on work issued in the same step."""
    q_t, k_t, v_rows = st["q_t"], st["k_t"], st["v_rows"]
    dh = d // heads
    per_head = head_layout(d, heads)[1]
    chunks = [(c0, min(TILE_N, s - c0)) for c0 in range(0, s, TILE_N)]
    nch = len(chunks)
    n_kt = _cdiv(s, TILE_K)
    tiles = [(i, i * TILE_M, min(TILE_M, s - i * TILE_M)) for i in range(_cdiv(s, TILE_M))]
    outs = [(nl.ndarray((qw, d), dtype=dt, buffer=nl.sbuf), qw) for _, _, qw in tiles]
    # PSUM is 8 banks and a PSUM tile takes whole banks: the attention's small PSUM tiles are slots packed
    # into rings (4 banks in all for S <= 512) so the projections in flight keep the other banks, and no
    # slot is reused before the step that read it (no false dependencies through bank reuse)
    sw = psum_width(chunks[0][1])
    ring_s = Ring((TILE_M, sw), nl.float32, nl.psum, 2 * max(2, 2 * TILE_N // sw) if nch == 1 else nch,
                  "scores_psum")
    # P^T transposes go four to a PSUM bank (a slot is one bank's group, not the whole row: S > 512 would
    # otherwise take 2-4 banks a slot)
    kt_bank = min(4, n_kt)
    ring_pt = Ring((TILE_K, kt_bank, TILE_M), nl.float32, nl.psum, max(2, TILE_N // (kt_bank * TILE_M)), "pT_psum")
    ring_acc = Ring((TILE_M, psum_width(dh)), nl.float32, nl.psum, TILE_N // psum_width(dh), "pv_psum")
    steps = [_Step(i, q0, qw, h) for i, q0, qw in tiles for h in range(heads)]

    def scores(j):
        # stats columns: negated chunk maxima, chunk sums, negated row max
        j.stats = nl.ndarray((j.qw, 2 * nch + 1), dtype=nl.float32, buffer=nl.sbuf)
        j.nmax = j.stats[:, 2 * nch:2 * nch + 1]
        j.scores = []
        for c, (c0, cw) in enumerate(chunks):
            sc = ring_s.next()[:j.qw, :cw]
            for n, (t, p0, dc) in enumerate(per_head[j.h]):   # head dims over 128: two chunks, accumulated
                nisa.nc_matmul(dst=sc, stationary=q_t[p0:p0 + dc, t, j.q0:j.q0 + j.qw],
                               moving=k_t[p0:p0 + dc, t, c0:c0 + cw], accumulate=n > 0)
            nisa.tensor_reduce(dst=j.nmax if nch == 1 else j.stats[:, c:c + 1], op=nl.maximum, data=sc,
                               axis=1, negate=True)
            j.scores.append(sc)
        if nch > 1:
            nisa.tensor_reduce(dst=j.nmax, op=nl.minimum, data=j.stats[:, :nch], axis=1)

    def expo(j):
        j.p = nl.ndarray((j.qw, s), dtype=dt, buffer=nl.sbuf)
        for c, (c0, cw) in enumerate(chunks):
            nisa.activation(dst=j.p[:, c0:c0 + cw], op=nl.exp, data=j.scores[c], bias=j.nmax,
                            reduce_op=nl.add, reduce_res=j.stats[:, nch + c:nch + c + 1],
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
        j.scores = None

    def transpose_p(j):
        j.p_t = nl.ndarray((TILE_K, n_kt, j.qw), dtype=dt, buffer=nl.sbuf)
        for c in range(0, n_kt, 4):       # four transposes per PSUM bank, one copy out per bank
            pt = ring_pt.next()
            tl = plain_tiles(s)[c:c + 4]
            for jj, (_, kw, cols) in enumerate(tl):
                nisa.nc_transpose(dst=pt[:kw, jj, :j.qw], data=j.p[:, cols])
            full = sum(1 for _, kw, _ in tl if kw == TILE_K)
            if full:
                copy_psum(j.p_t[:, c:c + full, :], pt[:, :full, :j.qw], j.h)
            if full < len(tl):
                kw = tl[-1][1]
                copy_psum(j.p_t[:kw, c + full, :], pt[:kw, full, :j.qw], j.h + 1)
        j.p = None

    def pv(j):
        acc = ring_acc.next()[:j.qw, :dh]
        for kt in range(n_kt):
            kw = min(TILE_K, s - kt * TILE_K)
            # one accumulation group over all keys (ring slots are reused: say where it starts)
            nisa.nc_matmul(dst=acc, stationary=j.p_t[:kw, kt, :],
                           moving=v_rows[kt][0][:kw, j.h * dh:(j.h + 1) * dh], accumulate=kt > 0)
        rsum = j.stats[:, nch:nch + 1]
        if nch > 1:
            rsum = j.stats[:, 0:1]      # the chunk maxima are dead by now: reuse their column
            nisa.tensor_reduce(dst=rsum, op=nl.add, data=j.stats[:, nch:2 * nch], axis=1)
        nisa.tensor_scalar(dst=outs[j.i][0][:, j.h * dh:(j.h + 1) * dh], data=acc, op0=nl.divide, operand0=rsum)

    n = len(steps)
    # S > 512: a step's scores take all nch slots of their ring (PSUM has no room for two steps' worth),
    # so the exp that reads the previous step's scores is issued before the next scores overwrite them
    exp_first = nch > 1
    for k in range(-AHEAD_SCORES, n):
        if exp_first and 0 <= k + AHEAD_EXP < n:
            expo(steps[k + AHEAD_EXP])
        if k + AHEAD_SCORES < n:
            scores(steps[k + AHEAD_SCORES])
        if not exp_first and 0 <= k + AHEAD_EXP < n:
            expo(steps[k + AHEAD_EXP])
        if 0 <= k + AHEAD_TRANSPOSE < n:
            transpose_p(steps[k + AHEAD_TRANSPOSE])
        if k >= 0:
            pv(steps[k])
        yield
    st["attn"] = outs


def post_stage(st, out, b, w, s, d, hidden, eps, act=nl.gelu):
    """Image b from st's attn and x_rows to out[b] (HBM [B, S, D]): output projection with bias and
    residual, LN2, the MLP with GELU ``act`` (gelu_mlp's ACTIVATIONS), bias and residual, stored row tile
    by row tile."""
    dt = out.dtype
    attn_t = transposed_rows(st.pop("attn"), d, dt)
    yield
    x_rows, o_b, h1 = st.pop("x_rows"), w["o_b"], []
    yield from linear_rows_units(attn_t, d, s, w["o"], d, lambda i, rows: _added(x_rows[i], o_b, rows, d),
                                 nl.float32, h1)
    ln2_w, ln2_b = w["ln2"]
    hn = []
    for t, rows in h1:
        hn.append((normalized_tile(t, rows, eps, dt), rows))
        yield
    for _ in range(LN_LAG):
        yield
    hn_t = transposed_affine(hn, d, dt, ln2_w, ln2_b)
    yield
    fc1_w, fc1_b = w["fc1"]
    h_t = [nl.ndarray((TILE_K, s), dtype=dt, buffer=nl.sbuf) for _ in range(_cdiv(hidden, TILE_K))]
    yield from linear_t_units(hn_t, d, s, fc1_w, fc1_b, hidden, act, h_t)
    fc2_b, outs = w["fc2_b"], []
    yield from linear_rows_units(h_t, hidden, s, w["fc2"], d, lambda i, rows: _added(h1[i][0], fc2_b, rows, d),
                                 dt, outs)
    for i, (o, rows) in enumerate(outs):
        nisa.dma_copy(dst=out[b, i * TILE_M:i * TILE_M + rows, :], src=o)
