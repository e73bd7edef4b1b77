"""NKI kernels of neuron/flash-attn: flash attention forward (with the log-sum-exp) and backward.

Layout: q, o, do are (B, Hq, Sq, D), k, v are (B, Hkv, Sk, D) in HBM (torch's scaled_dot_product_attention
layout); GQA/MQA when Hq is a multiple of Hkv. lse is (B, Hq, Sq) fp32, natural log of the row sums of
exp(scale * q k^T) (masked), i.e. out = softmax(scale * q k^T) v and lse = logsumexp(scale * q k^T).

Forward, per (batch, kv head): K and V are loaded once and K is transposed on the Tensor Engine into K^T
[D, Sk]; every q head of the group and every 128-row q tile then streams over key blocks of up to
``KEY_BLOCK`` columns: S = Q K^T into PSUM (one bank per 512 keys), the running row max on the Vector
Engine, exp(S - max) with the row sum fused on the Scalar Engine, P transposed on the Tensor Engine and
P V accumulated in PSUM. Nothing but q/k/v/out/lse touches HBM. Sequence remainders are partial tiles.
"""
import nki
import nki.isa as nisa
import nki.language as nl

P = 128            # partitions: q rows per tile and keys per P^T tile
BANK = 512         # fp32 columns in one PSUM bank: keys per S matmul
KEY_BLOCK = 1024   # keys per online-softmax step (two PSUM banks): amortises the per-step row updates
NEG = -1.0e30      # additive mask; finite so that masked exp underflows to 0 without inf - inf
AHEAD_T, AHEAD_E, AHEAD_S = 1, 3, 4   # pipeline distances (blocks ahead of P V) of transposes, exp, scores


def row_tiles(n):
    """[(start, rows)] covering n rows in tiles of 128 (the last one partial)."""
    return [(s, min(P, n - s)) for s in range(0, n, P)]


def load_rows(src, n, dtype, name):
    """SBUF tile [128, ntiles, D] holding src [n, D] (HBM) with row r at partition r % 128 of tile r // 128;
    one DMA per tile (the partial last tile fills its first partitions only)."""
    tiles = row_tiles(n)
    t = nl.ndarray((P, len(tiles), src.shape[1]), dtype=dtype, buffer=nl.sbuf, name=name)
    for i, (s, r) in enumerate(tiles):
        nisa.dma_copy(dst=t[:r, i, :], src=src[s:s + r, :])
    return t


