"""NKI kernels of neuron/gelu-mlp: y = GELU(x @ W1^T + b1) @ W2^T + b2 fused on chip.

Both weights are turned into W^T tiles once (Tensor Engine transposes) and stay in SBUF. Per block of
up to 512 tokens, x^T is built on chip; the first matmul produces the hidden activations already
transposed (h^T [hidden, tokens], hidden on partitions), so b1 is a per-partition bias and the exact
(erf) GELU is fused into the PSUM evacuation on the Scalar Engine; h^T is then directly the stationary
operand of the second matmul. The hidden activations never leave the chip.
"""
import nki
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.layernorm.nki_kernels import load_row_vector
from nkihub.kernels.library.matmul.nki_kernels import (TILE_K, TILE_M, TILE_N, _cdiv, build_a_transposed, k_slices,
                                                plain_tiles, transpose_into)


# the GELUs of vision transformers, by the name the kernels take: exact (erf; ViT, DeiT, DINOv2), the tanh
# approximation (SigLIP's gelu_pytorch_tanh) and x * sigmoid(1.702 x) (CLIP's quick_gelu)
ACTIVATIONS = {"gelu": nl.gelu, "gelu_tanh": nl.gelu_apprx_tanh, "quick_gelu": nl.gelu_apprx_sigmoid}


def load_linear(w, b):
    """A torch Linear's weight w [out, in] and bias b [out] as W^T [128, n_in_tiles, out] (SBUF, w's dtype)
    and a per-partition bias [128, n_out_tiles] (fp32; column t holds b[t*128:(t+1)*128])."""
    out_f, in_f = w.shape
    w_t = build_a_transposed(w, 0, out_f, k_slices(0, in_f, 1))
    n_out = _cdiv(out_f, TILE_K)
    b_cols = nl.ndarray((TILE_K, n_out), dtype=nl.float32, buffer=nl.sbuf)
    for t in range(n_out):
        hw = min(TILE_K, out_f - t * TILE_K)
        nisa.dma_copy(dst=b_cols[:hw, t:t + 1], src=b[t * TILE_K:t * TILE_K + hw].reshape((hw, 1)))
    return w_t, b_cols


def load_rows(x, r0, tokens, f):
    """Rows r0 .. r0+tokens of HBM x [R, f] as SBUF tiles [(tile [rows, f], rows)], 128 rows per tile."""
    tiles = []
    for i in range(_cdiv(tokens, TILE_M)):
        rows = min(TILE_M, tokens - i * TILE_M)
        t = nl.ndarray((rows, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r0 + i * TILE_M:r0 + i * TILE_M + rows, :])
        tiles.append((t, rows))
    return tiles


def transposed_rows(row_tiles, f, dtype):
    """x^T [128, n_f_tiles, tokens] (SBUF, ``dtype``) from SBUF row tiles [(tile, rows)], each [rows, f]."""
    total = sum(r for _, r in row_tiles)
    x_t = nl.ndarray((TILE_K, _cdiv(f, TILE_K), total), dtype=dtype, buffer=nl.sbuf)
    col, counter = 0, 0
    for tile, rows in row_tiles:
        counter = transpose_into(x_t, tile, rows, col, plain_tiles(f), counter)
        col += rows
    return x_t


def linear_t_units(x_t, in_f, tokens, w_t, b_cols, out_f, act, out_t, scale=1.0, out_tiles=None):
    """out_t = act(scale * (W x^T) + b_cols) as [128, n_out_tiles, tokens], from x^T (in_f features) and
    W^T (tiles [128, n_in_tiles, *] or lists of k-tiles, see :func:`ktile`; ``out_t`` likewise) and b_cols
    [128, n_out_tiles] fp32 (already multiplied by ``scale``). ``out_tiles`` [(first feature, rows)] says
    which output features each out tile holds on its first partitions (default: 128 in a row). Tokens go
    through the Tensor Engine 512 at a time (the moving free size); bias and activation are fused into the
    PSUM evacuation on the Scalar Engine. A generator that yields after each PSUM group so a caller can
    interleave other work."""
    if out_tiles is None:
        out_tiles = [(t * TILE_K, min(TILE_K, out_f - t * TILE_K)) for t in range(_cdiv(out_f, TILE_K))]
    for c0 in range(0, tokens, TILE_N):
        cw = min(TILE_N, tokens - c0)
        for t, (f0, hw) in enumerate(out_tiles):
            ps = nl.ndarray((hw, cw), dtype=nl.float32, buffer=nl.psum)
            for kd in range(_cdiv(in_f, TILE_K)):
                kw = min(TILE_K, in_f - kd * TILE_K)
                nisa.nc_matmul(dst=ps, stationary=ktile(w_t, kd)[:kw, f0:f0 + hw],
                               moving=ktile(x_t, kd)[:kw, c0:c0 + cw])
            nisa.activation(dst=ktile(out_t, t)[:hw, c0:c0 + cw], op=act, data=ps, bias=b_cols[:hw, t:t + 1],
                            scale=scale)
            yield


def linear_t(x_t, in_f, tokens, w_t, b_cols, out_f, act, dtype):
    """:func:`linear_t_units` run to the end into a new SBUF tile out^T [128, n_out_tiles, tokens]."""
    out_t = nl.ndarray((TILE_K, _cdiv(out_f, TILE_K), tokens), dtype=dtype, buffer=nl.sbuf)
    for _ in linear_t_units(x_t, in_f, tokens, w_t, b_cols, out_f, act, out_t):
        pass
    return out_t


