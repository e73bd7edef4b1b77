"""Unfused ViT-block baseline: the same math as vit_block as separate NKI kernels, each reading its inputs
from HBM and writing its result back (as an eager framework would run it). Used to measure the fused
kernel's speedup on the cost model; head split/merge reshapes between kernels are host-side and not
counted (which flatters the baseline).
"""
from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.common import issued_ahead
from nkihub.kernels.library.gelu_mlp.nki_kernels import ACTIVATIONS, linear_rows, load_rows, transposed_rows
from nkihub.kernels.library.layernorm.nki_kernels import TILES_AHEAD, layer_norm_kernel, load_row_vector
from nkihub.kernels.library.matmul.nki_kernels import TILE_M, TILE_N, _cdiv, a_row_loads, build_a_transposed, k_slices
from nkihub.kernels.library.softmax.nki_kernels import softmax_kernel


@nki.jit
def linear_kernel(x, w, b):
    """y = x @ w^T + b: x [R, Din], w [Dout, Din] (torch Linear), b [Dout] -> [R, Dout] in x's dtype."""
    r, d_in = x.shape
    d_out = w.shape[0]
    out = nl.ndarray((r, d_out), dtype=x.dtype, buffer=nl.shared_hbm)
    w_t = build_a_transposed(w, 0, d_out, k_slices(0, d_in, 1))
    bias = load_row_vector(b, min(TILE_M, r))

    def loaded():    # a block's row loads, traced when pulled (issued_ahead: before the previous block's stores)
        for blk in range(_cdiv(r, TILE_N)):
            tokens = min(TILE_N, r - blk * TILE_N)
            yield blk * TILE_N, tokens, load_rows(x, blk * TILE_N, tokens, d_in)
    for r0, tokens, x_rows in issued_ahead(loaded(), 1):
        x_t = transposed_rows(x_rows, d_in, x.dtype)
        for i, (o, rows) in enumerate(linear_rows(x_t, d_in, tokens, w_t, d_out, lambda i, rows: bias, x.dtype)):
            nisa.dma_copy(dst=out[r0 + i * TILE_M:r0 + i * TILE_M + rows, :], src=o)
    return out


@nki.jit
def elementwise_kernel(a, b, op):
    """``op`` = a GELU of gelu_mlp's ACTIVATIONS (of a; b ignored) or "add" (a + b), row tiles of [R, F] ->
    [R, F] in a's dtype."""
    r, f = a.shape
    out = nl.ndarray((r, f), dtype=a.dtype, buffer=nl.shared_hbm)

    def loaded():    # traced when pulled: issued_ahead writes the next tiles' loads before this one's store
        for t in range(_cdiv(r, TILE_M)):
            rows = min(TILE_M, r - t * TILE_M)
            (at, _), = load_rows(a, t * TILE_M, rows, f)
            yield t, rows, at, None if op in ACTIVATIONS else load_rows(b, t * TILE_M, rows, f)[0][0]
    for t, rows, at, bt in issued_ahead(loaded(), TILES_AHEAD):
        o = nl.ndarray((rows, f), dtype=a.dtype, buffer=nl.sbuf)
        if op in ACTIVATIONS:
            nisa.activation(dst=o, op=ACTIVATIONS[op], data=at)
        else:
            nisa.tensor_tensor(dst=o, data1=at, data2=bt, op=nl.add)
        nisa.dma_copy(dst=out[t * TILE_M:t * TILE_M + rows, :], src=o)
    return out


