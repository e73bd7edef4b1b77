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


def attend_tile(qT, q0, r, kT, v_sb, sk, causal, mask, dtype):
    """Attention of one q tile (rows q0..q0+r) against all keys: online softmax over key blocks.
    Returns (o_acc [r, D] fp32 SBUF unnormalised, row_sum [r, 1], neg_max [r, 1]) fp32; scores are
    already scaled (qT carries the scale)."""
    d = v_sb.shape[2]
    kend = min(sk, q0 + r) if causal else sk
    nmax = rsum = o_acc = None
    for b0 in range(0, kend, KEY_BLOCK):
        bw = min(KEY_BLOCK, kend - b0)
        s_ps = nl.ndarray((P, KEY_BLOCK), dtype=nl.float32, buffer=nl.psum, name="s_psum")
        for c0 in range(0, bw, BANK):
            cw = min(BANK, bw - c0)
            nisa.nc_matmul(dst=s_ps[:r, c0:c0 + cw], stationary=qT[:, q0:q0 + r],
                           moving=kT[:, b0 + c0:b0 + c0 + cw])
        if causal and b0 + bw > q0:
            # the block holds the diagonal: keys q0.. (local column q0 - b0) get the triangular mask
            lo = q0 - b0
            w = bw - lo
            nisa.tensor_tensor(dst=s_ps[:r, lo:bw], data1=s_ps[:r, lo:bw], data2=mask[:r, :w], op=nl.add)
        # running max, kept negated so it is the exp bias directly
        bmax = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="blk_negmax")
        nisa.tensor_reduce(dst=bmax[:r], op=nl.maximum, data=s_ps[:r, :bw], axis=1, negate=True)
        if nmax is None:
            new_max = bmax
        else:
            new_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="negmax")
            nisa.tensor_tensor(dst=new_max[:r], data1=nmax[:r], data2=bmax[:r], op=nl.minimum)
        p_sb = nl.ndarray((P, KEY_BLOCK), dtype=dtype, buffer=nl.sbuf, name="p")
        bsum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="blk_sum")
        nisa.activation(dst=p_sb[:r, :bw], op=nl.exp, data=s_ps[:r, :bw], bias=new_max[:r],
                        reduce_op=nl.add, reduce_res=bsum[:r])
        pv = pv_block(p_sb, r, bw, v_sb, b0, d, dtype)
        if nmax is None:
            rsum = bsum
            o_acc = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf, name="o_acc")
            nisa.tensor_copy(dst=o_acc[:r], src=pv[:r])
        else:
            # alpha = exp(old_max - new_max) rescales what earlier blocks accumulated
            alpha = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="alpha")
            nisa.activation(dst=alpha[:r], op=nl.exp, data=nmax[:r], scale=-1.0, bias=new_max[:r])
            new_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="row_sum")
            nisa.tensor_scalar(dst=new_sum[:r], data=rsum[:r], op0=nl.multiply, operand0=alpha[:r],
                               op1=nl.add, operand1=bsum[:r])
            scaled = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf, name="o_scaled")
            nisa.tensor_scalar(dst=scaled[:r], data=o_acc[:r], op0=nl.multiply, operand0=alpha[:r])
            o_new = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf, name="o_acc")
            nisa.tensor_tensor(dst=o_new[:r], data1=scaled[:r], data2=pv[:r], op=nl.add)
            rsum, o_acc = new_sum, o_new
        nmax = new_max
    return o_acc, rsum, nmax


def pv_block(p_sb, r, bw, v_sb, b0, d, dtype):
    """P [r, bw] (SBUF) @ V[b0:b0+bw] -> PSUM [r, D]: P is transposed 128 keys at a time on the Tensor
    Engine (four per PSUM bank), copied to SBUF (alternating Vector/Scalar engines to balance them), and
    multiplied with V accumulating in PSUM."""
    pv = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum, name="pv_psum")
    for g0 in range(0, bw, BANK):
        gw = min(BANK, bw - g0)
        pT_ps = nl.ndarray((P, BANK // P, P), dtype=nl.float32, buffer=nl.psum, name="pT_psum")
        kts = row_tiles(gw)
        for i, (s, kc) in enumerate(kts):
            nisa.nc_transpose(dst=pT_ps[:kc, i, :r], data=p_sb[:r, g0 + s:g0 + s + kc])
        pT = nl.ndarray((P, BANK // P, P), dtype=dtype, buffer=nl.sbuf, name="pT")
        full = sum(1 for _, kc in kts if kc == P)
        eng = nisa.vector_engine if (b0 + g0) // BANK % 2 == 0 else nisa.scalar_engine
        if full:
            nisa.tensor_copy(dst=pT[:, :full, :r], src=pT_ps[:, :full, :r], engine=eng)
        if full < len(kts):
            kc = kts[-1][1]
            nisa.tensor_copy(dst=pT[:kc, full, :r], src=pT_ps[:kc, full, :r], engine=eng)
        for i, (s, kc) in enumerate(kts):
            key_tile = (b0 + g0 + s) // P
            nisa.nc_matmul(dst=pv[:r], stationary=pT[:kc, i, :r], moving=v_sb[:kc, key_tile, :])
    return pv


@nki.jit
def flash_fwd_kernel(q, k, v, causal, scale):
    """Flash attention forward. q (B, Hq, Sq, D), k/v (B, Hkv, Sk, D) bf16 or fp32 (HBM), Hq % Hkv == 0,
    D <= 128; causal masks key j > query i (top-left aligned, as torch's is_causal). Returns
    out (B, Hq, Sq, D) in q's dtype and lse (B, Hq, Sq) fp32."""
    bsz, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    dtype = q.dtype
    out = nl.ndarray((bsz, hq, sq, d), dtype=dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((bsz, hq, sq), dtype=nl.float32, buffer=nl.shared_hbm)
    mask = causal_mask() if causal else None
    for b in nl.affine_range(bsz):
        for hk in nl.affine_range(hkv):
            k_sb = load_rows(k[b, hk], sk, dtype, "k")
            v_sb = load_rows(v[b, hk], sk, dtype, "v")
            kT = transpose_rows(k_sb, sk, dtype, name="kT")
            for g in nl.affine_range(group):
                h = hk * group + g
                q_sb = load_rows(q[b, h], sq, dtype, "q")
                qT = transpose_rows(q_sb, sq, dtype, scale=scale, name="qT")
                for q0, r in row_tiles(sq):
                    o_acc, rsum, nmax = attend_tile(qT, q0, r, kT, v_sb, sk, causal, mask, dtype)
                    inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="inv_sum")
                    nisa.reciprocal(dst=inv[:r], data=rsum[:r])
                    o_sb = nl.ndarray((P, d), dtype=dtype, buffer=nl.sbuf, name="o")
                    nisa.tensor_scalar(dst=o_sb[:r], data=o_acc[:r], op0=nl.multiply, operand0=inv[:r])
                    nisa.dma_copy(dst=out[b, h, q0:q0 + r, :], src=o_sb[:r])
                    # lse = max + log(sum) = log(sum) - neg_max
                    lse_sb = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="lse")
                    nisa.activation(dst=lse_sb[:r], op=nl.log, data=rsum[:r])
                    nisa.tensor_tensor(dst=lse_sb[:r], data1=lse_sb[:r], data2=nmax[:r], op=nl.subtract)
                    nisa.dma_copy(dst=lse[b, h, q0:q0 + r], src=lse_sb[:r])
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