def ktile(x_t, kd):
    """Feature tile kd [128, tokens] of a transposed activation: a tile [128, n_tiles, tokens] or a list of
    [128, tokens] tiles (separate tiles are easier to place in a fragmented SBUF)."""
    return x_t[kd] if isinstance(x_t, list) else x_t[:, kd, :]


def linear_rows_units(x_t, in_f, tokens, w_t, out_f, add_tiles, out_dtype, outs):
    """Row-major out [tokens, out_f] = x @ W^T + add, from x^T and W^T ([128, n_in_tiles, *] tiles or lists
    of k-tiles, see :func:`ktile`), appended to ``outs`` as (new SBUF tile [rows, out_f], rows) per
    128-token tile; a generator that yields after each PSUM group so a caller can interleave other work.
    ``add_tiles(i, rows)`` gives the fp32 tile [rows, out_f] added during the PSUM evacuation (bias
    broadcast, or bias plus residual)."""
    for i in range(_cdiv(tokens, TILE_M)):
        rows = min(TILE_M, tokens - i * TILE_M)
        o = nl.ndarray((rows, out_f), dtype=out_dtype, buffer=nl.sbuf)
        extra = add_tiles(i, rows)
        for n0 in range(0, out_f, TILE_N):
            nw = min(TILE_N, out_f - n0)
            ps = nl.ndarray((rows, nw), dtype=nl.float32, buffer=nl.psum)
            for kd in range(_cdiv(in_f, TILE_K)):
                kw = min(TILE_K, in_f - kd * TILE_K)
                nisa.nc_matmul(dst=ps, stationary=ktile(x_t, kd)[:kw, i * TILE_M:i * TILE_M + rows],
                               moving=ktile(w_t, kd)[:kw, n0:n0 + nw])
            nisa.tensor_tensor(dst=o[:, n0:n0 + nw], data1=ps, data2=extra[:rows, n0:n0 + nw], op=nl.add)
            yield
        outs.append((o, rows))


def linear_rows(x_t, in_f, tokens, w_t, out_f, add_tiles, out_dtype):
    """:func:`linear_rows_units` run to the end: [(tile [rows, out_f], rows)] per 128-token tile."""
    outs = []
    for _ in linear_rows_units(x_t, in_f, tokens, w_t, out_f, add_tiles, out_dtype, outs):
        pass
    return outs


def mlp_block(x_t, d, tokens, w1, b1, w2, hidden, add_tiles, out_dtype, act=nl.gelu):
    """GELU MLP (``act``, one of ACTIVATIONS' values) of one token block: x^T [128, n_d_tiles, tokens <= 512] -> [(out tile [rows, d], rows)].
    ``w1`` is (W1^T, b1 columns) from load_linear and ``w2`` is W2^T, or HBM weights (fc1_weight, fc1_bias)
    and fc2_weight to load here (weights that do not stay resident: each is live only for its matmul)."""
    w1_t, b1_cols = w1 if isinstance(w1, tuple) else load_linear(w1, b1)
    h_t = linear_t(x_t, d, tokens, w1_t, b1_cols, hidden, act, x_t.dtype)
    w2_t = w2 if w2.buffer == "sbuf" else build_a_transposed(w2, 0, d, k_slices(0, hidden, 1))
    return linear_rows(h_t, hidden, tokens, w2_t, d, add_tiles, out_dtype)


@nki.jit
def gelu_mlp_kernel(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias, token_block=512, resident=True,
                    activation="gelu"):
    """x [R, D] -> GELU(x W1^T + b1) W2^T + b2, [R, D] in x's dtype; ``activation`` a key of ACTIVATIONS. fc1_weight [H, D], fc1_bias [H],
    fc2_weight [D, H], fc2_bias [D] (torch Linear layout, x's dtype). Tokens go in blocks of
    ``token_block`` (<= 512, the moving free size of the first matmul). With ``resident`` the weights are
    transposed once and stay in SBUF; otherwise they are reloaded per token block (weights too large
    to keep both on chip)."""
    r, d = x.shape
    hidden = fc1_weight.shape[0]
    out = nl.ndarray((r, d), dtype=x.dtype, buffer=nl.shared_hbm)
    w1, w2 = (fc1_weight, fc2_weight)
    if resident:
        w1 = load_linear(fc1_weight, fc1_bias)
        w2 = build_a_transposed(fc2_weight, 0, d, k_slices(0, hidden, 1))
    b2 = load_row_vector(fc2_bias, min(TILE_M, r))
    for blk in nl.affine_range(_cdiv(r, token_block)):
        r0 = blk * token_block
        tokens = min(token_block, r - r0)
        x_t = transposed_rows(load_rows(x, r0, tokens, d), d, x.dtype)
        outs = mlp_block(x_t, d, tokens, w1, fc1_bias, w2, hidden, lambda i, rows: b2, x.dtype,
                         ACTIVATIONS[activation])
        for i, (o, rows) in enumerate(outs):
            nisa.dma_copy(dst=out[r0 + i * TILE_M:r0 + i * TILE_M + rows, :], src=o)
    return out


def plan(d, hidden, itemsize, sbuf_bytes=192 * 1024):
    """(token_block, resident) for gelu_mlp_kernel: keep both weights resident when their transposed
    tiles take at most half of a trn1 SBUF partition; smaller token blocks for fp32."""
    weight_bytes = (_cdiv(d, TILE_K) * hidden + _cdiv(hidden, TILE_K) * d) * itemsize
    token_block = 512 if itemsize <= 2 else 256
    return token_block, weight_bytes <= sbuf_bytes // 2