@nki.jit
def batched_matmul_kernel(a, b, transpose_b, scale):
    """out[g] = scale * a[g] @ (b[g]^T if transpose_b else b[g]); a [G, M, K], b [G, N, K] or [G, K, N];
    N <= 512 (attention scores and P @ V of one head). Result in a's dtype."""
    g_n, m, k = a.shape
    n = b.shape[1] if transpose_b else b.shape[2]
    out = nl.ndarray((g_n, m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    ks = k_slices(0, k, 1)

    def loaded():    # one head's loads, traced when pulled (issued_ahead: before the previous head's stores)
        for g in range(g_n):
            a_rows = list(a_row_loads(a[g], 0, m, ks))
            if transpose_b:
                b_in = list(a_row_loads(b[g], 0, n, ks))
            else:
                b_in = nl.ndarray((128, _cdiv(k, 128), n), dtype=b.dtype, buffer=nl.sbuf)
                for kt in range(_cdiv(k, 128)):
                    kw = min(128, k - kt * 128)
                    nisa.dma_copy(dst=b_in[:kw, kt, :], src=b[g, kt * 128:kt * 128 + kw, :])
            yield g, a_rows, b_in
    for g, a_rows, b_in in issued_ahead(loaded(), TILES_AHEAD):
        a_t = build_a_transposed(a[g], 0, m, ks, a_rows)
        b_op = build_a_transposed(b[g], 0, n, ks, b_in) if transpose_b else b_in      # [128, k tiles, n]
        for i in range(_cdiv(m, TILE_M)):
            rows = min(TILE_M, m - i * TILE_M)
            ps = nl.ndarray((rows, n), dtype=nl.float32, buffer=nl.psum)
            for kt in range(_cdiv(k, 128)):
                kw = min(128, k - kt * 128)
                nisa.nc_matmul(dst=ps, stationary=a_t[:kw, kt, i * TILE_M:i * TILE_M + rows], moving=b_op[:kw, kt, :])
            o = nl.ndarray((rows, n), dtype=a.dtype, buffer=nl.sbuf)
            nisa.activation(dst=o, op=nl.copy, data=ps, scale=scale)
            nisa.dma_copy(dst=out[g, i * TILE_M:i * TILE_M + rows, :], src=o)
    return out


def vit_block_unfused(x, params, num_heads, eps, call=None, activation="gelu", attend=None):
    """The ViT block as 13 kernel launches. x [B, S, D] torch; params in vit_block.PARAM_NAMES order;
    ``activation`` the MLP's GELU (a key of gelu_mlp's ACTIVATIONS). ``attend(call, q, k, v, scale)``
    replaces the attention launches (q, k, v [B*H, S, dh] -> [B*H, S, dh]; the default's batched matmuls
    take S <= 512).
    ``call(kernel, *args)`` runs one launch (default: run it on the simulator); the benchmark passes a
    callable that also profiles it. Returns [B, S, D] in x's dtype."""
    call = call or (lambda kernel, *args: kernel(*args))
    (ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b) = params
    n_img, s, d = x.shape
    dh = d // num_heads
    rows = x.reshape(-1, d).contiguous()
    h = call(layer_norm_kernel, rows, ln1_w, ln1_b, float(eps))
    q, k, v = (call(linear_kernel, h, w, b_) for w, b_ in ((q_w, q_b), (k_w, k_b), (v_w, v_b)))

    def heads(t):
        return t.reshape(n_img, s, num_heads, dh).transpose(1, 2).reshape(-1, s, dh).contiguous()
    if attend is not None:
        a = attend(call, *(heads(t).unsqueeze(0) for t in (q, k, v)), float(dh) ** -0.5)
    else:
        scores = call(batched_matmul_kernel, heads(q), heads(k), True, float(dh) ** -0.5)
        p = call(softmax_kernel, scores.reshape(-1, s)).reshape(-1, s, s)
        a = call(batched_matmul_kernel, p, heads(v), False, 1.0)
    a = a.reshape(n_img, num_heads, s, dh).transpose(1, 2).reshape(-1, d).contiguous()
    h1 = call(elementwise_kernel, call(linear_kernel, a, o_w, o_b), rows, "add")
    m = call(linear_kernel, call(layer_norm_kernel, h1, ln2_w, ln2_b, float(eps)), fc1_w, fc1_b)
    m = call(linear_kernel, call(elementwise_kernel, m, m, activation), fc2_w, fc2_b)
    return call(elementwise_kernel, m, h1, "add").reshape(x.shape)


__all__ = ["vit_block_unfused", "linear_kernel", "elementwise_kernel", "batched_matmul_kernel"]