def transpose_rows(x_sb, n, dtype, scale=None, name="xT"):
    """x_sb [128, ntiles, D] (rows n) -> SBUF [D, n] in ``dtype``: Tensor Engine transposes of 128-row tiles,
    four per PSUM bank, then one PSUM-to-SBUF copy per bank on the Scalar Engine (which applies ``scale``
    for free)."""
    d = x_sb.shape[2]
    xT = nl.ndarray((d, n), dtype=dtype, buffer=nl.sbuf, name=name)
    for c0 in range(0, n, BANK):
        w = min(BANK, n - c0)
        tp = nl.ndarray((d, BANK), dtype=nl.float32, buffer=nl.psum, name="tp_psum")
        for s, r in row_tiles(w):
            nisa.nc_transpose(dst=tp[:, s:s + r], data=x_sb[:r, (c0 + s) // P, :])
        nisa.activation(dst=xT[:, c0:c0 + w], op=nl.copy, data=tp[:, :w], scale=1.0 if scale is None else scale)
    return xT


def causal_mask(dtype=nl.float32):
    """[128, 128] additive mask: 0 where key j <= query p, NEG above the diagonal (GpSimd affine_select)."""
    zeros = nl.zeros((P, P), dtype=dtype, buffer=nl.sbuf, name="mask_zeros")
    mask = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf, name="causal_mask")
    nisa.affine_select(dst=mask, pattern=[[1, P]], channel_multiplier=-1, on_true_tile=zeros,
                       on_false_value=NEG, cmp_op=nl.less_equal)
    return mask


class Ring:
    """Rotating buffers: ``slots`` views of one tile [shape[0], slots, *shape[1:]] handed out in turn.
    Allocated once, so slots never share addresses with other tiles (multi-buffering)."""

    def __init__(self, shape, dtype, buffer, slots, name):
        self.tile = nl.ndarray((shape[0], slots) + tuple(shape[1:]), dtype=dtype, buffer=buffer, name=name)
        self.slots, self.i = slots, 0

    def next(self):
        view = self.tile[:, self.i % self.slots]
        self.i += 1
        return view


class Block:
    """One (q tile, key block) step of the online softmax; ``prev`` is the same q tile's previous block."""

    def __init__(self, head, q0, r, b0, bw, prev, last):
        self.head, self.q0, self.r, self.b0, self.bw, self.prev, self.last = head, q0, r, b0, bw, prev, last


def stage_scores(blk, ctx):
    """Stage A (Tensor, Vector): S = Q K^T for the block (one matmul per PSUM bank), the causal mask on
    the diagonal, the negated block row max."""
    r, bw = blk.r, blk.bw
    blk.s = ctx["s"].next()
    blk.st = ctx["stats"].next()      # [P, 5] fp32: block -max, running -max, block sum, running sum, alpha
    for c0 in range(0, bw, BANK):
        cw = min(BANK, bw - c0)
        nisa.nc_matmul(dst=blk.s[:r, c0:c0 + cw], stationary=blk.head["qT"][:, blk.q0:blk.q0 + r],
                       moving=blk.head["kT"][:, blk.b0 + c0:blk.b0 + c0 + cw], accumulate=False)
    if ctx["causal"] and blk.b0 + bw > blk.q0:
        lo = blk.q0 - blk.b0      # the diagonal: keys q0.. get the triangular mask
        nisa.tensor_tensor(dst=blk.s[:r, lo:bw], data1=blk.s[:r, lo:bw], data2=ctx["mask"][:r, :bw - lo], op=nl.add)
    nisa.tensor_reduce(dst=blk.st[:r, 0:1], op=nl.maximum, data=blk.s[:r, :bw], axis=1, negate=True)


def stage_exp(blk, ctx):
    """Stage B (GpSimd, Scalar): running max, the rescale factor alpha = exp(old max - new max), and
    P = exp(S - max) with the block row sum fused (Scalar Engine)."""
    r, st = blk.r, blk.st
    if blk.prev is None:
        nmax = st[:r, 0:1]
    else:
        nmax = st[:r, 1:2]
        nisa.tensor_tensor(dst=nmax, data1=blk.prev.nmax, data2=st[:r, 0:1], op=nl.minimum, engine=nisa.gpsimd_engine)
        nisa.activation(dst=st[:r, 4:5], op=nl.exp, data=blk.prev.nmax, scale=-1.0, bias=nmax)
    blk.nmax = nmax
    blk.p = ctx["p"].next()
    nisa.activation(dst=blk.p[:r, :blk.bw], op=nl.exp, data=blk.s[:r, :blk.bw], bias=nmax, reduce_op=nl.add,
                    reduce_res=st[:r, 2:3])


def stage_transpose(blk, ctx):
    """Stage C1 (Tensor, Scalar/Vector): P^T by Tensor Engine transposes, four per PSUM bank, copied to
    SBUF bank by bank, two of every three on the Scalar Engine (the Vector Engine also does the row max)."""
    r = blk.r
    kts = row_tiles(blk.bw)
    groups = [kts[g0:g0 + BANK // P] for g0 in range(0, len(kts), BANK // P)]
    banks = []
    for gi, group in enumerate(groups):
        pT_ps = ctx["pT_psum"].next()
        for i, (s, kc) in enumerate(group):
            nisa.nc_transpose(dst=pT_ps[:kc, i, :r], data=blk.p[:r, s:s + kc])
        banks.append(pT_ps)
    copies = []
    for gi, (group, pT_ps) in enumerate(zip(groups, banks)):
        pT = ctx["pT"].next()
        full = sum(1 for _, kc in group if kc == P)
        eng = nisa.vector_engine if ctx["copies"] % 3 == 2 else nisa.scalar_engine  # 2:1 balances the engines
        ctx["copies"] += 1
        if full:
            nisa.tensor_copy(dst=pT[:, :full, :r], src=pT_ps[:, :full, :r], engine=eng)
        if full < len(group):
            kc = group[-1][1]
            nisa.tensor_copy(dst=pT[:kc, full, :r], src=pT_ps[:kc, full, :r], engine=eng)
        copies.append(pT)
    blk.groups, blk.pT = groups, copies


def stage_pv(blk, ctx):
    """Stage C2 (Tensor, Vector, GpSimd): P V accumulated in PSUM, then o = o * alpha + P V and
    sum = sum * alpha + block sum (the rescales on GpSimd)."""
    r, d, st = blk.r, ctx["d"], blk.st
    pv = ctx["pv"].next()
    groups, copies = blk.groups, blk.pT
    first = True
    for gi, (group, pT) in enumerate(zip(groups, copies)):
        for i, (s, kc) in enumerate(group):
            key_tile = (blk.b0 + s) // P
            nisa.nc_matmul(dst=pv[:r, :d], stationary=pT[:kc, i, :r], moving=blk.head["v"][:kc, key_tile, :],
                           accumulate=not first)
            first = False
    blk.o = ctx["o"].next()
    if blk.prev is None:
        nisa.tensor_copy(dst=blk.o[:r], src=pv[:r, :d])
        blk.rsum = st[:r, 2:3]
    else:
        scaled = ctx["o_scaled"].next()
        nisa.tensor_scalar(dst=scaled[:r], data=blk.prev.o[:r], op0=nl.multiply, operand0=st[:r, 4:5],
                           engine=nisa.gpsimd_engine)
        nisa.tensor_tensor(dst=blk.o[:r], data1=scaled[:r], data2=pv[:r, :d], op=nl.add)
        blk.rsum = st[:r, 3:4]
        nisa.tensor_scalar(dst=blk.rsum, data=blk.prev.rsum, op0=nl.multiply, operand0=st[:r, 4:5], op1=nl.add,
                           operand1=st[:r, 2:3], engine=nisa.gpsimd_engine)


def stage_out(blk, ctx, out, lse):
    """After a q tile's last block: out = o / sum (GpSimd), lse = log(sum) - (-max) (Scalar, Vector)."""
    r, (b, h) = blk.r, blk.head["bh"]
    o_sb = ctx["o_out"].next()
    nisa.tensor_scalar(dst=o_sb[:r], data=blk.o[:r], op0=nl.divide, operand0=blk.rsum, engine=nisa.gpsimd_engine)
    nisa.dma_copy(dst=out[b, h, blk.q0:blk.q0 + r, :], src=o_sb[:r])
    l_sb = ctx["lse"].next()
    nisa.activation(dst=l_sb[:r], op=nl.log, data=blk.rsum)
    nisa.tensor_tensor(dst=l_sb[:r], data1=l_sb[:r], data2=blk.nmax, op=nl.subtract, engine=nisa.gpsimd_engine)
    nisa.dma_copy(dst=lse[b, h, blk.q0:blk.q0 + r], src=l_sb[:r])


def load_head_rows(src, n, dst):
    """src [n, D] (HBM) -> dst [128, ntiles, D]: one DMA for all full 128-row tiles, one for the rest."""
    full = n // P
    if full:
        nisa.dma_copy(dst=dst[:, :full, :], src=src[:full * P, :].reshape((full, P, src.shape[1])).permute((1, 0, 2)))
    if n % P:
        nisa.dma_copy(dst=dst[:n % P, full, :], src=src[full * P:n, :])


@nki.jit
def flash_fwd_kernel(q, k, v, causal, scale):
    """Flash attention forward. q (B, Hq, Sq, D), k/v (B, Hkv, Sk, D) bf16 or fp32 (HBM), Hq % Hkv == 0,
    D <= 128; causal masks key j > query i (top-left aligned, as torch's is_causal). Returns
    out (B, Hq, Sq, D) in q's dtype and lse (B, Hq, Sq) fp32.

    The (q tile, key block) steps of all heads form one software pipeline (see the loop below), so
    every in-order engine queue has independent work queued behind what it waits for; K/V of the next kv head and Q of the next q head load meanwhile.
    """
    bsz, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    dtype = q.dtype
    out = nl.ndarray((bsz, hq, sq, d), dtype=dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((bsz, hq, sq), dtype=nl.float32, buffer=nl.shared_hbm)
    nqt, nkt = len(row_tiles(sq)), len(row_tiles(sk))
    # heads in flight: the pipeline holds AHEAD_S + 1 blocks (a head has at least nqt) plus the prefetched one
    q_slots = 2 + -(-(AHEAD_S + 1) // nqt)
    kv_slots = 2 + -(-(AHEAD_S + 1) // (nqt * group))
    ctx = {
        "d": d, "causal": causal, "mask": causal_mask() if causal else None, "copies": 0,
        "k": Ring((P, nkt, d), dtype, nl.sbuf, kv_slots, "k"), "v": Ring((P, nkt, d), dtype, nl.sbuf, kv_slots, "v"),
        "q": Ring((P, nqt, d), dtype, nl.sbuf, q_slots, "q"),
        "kT": Ring((d, sk), dtype, nl.sbuf, kv_slots, "kT"), "qT": Ring((d, sq), dtype, nl.sbuf, q_slots, "qT"),
        "s": Ring((P, KEY_BLOCK), nl.float32, nl.psum, 2, "s_psum"),            # 4 banks
        "pT_psum": Ring((P, BANK // P, P), nl.float32, nl.psum, 2, "pT_psum"),  # 2 banks
        "pv": Ring((P, d), nl.float32, nl.psum, 2, "pv_psum"),                  # 1 bank
        "p": Ring((P, KEY_BLOCK), dtype, nl.sbuf, AHEAD_E - AHEAD_T + 2, "p"),
        "pT": Ring((P, BANK // P, P), dtype, nl.sbuf, 2 * (KEY_BLOCK // BANK) + 2, "pT"),
        "stats": Ring((P, 5), nl.float32, nl.sbuf, AHEAD_S + 4, "stats"),
        "o": Ring((P, d), nl.float32, nl.sbuf, 8, "o_acc"),
        "o_scaled": Ring((P, d), nl.float32, nl.sbuf, 2, "o_scaled"),
        "o_out": Ring((P, d), dtype, nl.sbuf, 3, "o_out"), "lse": Ring((P, 1), nl.float32, nl.sbuf, 3, "lse_sb"),
    }
    # PSUM: the transposes of K and Q share one bank (the 8th)
    tp = Ring((P, BANK), nl.float32, nl.psum, 1, "tp_psum")
    kv_heads = {}

    def transpose_into(rows, n, dst, scale_by):
        for c0 in range(0, n, BANK):
            w = min(BANK, n - c0)
            t = tp.next()
            for s0, rr in row_tiles(w):
                nisa.nc_transpose(dst=t[:d, s0:s0 + rr], data=rows[:rr, (c0 + s0) // P, :])
            nisa.activation(dst=dst[:, c0:c0 + w], op=nl.copy, data=t[:d, :w], scale=scale_by)

    def head(b, h):
        hk = h // group
        if (b, hk) not in kv_heads:
            k_sb, v_sb, kT = ctx["k"].next(), ctx["v"].next(), ctx["kT"].next()
            load_head_rows(k[b, hk], sk, k_sb)
            load_head_rows(v[b, hk], sk, v_sb)
            transpose_into(k_sb, sk, kT, 1.0)
            kv_heads[(b, hk)] = {"kT": kT, "v": v_sb}
        q_sb, qT = ctx["q"].next(), ctx["qT"].next()
        load_head_rows(q[b, h], sq, q_sb)
        transpose_into(q_sb, sq, qT, scale)
        return dict(kv_heads[(b, hk)], qT=qT, bh=(b, h))

    def blocks_of(hd):
        for q0, r in row_tiles(sq):
            kend = min(sk, q0 + r) if causal else sk
            prev = None
            for b0 in range(0, kend, KEY_BLOCK):
                bw = min(KEY_BLOCK, kend - b0)
                prev = Block(hd, q0, r, b0, bw, prev, b0 + bw >= kend)
                yield prev

    def all_blocks():
        hds = [(b, h) for b in range(bsz) for h in range(hq)]
        nxt = head(*hds[0])
        for i in range(len(hds)):
            cur = nxt
            gen = blocks_of(cur)
            first = next(gen)
            if i + 1 < len(hds):
                nxt = head(*hds[i + 1])   # the next head's loads and transposes overlap this head
            yield first
            yield from gen

    stream, made = all_blocks(), []

    def blk(n):
        while len(made) <= n:
            made.append(next(stream, None))
        return made[n]

    # Software pipeline over the block stream: step n issues the P^T transposes and copies of block
    # n + AHEAD_T, the scores of n + AHEAD_S, the exp of n + AHEAD_E and P V of block n. Per engine queue
    # that is Tensor T S PV, Vector copy max o-update, Scalar copies exp: every wait is on work issued at
    # least one step earlier.
    n = -AHEAD_S
    while True:
        blocks = {dist: blk(n + dist) if n + dist >= 0 else None for dist in (0, AHEAD_T, AHEAD_E, AHEAD_S)}
        if n >= 0 and blocks[0] is None:
            break
        if blocks[AHEAD_T] is not None:
            stage_transpose(blocks[AHEAD_T], ctx)
        if blocks[AHEAD_S] is not None:
            stage_scores(blocks[AHEAD_S], ctx)
        if blocks[AHEAD_E] is not None:
            stage_exp(blocks[AHEAD_E], ctx)
        if blocks[0] is not None:
            stage_pv(blocks[0], ctx)
            if blocks[0].last:
                stage_out(blocks[0], ctx, out, lse)
        n += 1
    return out, lse


def row_dot(a_sb, b_sb, r, i, d, name):
    """rowsum(a * b) of tile i of two [128, ntiles, D] tiles -> [r, 1] fp32 (Vector Engine)."""
    prod = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf, name=name + "_prod")
    nisa.tensor_tensor(dst=prod[:r], data1=a_sb[:r, i, :], data2=b_sb[:r, i, :], op=nl.multiply)
    res = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name=name)
    nisa.tensor_reduce(dst=res[:r], op=nl.add, data=prod[:r], axis=1)
    return res


def accumulate(acc, part, first):
    """acc = part on the first contribution, acc + part afterwards (Vector Engine, fp32)."""
    if first:
        nisa.tensor_copy(dst=acc, src=part)
    else:
        nisa.tensor_tensor(dst=acc, data1=acc, data2=part, op=nl.add)


@nki.jit
def flash_bwd_kernel(q, k, v, o, do, lse, dlse, causal, scale):
    """Flash attention backward. q/o/do (B, Hq, Sq, D), k/v (B, Hkv, Sk, D) bf16 or fp32, lse and dlse
    (B, Hq, Sq) fp32 (dlse: the gradient reaching lse, zeros if none). Returns dq (B, Hq, Sq, D),
    dk and dv (B, Hkv, Sk, D) in q's dtype.

    Per (batch, kv head): K, V and their transposes stay in SBUF; for every q head of the group the
    probabilities are recomputed from lse (P = exp(scale q k^T - lse)), then
    dS = scale * P * (dO V^T - rowsum(dO * O) + dlse), dV += P^T dO and dK += dS^T Q accumulate in PSUM
    over the q tiles of one 128-key tile, and dQ += dS K accumulates in SBUF fp32.
    """
    bsz, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    dtype = q.dtype
    dq = nl.ndarray((bsz, hq, sq, d), dtype=dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray((bsz, hkv, sk, d), dtype=dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray((bsz, hkv, sk, d), dtype=dtype, buffer=nl.shared_hbm)
    mask = causal_mask() if causal else None
    qtiles, ktiles = row_tiles(sq), row_tiles(sk)
    for b in nl.affine_range(bsz):
        for hk in nl.affine_range(hkv):
            k_sb = load_rows(k[b, hk], sk, dtype, "k")
            v_sb = load_rows(v[b, hk], sk, dtype, "v")
            kT = transpose_rows(k_sb, sk, dtype, name="kT")
            vT = transpose_rows(v_sb, sk, dtype, name="vT")
            dk_acc = nl.ndarray((P, len(ktiles), d), dtype=nl.float32, buffer=nl.sbuf, name="dk_acc")
            dv_acc = nl.ndarray((P, len(ktiles), d), dtype=nl.float32, buffer=nl.sbuf, name="dv_acc")
            for g in nl.sequential_range(group):
                h = hk * group + g
                q_sb = load_rows(q[b, h], sq, dtype, "q")
                do_sb = load_rows(do[b, h], sq, dtype, "do")
                o_sb = load_rows(o[b, h], sq, dtype, "o")
                qT = transpose_rows(q_sb, sq, dtype, scale=scale, name="qT")
                doT = transpose_rows(do_sb, sq, dtype, name="doT")
                # per q tile: -lse and delta = rowsum(dO * O) - dlse, both [r, 1] fp32
                nlse, delta = [], []
                for i, (q0, r) in enumerate(qtiles):
                    l_sb = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="lse")
                    nisa.dma_copy(dst=l_sb[:r], src=lse[b, h, q0:q0 + r])
                    nl_sb = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="neg_lse")
                    nisa.tensor_scalar(dst=nl_sb[:r], data=l_sb[:r], op0=nl.multiply, operand0=-1.0)
                    dl_sb = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="dlse")
                    nisa.dma_copy(dst=dl_sb[:r], src=dlse[b, h, q0:q0 + r])
                    dot = row_dot(do_sb, o_sb, r, i, d, "do_o")
                    dl = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="delta")
                    nisa.tensor_tensor(dst=dl[:r], data1=dot[:r], data2=dl_sb[:r], op=nl.subtract)
                    nlse.append(nl_sb)
                    delta.append(dl)
                dq_acc = nl.ndarray((P, len(qtiles), d), dtype=nl.float32, buffer=nl.sbuf, name="dq_acc")
                dq_seen = [False] * len(qtiles)
                for j, (k0, kc) in enumerate(ktiles):
                    live = [(i, q0, r) for i, (q0, r) in enumerate(qtiles) if not causal or q0 + r > k0]
                    dv_ps = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum, name="dv_psum")
                    dk_ps = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum, name="dk_psum")
                    for i, q0, r in live:
                        s_ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum, name="s_psum")
                        nisa.nc_matmul(dst=s_ps[:r, :kc], stationary=qT[:, q0:q0 + r], moving=kT[:, k0:k0 + kc])
                        if causal and k0 == q0:
                            # tiles are 128-aligned, so only the diagonal tile pair needs the mask
                            nisa.tensor_tensor(dst=s_ps[:r, :kc], data1=s_ps[:r, :kc], data2=mask[:r, :kc],
                                               op=nl.add)
                        p_sb = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf, name="p")
                        nisa.activation(dst=p_sb[:r, :kc], op=nl.exp, data=s_ps[:r, :kc], bias=nlse[i][:r])
                        dp_ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum, name="dp_psum")
                        nisa.nc_matmul(dst=dp_ps[:r, :kc], stationary=doT[:, q0:q0 + r], moving=vT[:, k0:k0 + kc])
                        # dS = (dP - delta) * P * scale
                        ds_f = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf, name="ds_f32")
                        nisa.tensor_scalar(dst=ds_f[:r, :kc], data=dp_ps[:r, :kc], op0=nl.subtract,
                                           operand0=delta[i][:r], op1=nl.multiply, operand1=scale)
                        ds = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf, name="ds")
                        nisa.tensor_tensor(dst=ds[:r, :kc], data1=ds_f[:r, :kc], data2=p_sb[:r, :kc], op=nl.multiply)
                        nisa.nc_matmul(dst=dv_ps[:kc], stationary=p_sb[:r, :kc], moving=do_sb[:r, i, :])
                        nisa.nc_matmul(dst=dk_ps[:kc], stationary=ds[:r, :kc], moving=q_sb[:r, i, :])
                        dsT_ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum, name="dsT_psum")
                        nisa.nc_transpose(dst=dsT_ps[:kc, :r], data=ds[:r, :kc])
                        dsT = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf, name="dsT")
                        nisa.activation(dst=dsT[:kc, :r], op=nl.copy, data=dsT_ps[:kc, :r])
                        dq_ps = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum, name="dq_psum")
                        nisa.nc_matmul(dst=dq_ps[:r], stationary=dsT[:kc, :r], moving=k_sb[:kc, j, :])
                        accumulate(dq_acc[:r, i, :], dq_ps[:r], not dq_seen[i])
                        dq_seen[i] = True
                    if live:
                        accumulate(dk_acc[:kc, j, :], dk_ps[:kc], g == 0)
                        accumulate(dv_acc[:kc, j, :], dv_ps[:kc], g == 0)
                    elif g == 0:
                        nisa.memset(dst=dk_acc[:kc, j, :], value=0.0)
                        nisa.memset(dst=dv_acc[:kc, j, :], value=0.0)
                for i, (q0, r) in enumerate(qtiles):
                    dq_sb = nl.ndarray((P, d), dtype=dtype, buffer=nl.sbuf, name="dq")
                    nisa.tensor_copy(dst=dq_sb[:r], src=dq_acc[:r, i, :])
                    nisa.dma_copy(dst=dq[b, h, q0:q0 + r, :], src=dq_sb[:r])
            for j, (k0, kc) in enumerate(ktiles):
                dk_sb = nl.ndarray((P, d), dtype=dtype, buffer=nl.sbuf, name="dk")
                nisa.tensor_copy(dst=dk_sb[:kc], src=dk_acc[:kc, j, :])
                nisa.dma_copy(dst=dk[b, hk, k0:k0 + kc, :], src=dk_sb[:kc])
                dv_sb = nl.ndarray((P, d), dtype=dtype, buffer=nl.sbuf, name="dv")
                nisa.tensor_copy(dst=dv_sb[:kc], src=dv_acc[:kc, j, :])
                nisa.dma_copy(dst=dv[b, hk, k0:k0 + kc, :], src=dv_sb[:kc])
    return dq, dk, dv
