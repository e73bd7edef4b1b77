"""NKI kernel of neuron/flash-attn's backward, software pipelined (re-exported by ``nki_kernels``).

Per (batch, kv head) K, V, K^T and V^T stay in SBUF; per q head of the group Q, dO, the scaled Q^T, dO^T,
-lse and -delta = dlse - rowsum(dO * O) (one column per q tile) are prepared once. The work is a stream
of steps, one per (q head, key block of up to 512 keys, live 128-row q tile):

    A  S = Q K^T and dP = dO V^T (Tensor, one matmul each per 512-key PSUM bank), causal mask (Vector)
    B  P = exp(S - lse) (Scalar), T = dP - delta (Vector, fp32)
    C  dS = T * P (GpSimd)
    D  dV += P^T dO and dK += dS^T Q into PSUM (open over the q tiles of the key block), dS^T by
       Tensor Engine transposes
    E  dS^T to SBUF (Scalar)
    F  dQ part = dS K (Tensor), accumulated pre-scaled in SBUF fp32 (Vector); the last key block writes dQ

Step n issues D of step n, E of n-1, F of n-2, A of n+3, B of n+2 and C of n+1, so each in-order engine
queue has independent work behind what it waits for; every working buffer is a ring sized for the
distance it lives. After a key block's last step dK and dV leave PSUM (summed over the q heads of a
group in SBUF fp32). The softmax scale is folded into Q^T, dK and dQ (dS is kept unscaled).
"""
import nki
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.vit_attn.nki_kernels import psum_width

from .nki_kernels import BANK, NEG, P, Ring, qk_matmul, row_tiles, transpose_head, transposed_ring

AHEAD_A, AHEAD_B, AHEAD_C = 3, 2, 1   # pipeline distances (steps ahead of D); E and F trail by 1 and 2
BEHIND_E, BEHIND_F = 1, 2
# The next head is prepared when the current head's step PREPARE_AT is made: by then every stage of the
# previous head has been issued, so its slots can be reused (two slots per ring suffice for long heads).
PREPARE_AT = AHEAD_A + BEHIND_F
# Working rings [128, slots, cols]: name, columns, fp32 (else the input dtype), slots (the pipeline distance
# the buffer lives, plus two).
# D > 128 ("wide"): dK + dV take 4 PSUM banks, so dS^T has one PSUM slot (shared with the head
# transposes) and stage E runs right behind D in the same step
WIDE_BEHIND_E = 0


def behind_e(d):
    """Pipeline distance of stage E for head dim d."""
    return WIDE_BEHIND_E if d > P else BEHIND_E


def work_rings(d):
    """The working rings for head dim d: (name, columns, fp32, slots)."""
    return (("p", BANK, False, AHEAD_B + 2), ("t", BANK, True, AHEAD_B - AHEAD_C + 2),
            ("ds", BANK, False, AHEAD_C + 2), ("dsT", BANK, False, BEHIND_F - behind_e(d) + 2))


