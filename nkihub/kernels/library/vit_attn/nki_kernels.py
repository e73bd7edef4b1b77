"""NKI kernel of neuron/vit-attn: fused non-causal attention for vision transformers.

q, k, v, out are (B, H, S, D) in HBM (torch's scaled_dot_product_attention layout), S <= 4096, D <= 256.
One kernel goes from Q, K, V to the output; scores and probabilities never leave the chip. D up to 128 sits
on the first D partitions of Q^T/K^T (no padding anywhere); D over 128 is split into 128-row chunks whose
Q K^T matmuls accumulate in one PSUM group (``d_chunks``).

Design (many heads of a short sequence, ViT-B/16 is 12 heads x 197 tokens):
- Heads are processed in groups: one DMA per 128-row tile moves a whole group of heads (a permuted HBM
  view), into rotating SBUF slots so the loads of later groups run while earlier ones compute.
- Per head, K and the (pre-scaled) Q are transposed on the Tensor Engine into K^T, Q^T [D, S]; the next
  head's transposes are issued before the current head's attention so the engines overlap.
- Per 128-row q tile the whole key row is handled exactly (no online rescaling): S = Q K^T in 512-key PSUM
  chunks, the row max on the Vector Engine, exp(S - max) with the row sum fused on the Scalar Engine,
  P transposed on the Tensor Engine and P V accumulated in one PSUM group over all keys. For S > 512 the
  max comes from a first pass over the chunks and the scores are recomputed in the second (the Tensor
  Engine has slack; the Vector Engine does not).
- The q tiles of all heads form one software pipeline: step n issues the scores of tile n+3, the exp of
  tile n+1 and P V of tile n, so each in-order engine queue has independent work behind what it waits
  for. Every working buffer is a ring of slots sized for that distance (PSUM slots packed into banks), so
  tiles in flight never share addresses.
"""
import nki
import nki.isa as nisa
import nki.language as nl

P = 128          # partitions: q rows per tile, keys per P^T tile
BANK = 512       # fp32 columns of one PSUM bank: keys per score chunk
AHEAD_SCORES = 3     # pipeline distance of the scores stage (tiles ahead of the P V stage)
AHEAD_EXP = 1        # pipeline distance of the exp stage
GROUP_BYTES = 8192   # SBUF bytes per partition of one tensor's head group in one slot


def psum_width(n):
    """PSUM slot width (fp32 columns) for n columns: a power of two >= n from 64 up to one bank, so packed
    slots never straddle a bank."""
    w = 64
    while w < n:
        w *= 2
    return min(w, BANK)


def row_tiles(n):
    """[(start, rows)] covering n rows in tiles of 128 (the last one partial)."""
    return [(s, min(P, n - s)) for s in range(0, n, P)]


def d_chunks(d):
    """[(start, rows)] of the head dim on partitions: one chunk up to 128, two (128 + rest) up to 256. A
    transposed head [D, S] lives in SBUF as [min(D, 128), nchunks, S]; contractions over D accumulate."""
    return row_tiles(d)


def transposed_ring(d, n, dtype, slots, name):
    """A Ring of transposed heads [min(D, 128), nchunks, n] (see d_chunks)."""
    return Ring((min(d, P), len(d_chunks(d)), n), dtype, nl.sbuf, slots, name)


def qk_matmul(dst, qT, kT, d, q0, r, c0, cw):
    """dst [r, cw] (PSUM, fp32) = Q K^T for q rows q0..q0+r and keys c0..c0+cw from transposed heads
    qT, kT [min(D, 128), nchunks, S] (see d_chunks): one matmul per head-dim chunk, accumulated."""
    for c, (_, dc) in enumerate(d_chunks(d)):
        nisa.nc_matmul(dst=dst, stationary=qT[:dc, c, q0:q0 + r], moving=kT[:dc, c, c0:c0 + cw], accumulate=c > 0)


