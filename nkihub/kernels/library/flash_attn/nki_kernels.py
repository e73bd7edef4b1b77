"""NKI kernels of neuron/flash-attn: flash attention forward (with the log-sum-exp); the backward is in
nki_backward (re-exported here as flash_bwd_kernel).

Layout: q, o, do are (B, Hq, Sq, D), k, v are (B, Hkv, Sk, D) in HBM (torch's scaled_dot_product_attention
layout); GQA/MQA when Hq is a multiple of Hkv; any D up to 256 (over 128 split on partitions, see
vit_attn's d_chunks). lse is (B, Hq, Sq) fp32, natural log of the row sums of
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

# shared with vit-attn (nki_backward uses them too): rings, the head-dim chunks on partitions (D > 128 is
# split in two and contractions over D accumulate), head transposes and Q K^T over the chunks
from nkihub.kernels.library.vit_attn.nki_kernels import Ring, d_chunks, qk_matmul, transpose_head, transposed_ring  # noqa: F401

P = 128            # partitions: q rows per tile and keys per P^T tile
BANK = 512         # fp32 columns in one PSUM bank: keys per S matmul
KEY_BLOCK = 1024   # keys per online-softmax step (two PSUM banks): amortises the per-step row updates
NEG = -1.0e30      # additive mask; finite so that masked exp underflows to 0 without inf - inf
AHEAD_T, AHEAD_E, AHEAD_S = 1, 3, 4   # pipeline distances (blocks ahead of P V) of transposes, exp, scores


def row_tiles(n):
    """[(start, rows)] covering n rows in tiles of 128 (the last one partial)."""
    return [(s, min(P, n - s)) for s in range(0, n, P)]


def causal_mask(dtype=nl.float32):
    """[128, 128] additive mask: 0 where key j <= query p, NEG above the diagonal (GpSimd affine_select)."""
    zeros = nl.zeros((P, P), dtype=dtype, buffer=nl.sbuf, name="mask_zeros")
    mask = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf, name="causal_mask")
    nisa.affine_select(dst=mask, pattern=[[1, P]], channel_multiplier=-1, on_true_tile=zeros,
                       on_false_value=NEG, cmp_op=nl.less_equal)
    return mask


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
        qk_matmul(blk.s[:r, c0:c0 + cw], blk.head["qT"], blk.head["kT"], ctx["d"], blk.q0, r, blk.b0 + c0, cw)
    if ctx["causal"] and blk.b0 + bw > blk.q0:
        lo = blk.q0 - blk.b0      # the diagonal: keys q0.. get the triangular mask
        nisa.tensor_tensor(dst=blk.s[:r, lo:bw], data1=blk.s[:r, lo:bw], data2=ctx["mask"][:r, :bw - lo], op=nl.add)
    if ctx["shared_psum"]:
        # trn1: Vector and Scalar share the PSUM port, so S is read from PSUM once: the Scalar Engine
        # copies -S to SBUF (fp32) with the row min of -S (= -max) fused; exp then reads the copy
        blk.neg_s = ctx["neg_s"].next()
        nisa.activation(dst=blk.neg_s[:r, :bw], op=nl.copy, data=blk.s[:r, :bw], scale=-1.0,
                        reduce_op=nl.minimum, reduce_res=blk.st[:r, 0:1])
    else:
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
    if ctx["shared_psum"]:
        nisa.activation(dst=blk.p[:r, :blk.bw], op=nl.exp, data=blk.neg_s[:r, :blk.bw], scale=-1.0, bias=nmax,
                        reduce_op=nl.add, reduce_res=st[:r, 2:3])
    else:
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
        # 2:1 on Scalar balances the engines; trn1: 3:1 on Vector (the Scalar Engine also evacuates S there)
        on_vector = ctx["copies"] % 4 != 3 if ctx["shared_psum"] else ctx["copies"] % 3 == 2
        eng = nisa.vector_engine if on_vector else nisa.scalar_engine
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
def flash_fwd_kernel(q, k, v, causal, scale, key_block=KEY_BLOCK, ahead_t=AHEAD_T,
                     ahead_e=AHEAD_E, ahead_s=AHEAD_S):
    """Flash attention forward. q (B, Hq, Sq, D), k/v (B, Hkv, Sk, D) bf16 or fp32 (HBM), Hq % Hkv == 0,
    D <= 256; causal masks key j > query i (top-left aligned, as torch's is_causal). Returns
    out (B, Hq, Sq, D) in q's dtype and lse (B, Hq, Sq) fp32.

    The (q tile, key block) steps of all heads form one software pipeline (see the loop below), so
    every in-order engine queue has independent work queued behind what it waits for; K/V of the next kv head and Q of the next q head load meanwhile.
    Tuning parameters (nki.autotune): ``key_block`` keys per online-softmax step (a multiple of 512),
    ``ahead_t`` <= ``ahead_e`` <= ``ahead_s`` the pipeline distances of the P^T, exp and scores stages.
    """
    bsz, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    dtype = q.dtype
    out = nl.ndarray((bsz, hq, sq, d), dtype=dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((bsz, hq, sq), dtype=nl.float32, buffer=nl.shared_hbm)
    nqt, nkt = len(row_tiles(sq)), len(row_tiles(sk))
    shared_psum = nisa.get_nc_version() == nisa.nc_version.gen2   # trn1: Vector and Scalar share PSUM's port
    # heads in flight: the pipeline holds ahead_s + 1 blocks (a head has at least nqt) plus the prefetched one
    q_slots = 2 + -(-(ahead_s + 1) // nqt)
    kv_slots = 2 + -(-(ahead_s + 1) // (nqt * group))
    ctx = {
        "d": d, "causal": causal, "mask": causal_mask() if causal else None, "copies": 0,
        "shared_psum": shared_psum,
        "k": Ring((P, nkt, d), dtype, nl.sbuf, kv_slots, "k"), "v": Ring((P, nkt, d), dtype, nl.sbuf, kv_slots, "v"),
        "q": Ring((P, nqt, d), dtype, nl.sbuf, q_slots, "q"),
        "kT": transposed_ring(d, sk, dtype, kv_slots, "kT"), "qT": transposed_ring(d, sq, dtype, q_slots, "qT"),
        "s": Ring((P, key_block), nl.float32, nl.psum, 2, "s_psum"),            # 4 banks
        "pT_psum": Ring((P, BANK // P, P), nl.float32, nl.psum, 2, "pT_psum"),  # 2 banks
        "pv": Ring((P, d), nl.float32, nl.psum, 2, "pv_psum"),                  # 1 bank
        "p": Ring((P, key_block), dtype, nl.sbuf, ahead_e - ahead_t + 2, "p"),
        "pT": Ring((P, BANK // P, P), dtype, nl.sbuf, 2 * (key_block // BANK) + 2, "pT"),
        "stats": Ring((P, 5), nl.float32, nl.sbuf, ahead_s + 4, "stats"),
        "o": Ring((P, d), nl.float32, nl.sbuf, 8, "o_acc"),
        "o_scaled": Ring((P, d), nl.float32, nl.sbuf, 2, "o_scaled"),
        "o_out": Ring((P, d), dtype, nl.sbuf, 3, "o_out"), "lse": Ring((P, 1), nl.float32, nl.sbuf, 3, "lse_sb"),
    }
    if shared_psum:
        ctx["neg_s"] = Ring((P, key_block), nl.float32, nl.sbuf, ahead_s - ahead_e + 2, "neg_s")
    # PSUM: the transposes of K and Q share one bank (the 8th)
    tp = Ring((P, BANK), nl.float32, nl.psum, 1, "tp_psum")
    kv_heads = {}

    def head(b, h):
        hk = h // group
        if (b, hk) not in kv_heads:
            k_sb, v_sb, kT = ctx["k"].next(), ctx["v"].next(), ctx["kT"].next()
            load_head_rows(k[b, hk], sk, k_sb)
            load_head_rows(v[b, hk], sk, v_sb)
            transpose_head(k_sb, row_tiles(sk), d, kT, tp)
            kv_heads[(b, hk)] = {"kT": kT, "v": v_sb}
        q_sb, qT = ctx["q"].next(), ctx["qT"].next()
        load_head_rows(q[b, h], sq, q_sb)
        transpose_head(q_sb, row_tiles(sq), d, qT, tp, scale)
        return dict(kv_heads[(b, hk)], qT=qT, bh=(b, h))

    def blocks_of(hd):
        for q0, r in row_tiles(sq):
            kend = min(sk, q0 + r) if causal else sk
            prev = None
            for b0 in range(0, kend, key_block):
                bw = min(key_block, kend - b0)
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
    # n + ahead_t, the scores of n + ahead_s, the exp of n + ahead_e and P V of block n. Per engine queue
    # that is Tensor T S PV, Vector copy max o-update, Scalar copies exp: every wait is on work issued at
    # least one step earlier.
    n = -ahead_s
    while True:
        blocks = {dist: blk(n + dist) if n + dist >= 0 else None for dist in (0, ahead_t, ahead_e, ahead_s)}
        if n >= 0 and blocks[0] is None:
            break
        if blocks[ahead_t] is not None:
            stage_transpose(blocks[ahead_t], ctx)
        if blocks[ahead_s] is not None:
            stage_scores(blocks[ahead_s], ctx)
        if blocks[ahead_e] is not None:
            stage_exp(blocks[ahead_e], ctx)
        if blocks[0] is not None:
            stage_pv(blocks[0], ctx)
            if blocks[0].last:
                stage_out(blocks[0], ctx, out, lse)
        n += 1
    return out, lse


# the backward kernel lives in its own module (it uses the helpers above)
from .nki_backward import bwd_sbuf_bytes, check_bwd_fits, flash_bwd_kernel  # noqa: E402,F401