def head_slots(sq, sk, causal, group):
    """(q-head slots, kv-head slots) of the per-head rings: two when a head has more steps than
    PREPARE_AT, else enough for every head the pipeline (AHEAD_A + BEHIND_F + 1 steps) spans."""
    nqt = len(row_tiles(sq))
    head_steps = nqt * (1 if causal else -(-sk // BANK))
    if head_steps > PREPARE_AT:
        return 2, 2
    span = AHEAD_A + BEHIND_F + 1
    return 2 + -(-span // head_steps), 2 + -(-span // (head_steps * group))


def bwd_sbuf_bytes(sq, sk, d, group, itemsize, causal=False):
    """SBUF bytes per partition the backward kernel allocates for (Sq, Sk, D), its group size and input
    itemsize: per kv-head slot K, V (then dV), dK out, K^T, V^T; per q-head slot Q (then dQ), dO, Q^T,
    dO^T, the fp32 dQ accumulator and two columns; O once; the group's fp32 dK/dV sums; the working rings."""
    nqt, nkt, ndc = len(row_tiles(sq)), len(row_tiles(sk)), len(row_tiles(d))
    q_slots, kv_slots = head_slots(sq, sk, causal, group)
    kv = kv_slots * (3 * nkt * d * itemsize + 2 * ndc * sk * itemsize)
    qh = q_slots * (2 * nqt * d * itemsize + 2 * ndc * sq * itemsize + nqt * d * 4 + 2 * nqt * 4) + nqt * d * itemsize
    acc = kv_slots * 2 * nkt * d * 4 if group > 1 else 0
    work = sum(slots * cols * (4 if f32 else itemsize) for _, cols, f32, slots in work_rings(d))
    keys = {m for _, _, live in schedule(sq, sk, causal) for *_, m in live if m is not None}
    masks = (sum(k[3] for k in keys) + max(k[3] for k in keys)) * 4 if keys else 0   # and their zeros
    small = 3 * d * 4 + 2 * d * 4 + 4 * 4 + masks
    return kv + qh + acc + work + small


def check_bwd_fits(sq, sk, d, group, itemsize, causal, available):
    """ValueError (before any instruction is traced) when the backward's tiles do not fit ``available``
    SBUF bytes per partition (the target's, ``nl.tile_size.total_available_sbuf_size``)."""
    need = bwd_sbuf_bytes(sq, sk, d, group, itemsize, causal)
    if need > available:
        raise ValueError(f"flash backward: q (Sq={sq}) and k (Sk={sk}) with head dim {d} need {need // 1024} KiB "
                         f"of SBUF per partition, more than the {available // 1024} KiB of the target; use "
                         "shorter sequences (or split the sequence across calls)")


GROUP = BANK // P   # causal row layout: 128-row tiles per 512-row group (one key block)


def tile_rows(n, causal):
    """Row layout of t [n, ...] in SBUF [128, ntiles, ...]: per tile (base, stride, rows), partition p
    holding row base + stride * p. Non-causal: interleaved over all full tiles (partition p holds rows
    p * nt .. p * nt + nt - 1: one contiguous run per partition, full DMA bandwidth from 2 KiB). Causal:
    interleaved within 512-row groups (4 rows per partition: 1 KiB runs for bf16 D=128, half bandwidth
    instead of a quarter for single rows) so a group is one key block and the causal structure between
    groups survives; full tiles past the last whole group and the partial tile are natural."""
    full = n // P
    if not causal:
        tiles = [(t, full, P) for t in range(full)]
    else:
        ng = full // GROUP
        tiles = [(g * BANK + j, GROUP, P) for g in range(ng) for j in range(GROUP)]
        tiles += [(t * P, 1, P) for t in range(ng * GROUP, full)]
    if n % P:
        tiles.append((full * P, 1, n % P))
    return tiles


def hbm_runs(t, n, causal):
    """[(HBM view [rows, tiles, ...], first tile, tiles, rows)]: the DMAs moving t [n, ...] in the layout
    of ``tile_rows`` (whole groups in one, natural full tiles in one, the partial tile in one)."""
    full, rest = n // P, tuple(t.shape[1:])
    swap = (1, 0) + tuple(range(2, 2 + len(rest)))
    runs = []
    if not causal:
        if full:
            runs.append((t[:full * P].reshape((P, full) + rest), 0, full, P))
    else:
        ng = full // GROUP
        if ng:   # rows g * 512 + 4 p + j -> partition p, tile 4 g + j
            v = t[:ng * BANK].reshape((ng, P, GROUP) + rest)
            runs.append((v.permute((1, 0) + tuple(range(2, 3 + len(rest)))), 0, ng * GROUP, P))
        if full > ng * GROUP:
            k = full - ng * GROUP
            runs.append((t[ng * BANK:full * P].reshape((k, P) + rest).permute(swap), ng * GROUP, k, P))
    if n % P:
        runs.append((t[full * P:n].reshape((n % P, 1) + rest), full, 1, n % P))
    return runs


def move_rows(hbm, n, sb, causal, store=False):
    """HBM [n, D] (or [n]) <-> SBUF [128, ntiles, D] (or [128, ntiles]) in the row layout of
    ``tile_rows``."""
    for h, t0, cnt, rows in hbm_runs(hbm, n, causal):
        s = sb[:rows, t0:t0 + cnt]
        nisa.dma_copy(dst=h, src=s) if store else nisa.dma_copy(dst=s, src=h)


def key_grouped(kb, sk, causal):
    """Whether the key block at kb holds a whole 512-row group (its columns interleaved: column c is key
    kb + 4 (c % 128) + c // 128), else its columns are keys kb + c."""
    return causal and kb + BANK <= (sk // P) // GROUP * BANK


def mask_key(base, stride, kb, bw, sk):
    """Causal mask of a q tile (rows base + stride * p) against the key block at kb (bw columns): None
    when every row sees every key, else (stride, base - kb, grouped, bw): keep where
    base - kb + stride * p - keyoff(c) >= 0, keyoff the column's key minus kb."""
    if base - kb >= bw - 1:
        return None
    return stride, base - kb, key_grouped(kb, sk, True), bw


def causal_masks(keys):
    """{mask key: [128, bw] fp32 additive mask (0 kept, NEG masked)} built on GpSimd (affine_select)."""
    if not keys:
        return {}
    width = max(k[3] for k in keys)
    zeros = nl.zeros((P, width), dtype=nl.float32, buffer=nl.sbuf, name="mask_zeros")
    masks = {}
    for n, (stride, off, grouped, bw) in enumerate(sorted(keys)):
        m = nl.ndarray((P, bw), dtype=nl.float32, buffer=nl.sbuf, name=f"causal_mask{n}")
        pattern = [[-1, GROUP], [-GROUP, P]] if grouped else [[-1, bw]]
        nisa.affine_select(dst=m, pattern=pattern, channel_multiplier=stride, on_true_tile=zeros[:, :bw],
                           on_false_value=NEG, cmp_op=nl.greater_equal, offset=off)
        masks[(stride, off, grouped, bw)] = m
    return masks


def schedule(sq, sk, causal):
    """The steps of one q head: per key block (kb, bw of the block, [(q tile, bw, last key block of the
    tile, mask key)]) over the tiles some key of the block is visible to (causal: key <= row)."""
    qrows = tile_rows(sq, causal)
    kbs = [kb for kb in range(0, sk, BANK) if not causal or kb < sq]
    out = []
    for kb in kbs:
        full_bw = min(BANK, sk - kb)
        live = []
        for i, (base, stride, r) in enumerate(qrows):
            last_row = base + stride * (r - 1)
            if not causal:
                live.append((i, full_bw, kb + BANK >= sk, None))
                continue
            if kb > last_row:
                continue
            # natural key blocks stop at the tile's last row; a group's columns are interleaved: all of it
            bw = full_bw if key_grouped(kb, sk, causal) else min(full_bw, last_row + 1 - kb)
            live.append((i, bw, kb + BANK > last_row or kb + BANK >= sk, mask_key(base, stride, kb, bw, sk)))
        out.append((kb, full_bw, live))
    return out


class Step:
    """One (q head, key block, q tile) step."""

    def __init__(self, head, i, q0, r, kb, bw, first_kb, last_kb, block, mask=None):
        self.head, self.i, self.q0, self.r, self.kb, self.bw = head, i, q0, r, kb, bw
        self.mask = mask   # causal: key of ctx["masks"] (None: the tile sees the whole block)
        self.first_kb, self.last_kb, self.block = first_kb, last_kb, block
        self.key_tiles = row_tiles(bw)


def stage_a(st, ctx):
    """S and dP for the step (one matmul each), the causal mask on the diagonal."""
    hd, r, bw = st.head, st.r, st.bw
    st.s, st.dp = ctx["s"].next(), ctx["dp"].next()
    qk_matmul(st.s[:r, :bw], hd["qT"], hd["kT"], ctx["d"], st.q0, r, st.kb, bw)
    if st.mask is not None:
        nisa.tensor_tensor(dst=st.s[:r, :bw], data1=st.s[:r, :bw], data2=ctx["masks"][st.mask][:r, :bw], op=nl.add)
    qk_matmul(st.dp[:r, :bw], hd["doT"], hd["vT"], ctx["d"], st.q0, r, st.kb, bw)


def stage_b(st, ctx):
    """P = exp(S - lse) (Scalar) and T = dP - delta in fp32 (Vector)."""
    hd, r, bw, i = st.head, st.r, st.bw, st.i
    st.p, st.t = ctx["p"].next(), ctx["t"].next()
    nisa.activation(dst=st.p[:r, :bw], op=nl.exp, data=st.s[:r, :bw], bias=hd["nlse"][:r, i:i + 1])
    nisa.tensor_scalar(dst=st.t[:r, :bw], data=st.dp[:r, :bw], op0=nl.add, operand0=hd["ndelta"][:r, i:i + 1])


def stage_c(st, ctx):
    """dS = T * P (GpSimd: it is free while the Vector and Scalar Engines read PSUM)."""
    st.ds = ctx["ds"].next()
    nisa.tensor_tensor(dst=st.ds[:st.r, :st.bw], data1=st.t[:st.r, :st.bw], data2=st.p[:st.r, :st.bw],
                       op=nl.multiply, engine=nisa.gpsimd_engine)


def stage_d(st, ctx):
    """dV += P^T dO, dK += dS^T Q per 128-key tile (PSUM groups open over the block's q tiles), then
    the dS^T transposes into one PSUM bank."""
    hd, r, i = st.head, st.r, st.i
    blk = st.block
    for t, (c0, kc) in enumerate(st.key_tiles):
        first = t not in blk["started"]
        blk["started"][t] = max(kc, blk["started"].get(t, 0))   # causal: keys past the last query stay unwritten
        nisa.nc_matmul(dst=blk["dv"][:kc, t, :], stationary=st.p[:r, c0:c0 + kc], moving=hd["do"][:r, i, :],
                       accumulate=not first)
        nisa.nc_matmul(dst=blk["dk"][:kc, t, :], stationary=st.ds[:r, c0:c0 + kc], moving=hd["q"][:r, i, :],
                       accumulate=not first)
    st.dsT_ps = ctx["tp"].next()
    for t, (c0, kc) in enumerate(st.key_tiles):
        nisa.nc_transpose(dst=st.dsT_ps[:kc, t * P:t * P + r], data=st.ds[:r, c0:c0 + kc])


def stage_e(st, ctx):
    """dS^T from PSUM to SBUF (Scalar Engine): full key tiles in one copy, a partial one apart."""
    r = st.r
    st.dsT = ctx["dsT"].next()
    full = sum(1 for _, kc in st.key_tiles if kc == P)
    if full:
        nisa.tensor_copy(dst=st.dsT[:, :full * P].reshape_dim(1, (full, P))[:, :, :r],
                         src=st.dsT_ps[:, :full * P].reshape_dim(1, (full, P))[:, :, :r], engine=nisa.scalar_engine)
    if full < len(st.key_tiles):
        kc = st.key_tiles[-1][1]
        nisa.tensor_copy(dst=st.dsT[:kc, full * P:full * P + r], src=st.dsT_ps[:kc, full * P:full * P + r],
                         engine=nisa.scalar_engine)


def stage_f(st, ctx, dq):
    """dQ part = dS K over the block's key tiles (Tensor), accumulated as scale * part in SBUF fp32
    (Vector); after the tile's last key block the sum goes, in dq's dtype, into Q's slot (no later step
    reads that Q tile) and the head's last step stores the whole head in one DMA."""
    hd, r, i, d = st.head, st.r, st.i, ctx["d"]
    ps = ctx["dq_ps"].next()
    for t, (c0, kc) in enumerate(st.key_tiles):
        nisa.nc_matmul(dst=ps[:r, :d], stationary=st.dsT[:kc, t * P:t * P + r],
                       moving=hd["kv"]["k"][:kc, (st.kb + c0) // P, :], accumulate=t > 0)
    acc = hd["dq_acc"][:r, i, :]
    target = acc
    if st.last_kb:
        target = hd["q"][:r, i, :]
    if st.first_kb:
        nisa.tensor_scalar(dst=target, data=ps[:r, :d], op0=nl.multiply, operand0=ctx["scale"])
    else:
        nisa.scalar_tensor_tensor(dst=target, data=ps[:r, :d], op0=nl.multiply, operand0=ctx["scale"], op1=nl.add,
                                  operand1=acc)
    if st.last_of_head:
        b, h = hd["bh"]
        move_rows(dq[b, h], ctx["sq"], hd["q"], ctx["causal"], store=True)


def drain_block(blk, ctx, dk, dv):
    """After a key block's last step of one q head: dK, dV leave PSUM, summed over the group's q heads
    in SBUF fp32; the last head writes them (dK scaled) in the output dtype into the kv head's dK tile
    and V's slot (V is only read by its transposes), and the kv head's last block stores both."""
    kv, g, last_g = blk["kv"], blk["g"], blk["g"] == ctx["group"] - 1
    kb, bw = blk["kb"], blk["bw"]
    tiles = row_tiles(bw)
    for name, ps, scale, out in (("dk", blk["dk"], ctx["scale"], dk), ("dv", blk["dv"], 1.0, dv)):
        acc = kv.get(name + "_acc")
        o_sb = kv["dk_out" if name == "dk" else "v"]
        for t, (c0, full_kc) in enumerate(tiles):
            kt = (kb + c0) // P
            kc = blk["started"].get(t, 0)   # causal: the rows past every query were zeroed by kv_head
            if not kc:
                continue
            if ctx["group"] == 1:
                nisa.tensor_scalar(dst=o_sb[:kc, kt, :], data=ps[:kc, t, :], op0=nl.multiply, operand0=scale,
                                   engine=nisa.scalar_engine if name == "dk" else nisa.vector_engine)
            elif g == 0:
                nisa.tensor_copy(dst=acc[:kc, kt, :], src=ps[:kc, t, :])
            elif not last_g:
                nisa.tensor_tensor(dst=acc[:kc, kt, :], data1=acc[:kc, kt, :], data2=ps[:kc, t, :], op=nl.add)
            else:
                nisa.scalar_tensor_tensor(dst=o_sb[:kc, kt, :], data=ps[:kc, t, :], op0=nl.multiply, operand0=1.0,
                                          op1=nl.add, operand1=acc[:kc, kt, :])
                if scale != 1.0:
                    nisa.tensor_scalar(dst=o_sb[:kc, kt, :], data=o_sb[:kc, kt, :], op0=nl.multiply, operand0=scale,
                                       engine=nisa.gpsimd_engine)
        if blk["store"]:
            b, hk = kv["bh"]
            move_rows(out[b, hk], ctx["sk"], o_sb, ctx["causal"], store=True)


@nki.jit
def flash_bwd_kernel(q, k, v, o, do, lse, dlse, causal, scale):
    """Flash attention backward. q/o/do (B, Hq, Sq, D), k/v (B, Hkv, Sk, D) bf16 or fp32, lse and dlse
    (B, Hq, Sq) fp32 (dlse: the gradient reaching lse, zeros if none). Returns dq (B, Hq, Sq, D),
    dk and dv (B, Hkv, Sk, D) in q's dtype. ValueError when Sq, Sk are too long for the target's SBUF.

    Rows are interleaved over the tiles (see ``tile_rows``): non-causal over all of them (every load and
    store of a head is one DMA with one contiguous run per partition), causal within 512-row groups."""
    bsz, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    dtype = q.dtype
    check_bwd_fits(sq, sk, d, group, q.itemsize, causal, nl.tile_size.total_available_sbuf_size)
    dq = nl.ndarray((bsz, hq, sq, d), dtype=dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray((bsz, hkv, sk, d), dtype=dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray((bsz, hkv, sk, d), dtype=dtype, buffer=nl.shared_hbm)
    qtiles, nkt = row_tiles(sq), len(row_tiles(sk))
    nqt = len(qtiles)
    plan = schedule(sq, sk, causal)
    masks = causal_masks({m for _, _, live in plan for *_, m in live if m is not None})
    # dK and dV of a key block: [128 keys, 4 key tiles, D padded to a power of two] fp32, so a key tile's
    # matmul output never straddles a PSUM bank; 2 banks up to D 128, 4 banks up to D 256
    dpad = psum_width(d)
    wide = dpad > P
    ctx = {
        "d": d, "sq": sq, "sk": sk, "causal": causal, "scale": scale, "group": group, "masks": masks,
        # PSUM (8 banks): S 1, dP 1, dS^T 2, head transposes 1, dK + dV 2, dQ at most one bank
        # (S and dP are read by stage B of the next step before stage A writes again: one slot each);
        # D > 128: dK + dV take 4 banks, so dS^T keeps one slot (stage E right behind D, see behind_e)
        # and the head transposes share it
        "s": Ring((P, BANK), nl.float32, nl.psum, 1, "s_psum"),
        "dp": Ring((P, BANK), nl.float32, nl.psum, 1, "dp_psum"),
        "tp": Ring((P, BANK), nl.float32, nl.psum, 1 if wide else 2, "tp_psum"),
        "dq_ps": Ring((P, d), nl.float32, nl.psum, 2, "dq_psum"),
    }
    lag_e = behind_e(d)
    ctx["head_tp"] = ctx["tp"] if wide else Ring((P, BANK), nl.float32, nl.psum, 1, "head_tp_psum")
    for name, cols, f32, slots in work_rings(d):
        ctx[name] = Ring((P, cols), nl.float32 if f32 else dtype, nl.sbuf, slots, name)
    dkv_ps = Ring((P, 2, BANK // P, dpad), nl.float32, nl.psum, 1, "dkv_psum")
    q_slots, kv_slots = head_slots(sq, sk, causal, group)
    kv_names = ("k", "v", "kT", "vT", "dk_out", "dk_acc", "dv_acc")
    rings = {name: Ring(shape, dt, nl.sbuf, kv_slots if name in kv_names else q_slots, name)
             for name, shape, dt in (
        ("k", (P, nkt, d), dtype), ("v", (P, nkt, d), dtype),
        ("dk_out", (P, nkt, d), dtype),
        ("q", (P, nqt, d), dtype), ("do", (P, nqt, d), dtype),
        ("dq_acc", (P, nqt, d), nl.float32),
        ("nlse", (P, nqt), nl.float32), ("ndelta", (P, nqt), nl.float32))
             + ((("dk_acc", (P, nkt, d), nl.float32), ("dv_acc", (P, nkt, d), nl.float32)) if group > 1 else ())}
    o_sb = nl.ndarray((P, nqt, d), dtype=dtype, buffer=nl.sbuf, name="o")   # only read while a head is prepared
    ctx["prod"] = Ring((P, d), nl.float32, nl.sbuf, 2, "do_o")
    ctx["dot"] = Ring((P, 1), nl.float32, nl.sbuf, 2, "do_o_sum")

    for name, n in (("kT", sk), ("vT", sk)):
        rings[name] = transposed_ring(d, n, dtype, kv_slots, name)
    for name, n in (("qT", sq), ("doT", sq)):
        rings[name] = transposed_ring(d, n, dtype, q_slots, name)

    def transpose_into(rows, n, dst, scale_by):
        transpose_head(rows, row_tiles(n), d, dst, ctx["head_tp"], scale_by)

    def columns(src, dst, negate):
        """src (Sq,) fp32 (HBM) -> dst [128, nqt] (column i = q tile i), negated on GpSimd if asked."""
        full, rest = sq // P, sq % P
        move_rows(src, sq, dst, causal)
        for sl in ((slice(0, P), slice(0, full)), (slice(0, rest), slice(full, full + 1))) if negate else ():
            if sl[0].stop and sl[1].stop > sl[1].start:
                nisa.tensor_scalar(dst=dst[sl], data=dst[sl], op0=nl.multiply, operand0=-1.0,
                                   engine=nisa.gpsimd_engine)

    def kv_head(b, hk):
        kv = {name: rings[name].next() for name in ("k", "v", "kT", "vT", "dk_out")}
        move_rows(k[b, hk], sk, kv["k"], causal)
        move_rows(v[b, hk], sk, kv["v"], causal)
        transpose_into(kv["k"], sk, kv["kT"], 1.0)
        transpose_into(kv["v"], sk, kv["vT"], 1.0)
        if causal and sk > sq:
            # keys past the last query get no gradient; the tiles holding them are zeroed (drain_block
            # then writes the rows some query sees)
            for name in ("dk_out", "v"):
                nisa.memset(dst=kv[name][:, sq // P:nkt, :], value=0.0)
        if group > 1:
            kv["dk_acc"], kv["dv_acc"] = rings["dk_acc"].next(), rings["dv_acc"].next()
        kv["bh"] = (b, hk)
        return kv

    def q_head(b, h, kv):
        hd = {name: rings[name].next() for name in ("q", "do", "qT", "doT", "dq_acc", "nlse", "ndelta")}
        # Q and dO first: their transposes are the first head's critical path
        for name, src in (("q", q), ("do", do)):
            move_rows(src[b, h], sq, hd[name], causal)
        transpose_into(hd["q"], sq, hd["qT"], scale)
        transpose_into(hd["do"], sq, hd["doT"], 1.0)
        move_rows(o[b, h], sq, o_sb, causal)
        # -lse and -delta = dlse - rowsum(dO * O) per q tile (column)
        columns(lse[b, h], hd["nlse"], True)
        columns(dlse[b, h], hd["ndelta"], False)
        for i, (q0, r) in enumerate(qtiles):
            prod, dot = ctx["prod"].next(), ctx["dot"].next()[:r]
            nisa.tensor_tensor(dst=prod[:r], data1=hd["do"][:r, i, :], data2=o_sb[:r, i, :],
                               op=nl.multiply, engine=nisa.gpsimd_engine)
            nisa.tensor_reduce(dst=dot, op=nl.add, data=prod[:r], axis=1)
            nisa.tensor_tensor(dst=hd["ndelta"][:r, i:i + 1], data1=hd["ndelta"][:r, i:i + 1], data2=dot,
                               op=nl.subtract, engine=nisa.gpsimd_engine)
        hd["kv"], hd["bh"] = kv, (b, h)
        hd["kT"], hd["vT"] = kv["kT"], kv["vT"]
        return hd

    def steps():
        """The step stream; the next q head is prepared when the current one's step PREPARE_AT is made
        (or its last, if it has fewer)."""
        heads = [(b, hk, g) for b in range(bsz) for hk in range(hkv) for g in range(group)]
        kvs = {}

        def prepare(j):
            b, hk, g = heads[j]
            if (b, hk) not in kvs:
                kvs[(b, hk)] = kv_head(b, hk)
            return q_head(b, hk * group + g, kvs[(b, hk)])

        nxt = prepare(0)
        for j, (b, hk, g) in enumerate(heads):
            hd = nxt
            # key blocks some query sees (causal: keys below Sq); the last one stores dK, dV
            last_block = plan[-1][0]
            made = []
            for kb, block_bw, live in plan:
                block = {"kv": hd["kv"], "g": g, "kb": kb, "bw": block_bw, "started": {},
                         "store": g == group - 1 and kb == last_block}
                pair = dkv_ps.next()
                block["dv"], block["dk"] = pair[:, 0, :, :d], pair[:, 1, :, :d]
                for n_i, (i, bw, last_kb, mask) in enumerate(live):
                    q0, r = qtiles[i]
                    st = Step(hd, i, q0, r, kb, bw, kb == 0, last_kb, block, mask)
                    st.ends_block = n_i == len(live) - 1
                    st.last_of_head = kb == last_block and st.ends_block
                    if len(made) == PREPARE_AT and j + 1 < len(heads):
                        nxt = prepare(j + 1)   # its loads and transposes overlap this head's steps
                    made.append(st)
                    yield st
            if len(made) <= PREPARE_AT and j + 1 < len(heads):
                nxt = prepare(j + 1)

    stream, made = steps(), []

    def step(n):
        """Step n of the stream (None past the end)."""
        while len(made) <= n:
            made.append(next(stream, None))
        return made[n]

    n = -AHEAD_A
    while True:
        if n - BEHIND_F >= 0 and step(n - BEHIND_F) is None:
            break
        for dist in (AHEAD_A, AHEAD_B, AHEAD_C):
            if n + dist >= 0:
                step(n + dist)    # make the steps (and prepare heads) before this step's stages
        cur = step(n) if n >= 0 else None
        if cur is not None:
            stage_d(cur, ctx)
        if n - lag_e >= 0 and step(n - lag_e) is not None:
            stage_e(step(n - lag_e), ctx)
        if n - BEHIND_F >= 0 and step(n - BEHIND_F) is not None:
            stage_f(step(n - BEHIND_F), ctx, dq)
        # C, B, A in this order: each reads what the next one overwrites in a one-slot ring
        for dist, stage in ((AHEAD_C, stage_c), (AHEAD_B, stage_b), (AHEAD_A, stage_a)):
            if n + dist >= 0 and step(n + dist) is not None:
                stage(step(n + dist), ctx)
        if cur is not None and cur.ends_block:
            drain_block(cur.block, ctx, dk, dv)
        n += 1
    return dq, dk, dv