def head_group_size(heads, seq, d, itemsize, group_bytes=GROUP_BYTES):
    """Heads moved per DMA: as many as fit ``group_bytes`` per partition (at least one)."""
    per_head = len(row_tiles(seq)) * d * itemsize
    return max(1, min(heads, group_bytes // per_head))


class Ring:
    """A rotating set of ``slots`` buffers in one tile [P, slots, *shape]; ``next()`` hands out the next
    slot's view. Allocated once, so slots never share addresses with other tiles."""

    def __init__(self, shape, dtype, buffer, slots, name):
        self.tile = nl.ndarray((shape[0], slots) + tuple(shape[1:]), dtype=dtype, buffer=buffer, name=name)
        self.slots, self.i = slots, 0

    def next(self):
        view = self.tile[:, self.i % self.slots]
        self.i += 1
        return view


def transpose_head(x_slot, tiles, d, dst, tp_ring, scale=None):
    """x_slot [128, ntiles, D] rows of one head -> dst [min(D, 128), nchunks, S] (SBUF, see d_chunks):
    Tensor Engine transposes of 128-row tiles, four per PSUM bank, one PSUM-to-SBUF copy per bank and
    head-dim chunk on the Scalar Engine (scale is free)."""
    s_len = tiles[-1][0] + tiles[-1][1]
    for c, (d0, dc) in enumerate(d_chunks(d)):
        for c0 in range(0, s_len, BANK):
            w = min(BANK, s_len - c0)
            tp = tp_ring.next()
            for s, r in row_tiles(w):
                nisa.nc_transpose(dst=tp[:dc, s:s + r], data=x_slot[:r, (c0 + s) // P, d0:d0 + dc])
            nisa.activation(dst=dst[:dc, c, c0:c0 + w], op=nl.copy, data=tp[:dc, :w],
                            scale=1.0 if scale is None else scale)


class TileJob:
    """One 128-row q tile of one head, carried through the pipeline stages below."""

    def __init__(self, head, t, q0, r, last_of_head):
        self.head, self.t, self.q0, self.r, self.last = head, t, q0, r, last_of_head


def stage_scores(job, ctx):
    """Stage A (Tensor, Vector): S = Q K^T and the negated row max (a first pass over 512-key chunks when
    the row spans several PSUM banks)."""
    r, n = job.r, ctx["nchunk"]
    qT, kT = job.head["qT"], job.head["kT"]
    job.stats = ctx["stats"].next()      # [P, 2 * nchunk + 1] fp32: chunk maxima, chunk sums, row max
    job.nmax = job.stats[:r, 2 * n:2 * n + 1]
    job.scores = []
    for c, (c0, cw) in enumerate(ctx["chunks"]):
        s_ps = ctx["s"].next()
        qk_matmul(s_ps[:r, :cw], qT, kT, ctx["d"], job.q0, r, c0, cw)
        dst = job.nmax if n == 1 else job.stats[:r, c:c + 1]
        nisa.tensor_reduce(dst=dst, op=nl.maximum, data=s_ps[:r, :cw], axis=1, negate=True)
        job.scores.append(s_ps)
    if n > 1:
        nisa.tensor_reduce(dst=job.nmax, op=nl.minimum, data=job.stats[:r, :n], axis=1)


def stage_exp(job, ctx):
    """Stage B (Scalar): P = exp(S - max) with the row sums fused (scores recomputed chunk by chunk when
    the first pass could not keep them in PSUM)."""
    r, n = job.r, ctx["nchunk"]
    job.p = []
    for c, (c0, cw) in enumerate(ctx["chunks"]):
        s_ps = job.scores[c]
        if n > 1:
            s_ps = ctx["s"].next()
            qk_matmul(s_ps[:r, :cw], job.head["qT"], job.head["kT"], ctx["d"], job.q0, r, c0, cw)
        p_sb = ctx["p"].next()
        nisa.activation(dst=p_sb[:r, :cw], op=nl.exp, data=s_ps[:r, :cw], bias=job.nmax, reduce_op=nl.add,
                        reduce_res=job.stats[:r, n + c:n + c + 1])
        job.p.append(p_sb)
    job.scores = None


def stage_pv(job, ctx):
    """Stage C (Tensor, Vector): P^T by Tensor Engine transposes (four per PSUM bank), copied to SBUF,
    and O = P V accumulated over all keys in one PSUM group."""
    r, d = job.r, ctx["d"]
    v_slot = job.head["v"]
    job.o = ctx["o"].next()
    for c, (c0, cw) in enumerate(ctx["chunks"]):
        kts = row_tiles(cw)
        pT_ps = ctx["pT_psum"].next()
        for i, (s, kc) in enumerate(kts):
            nisa.nc_transpose(dst=pT_ps[:kc, i, :r], data=job.p[c][:r, s:s + kc])
        pT = ctx["pT"].next()
        full = sum(1 for _, kc in kts if kc == P)
        if full:
            nisa.tensor_copy(dst=pT[:, :full, :r], src=pT_ps[:, :full, :r])
        if full < len(kts):
            kc = kts[-1][1]
            nisa.tensor_copy(dst=pT[:kc, full, :r], src=pT_ps[:kc, full, :r])
        for i, (s, kc) in enumerate(kts):
            # one accumulation group over all keys (ring slots are reused: say where it starts)
            nisa.nc_matmul(dst=job.o[:r, :d], stationary=pT[:kc, i, :r], moving=v_slot[:kc, (c0 + s) // P, :],
                           accumulate=c > 0 or i > 0)


def stage_out(job, ctx):
    """Stage D (Vector): O / rowsum into the head group's output slot; with lse, log(rowsum) + max
    (Scalar, GpSimd) into the group's lse slot."""
    r, n = job.r, ctx["nchunk"]
    rsum = job.stats[:r, n:n + 1]
    if n > 1:
        rsum = job.stats[:r, 0:1]    # the chunk maxima are dead by now: reuse their column
        nisa.tensor_reduce(dst=rsum, op=nl.add, data=job.stats[:r, n:2 * n], axis=1)
    nisa.tensor_scalar(dst=job.head["o"][:r, job.t, :], data=job.o[:r, :ctx["d"]], op0=nl.divide, operand0=rsum)
    if "lse" in job.head:
        lse = job.head["lse"][:r, job.t:job.t + 1]
        nisa.activation(dst=lse, op=nl.log, data=rsum)
        nisa.tensor_tensor(dst=lse, data1=lse, data2=job.nmax, op=nl.subtract, engine=nisa.gpsimd_engine)


@nki.jit
def vit_attention_kernel(q, k, v, scale, with_lse=False, group_bytes=GROUP_BYTES, ahead_scores=AHEAD_SCORES,
                         ahead_exp=AHEAD_EXP):
    """softmax(scale * q k^T) v. q, k, v (B, H, S, D) bf16 or fp32 in HBM, S <= 4096, D <= 256.
    Returns out (B, H, S, D) in q's dtype; with ``with_lse`` also lse (B, H, S) fp32 =
    logsumexp(scale * q k^T) (what the flash backward kernel needs; a few instructions per q tile).
    Tuning parameters (nki.autotune): ``group_bytes`` SBUF bytes per partition of one head-group slot,
    ``ahead_scores`` / ``ahead_exp`` the pipeline distances of the scores and exp stages."""
    bsz, heads, s_len, d = q.shape
    dtype = q.dtype
    out = nl.ndarray((bsz, heads, s_len, d), dtype=dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((bsz, heads, s_len), dtype=nl.float32, buffer=nl.shared_hbm) if with_lse else None
    tiles = row_tiles(s_len)
    nt = len(tiles)
    g = head_group_size(heads, s_len, d, q.itemsize, group_bytes)
    nchunk = (s_len + BANK - 1) // BANK
    # load/store slots: the pipeline holds ahead_scores + 1 tiles (heads spanned: 1 + ceil(ahead / nt)),
    # the head after the newest is prepared, and the group after that head's is loaded ahead
    live_heads = 2 + -(-ahead_scores // nt)
    io_slots = 2 + -(-(live_heads - 1) // g)
    io = {name: Ring((P, nt, g, d), dtype, nl.sbuf, io_slots, name) for name in ("q", "k", "v", "o")}
    if with_lse:
        io["lse"] = Ring((P, g, nt), nl.float32, nl.sbuf, io_slots, "lse")
    chunks = [(c0, min(BANK, s_len - c0)) for c0 in range(0, s_len, BANK)]
    nchunk = len(chunks)
    cw = psum_width(chunks[0][1])          # columns of one score chunk
    kts = cw // P if cw >= P else 1        # 128-key tiles per chunk
    ahead = ahead_scores
    ctx = {
        "d": d, "chunks": chunks, "nchunk": nchunk,
        "kT": transposed_ring(d, s_len, dtype, 3, "kT"), "qT": transposed_ring(d, s_len, dtype, 3, "qT"),
        # PSUM rings pack small slots into banks: 8 banks hold all of them
        "tp": Ring((P, cw), nl.float32, nl.psum, max(2, 2 * BANK // cw), "tp_psum"),
        # scores live from their stage to the exp stage: ahead - ahead_exp + 1 slots at least
        "s": Ring((P, cw), nl.float32, nl.psum, max(ahead - ahead_exp + 1, 2 * BANK // cw), "s_psum"),
        "pT_psum": Ring((P, kts, P), nl.float32, nl.psum, max(2, 2 * BANK // (kts * P)), "pT_psum"),
        "o": Ring((P, psum_width(d)), nl.float32, nl.psum, max(2, BANK // psum_width(d)), "o_psum"),
        "p": Ring((P, cw), dtype, nl.sbuf, (ahead_exp + 2) * nchunk, "p"),
        "pT": Ring((P, kts, P), dtype, nl.sbuf, 2, "pT"),
        "stats": Ring((P, 2 * nchunk + 1), nl.float32, nl.sbuf, ahead + 2, "stats"),
    }
    groups = [(b, h0, min(g, heads - h0)) for b in range(bsz) for h0 in range(0, heads, g)]
    loaded = {}

    def load_group(gi):
        """Issue the loads of head group gi into the next IO slots (once)."""
        if gi < len(groups) and gi not in loaded:
            b, h0, gn = groups[gi]
            slots = {name: ring.next() for name, ring in io.items()}
            for name, src in (("q", q), ("k", k), ("v", v)):
                for t, (s0, r) in enumerate(tiles):
                    nisa.dma_copy(dst=slots[name][:r, t, :gn, :],
                                  src=src[b, h0:h0 + gn, s0:s0 + r, :].permute((1, 0, 2)))
            loaded[gi] = slots

    def store_group(gi):
        b, h0, gn = groups[gi]
        for t, (s0, r) in enumerate(tiles):
            nisa.dma_copy(dst=out[b, h0:h0 + gn, s0:s0 + r, :].permute((1, 0, 2)), src=loaded[gi]["o"][:r, t, :gn, :])
        if with_lse:    # one DMA for the group: lse[b, h0 + j, t * 128 + p] <- slot[p, j, t]
            for t, (s0, r) in enumerate(tiles):
                nisa.dma_copy(dst=lse[b, h0:h0 + gn, s0:s0 + r].permute((1, 0)), src=loaded[gi]["lse"][:r, :gn, t])

    def prepare(gi, j):
        """K^T and scaled Q^T of head j of group gi; the views the stages read."""
        load_group(gi)
        load_group(gi + 1)      # one group ahead: its DMAs overlap this group's compute
        slots = loaded[gi]
        head = {"gi": gi, "last_in_group": j == groups[gi][2] - 1, "v": slots["v"][:, :, j, :],
                "o": slots["o"][:, :, j, :], "kT": ctx["kT"].next(), "qT": ctx["qT"].next()}
        if with_lse:
            head["lse"] = slots["lse"][:, j, :]
        transpose_head(slots["k"][:, :, j, :], tiles, d, head["kT"], ctx["tp"])
        transpose_head(slots["q"][:, :, j, :], tiles, d, head["qT"], ctx["tp"], scale=scale)
        return head

    heads_list = [(gi, j) for gi in range(len(groups)) for j in range(groups[gi][2])]
    jobs = [(hi, t) for hi in range(len(heads_list)) for t in range(nt)]
    made, prepared = [], {}

    def job(n):
        while len(made) <= n:
            hi, t = jobs[len(made)]
            for h in (hi, hi + 1):    # one head ahead: its transposes overlap this head's attention
                if h < len(heads_list) and h not in prepared:
                    prepared[h] = prepare(*heads_list[h])
            q0, r = tiles[t]
            made.append(TileJob(prepared[hi], t, q0, r, t == nt - 1))
        return made[n]

    # Software pipeline: step n issues the scores of tile n+3, the exp of tile n+1, P V and the output of
    # tile n, so each in-order engine queue always has independent work behind what it waits for.
    total = len(jobs)
    for n in range(-ahead, total):
        if n + ahead < total:
            stage_scores(job(n + ahead), ctx)
        if 0 <= n + ahead_exp < total:
            stage_exp(job(n + ahead_exp), ctx)
        if n >= 0:
            cur = job(n)
            stage_pv(cur, ctx)
            stage_out(cur, ctx)
            if cur.last and cur.head["last_in_group"]:
                store_group(cur.head["gi"])
    return (out, lse) if with_lse else out
