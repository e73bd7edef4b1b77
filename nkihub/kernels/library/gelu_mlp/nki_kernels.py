"""NKI kernels of neuron/gelu-mlp: y = GELU(x @ W1^T + b1) @ W2^T + b2 fused on chip.

Both weights are turned into W^T tiles once (Tensor Engine transposes) and stay in SBUF. Per block of
up to 512 tokens, x^T is built on chip; the first matmul produces the hidden activations already
transposed (h^T [hidden, tokens], hidden on partitions), so b1 is a per-partition bias and the exact
(erf) GELU is fused into the PSUM evacuation on the Scalar Engine; h^T is then directly the stationary
operand of the second matmul. The hidden activations never leave the chip. Weights too large to stay
resident are loaded per token block, and one whose W^T would take over a quarter of an SBUF partition
(fp32 at ViT-H widths: 200 KiB each) streams through in chunks of output features (StreamedT).
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
    return whole_t(w), bias_cols(b)


def whole_t(w):
    """W^T [128, n_in_tiles, out] (SBUF, w's dtype) of a torch Linear weight w [out, in] (HBM)."""
    return build_a_transposed(w, 0, w.shape[0], k_slices(0, w.shape[1], 1))


def bias_cols(b):
    """A bias b [out] (HBM) as per-partition columns [128, n_out_tiles] fp32 (column t holds
    b[t*128:(t+1)*128])."""
    out_f = b.shape[0]
    n_out = _cdiv(out_f, TILE_K)
    b_cols = nl.ndarray((TILE_K, n_out), dtype=nl.float32, buffer=nl.sbuf)
    for t in range(n_out):
        hw = min(TILE_K, out_f - t * TILE_K)
        nisa.dma_copy(dst=b_cols[:hw, t:t + 1], src=b[t * TILE_K:t * TILE_K + hw].reshape((hw, 1)))
    return b_cols


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
    W^T (tiles [128, n_in_tiles, *] or lists of k-tiles, see :func:`ktile`, or a :class:`StreamedT`;
    ``out_t`` tiles or lists) and b_cols [128, n_out_tiles] fp32 (already multiplied by ``scale``).
    ``out_tiles`` [(first feature, rows)] says
    which output features each out tile holds on its first partitions (default: 128 in a row). Tokens go
    through the Tensor Engine 512 at a time (the moving free size); bias and activation are fused into the
    PSUM evacuation on the Scalar Engine. A generator that yields after each PSUM group so a caller can
    interleave other work."""
    if out_tiles is None:
        out_tiles = [(t * TILE_K, min(TILE_K, out_f - t * TILE_K)) for t in range(_cdiv(out_f, TILE_K))]
    units = [(c0, t) for c0 in range(0, tokens, TILE_N) for t in range(len(out_tiles))]
    if isinstance(w_t, StreamedT):   # each weight chunk once: output features outer, tokens inner
        units.sort(key=lambda u: (u[1], u[0]))
    for c0, t in units:
        cw = min(TILE_N, tokens - c0)
        f0, hw = out_tiles[t]
        ps = nl.ndarray((hw, cw), dtype=nl.float32, buffer=nl.psum)
        for kd in range(_cdiv(in_f, TILE_K)):
            kw = min(TILE_K, in_f - kd * TILE_K)
            nisa.nc_matmul(dst=ps, stationary=wcols(w_t, kd, kw, f0, hw), moving=ktile(x_t, kd)[:kw, c0:c0 + cw])
        nisa.activation(dst=ktile(out_t, t)[:hw, c0:c0 + cw], op=act, data=ps, bias=b_cols[:hw, t:t + 1],
                        scale=scale)
        yield


def linear_t(x_t, in_f, tokens, w_t, b_cols, out_f, act, dtype):
    """:func:`linear_t_units` run to the end into a new SBUF tile out^T [128, n_out_tiles, tokens]."""
    out_t = nl.ndarray((TILE_K, _cdiv(out_f, TILE_K), tokens), dtype=dtype, buffer=nl.sbuf)
    for _ in linear_t_units(x_t, in_f, tokens, w_t, b_cols, out_f, act, out_t):
        pass
    return out_t


class StreamedT:
    """W^T of a torch Linear weight w [out, in] (HBM) too large to hold in SBUF at once: loaded and
    transposed in chunks of ``width`` output features (all input k-tiles of a chunk in one SBUF tile
    [128, n_in_tiles, width]) as the matmuls ask for them, so only one chunk is alive at a time.
    linear_t_units and linear_rows_units take it in place of W^T tiles and visit each chunk once."""

    def __init__(self, w, width):
        self.w, self.width = w, width
        self.out_f, self.in_f = w.shape
        self._chunk = None   # (first output feature, width, tile)

    @staticmethod
    def width_for(w, budget_bytes):
        """Output features per chunk of w [out, in]: the most (a multiple of 128, at most 512, at least
        128) whose k-tiles take at most ``budget_bytes`` per partition."""
        per_col = _cdiv(w.shape[1], TILE_K) * w.itemsize
        return max(TILE_K, min(TILE_N, budget_bytes // per_col // TILE_K * TILE_K))

    def cols(self, kd, kw, f0, fw):
        """k-tile kd [kw, fw] of W^T for output features f0..f0+fw (loading the chunk holding them)."""
        if self._chunk is None or not (self._chunk[0] <= f0 and f0 + fw <= self._chunk[0] + self._chunk[1]):
            nw = max(fw, min(self.width, self.out_f - f0))
            self._chunk = (f0, nw, build_a_transposed(self.w, f0, nw, k_slices(0, self.in_f, 1)))
        c0, _, tile = self._chunk
        return tile[:kw, kd, f0 - c0:f0 - c0 + fw]


def weight_or_streamed(w, budget_bytes, whole):
    """``whole(w)`` (W^T tiles held at once) when w's transposed k-tiles take at most ``budget_bytes`` per
    partition, else a :class:`StreamedT` of w in chunks of that budget."""
    if _cdiv(w.shape[1], TILE_K) * w.shape[0] * w.itemsize <= budget_bytes:
        return whole(w)
    return StreamedT(w, StreamedT.width_for(w, budget_bytes))


def wcols(w_t, kd, kw, f0, fw):
    """W^T rows of k-tile kd ([kw, fw], output features f0..f0+fw) from W^T tiles (see :func:`ktile`) or a
    :class:`StreamedT`."""
    if isinstance(w_t, StreamedT):
        return w_t.cols(kd, kw, f0, fw)
    return ktile(w_t, kd)[:kw, f0:f0 + fw]


def ktile(x_t, kd):
    """Feature tile kd [128, tokens] of a transposed activation: a tile [128, n_tiles, tokens] or a list of
    [128, tokens] tiles (separate tiles are easier to place in a fragmented SBUF)."""
    return x_t[kd] if isinstance(x_t, list) else x_t[:, kd, :]


def linear_rows_units(x_t, in_f, tokens, w_t, out_f, add_tiles, out_dtype, outs):
    """Row-major out [tokens, out_f] = x @ W^T + add, from x^T and W^T ([128, n_in_tiles, *] tiles or lists
    of k-tiles, see :func:`ktile`, or a :class:`StreamedT`), appended to ``outs`` as (new SBUF tile [rows, out_f], rows) per
    128-token tile; a generator that yields after each PSUM group so a caller can interleave other work.
    ``add_tiles(i, rows)`` gives the fp32 tile [rows, out_f] added during the PSUM evacuation (bias
    broadcast, or bias plus residual)."""
    row_tiles = [(i, min(TILE_M, tokens - i * TILE_M)) for i in range(_cdiv(tokens, TILE_M))]
    if isinstance(w_t, StreamedT):
        # each weight chunk once: output columns (of the chunk's width) outer, token tiles inner, so every
        # row tile's output and addend are alive across the chunks
        width = min(TILE_N, w_t.width)
        tiles = {i: (nl.ndarray((rows, out_f), dtype=out_dtype, buffer=nl.sbuf), add_tiles(i, rows))
                 for i, rows in row_tiles}
        units = [(n0, i, rows) for n0 in range(0, out_f, width) for i, rows in row_tiles]
    else:
        width, tiles, units = TILE_N, {}, [(n0, i, rows) for i, rows in row_tiles for n0 in range(0, out_f, TILE_N)]
    for n0, i, rows in units:
        if i not in tiles:
            tiles[i] = (nl.ndarray((rows, out_f), dtype=out_dtype, buffer=nl.sbuf), add_tiles(i, rows))
        o, extra = tiles[i]
        nw = min(width, out_f - n0)
        ps = nl.ndarray((rows, nw), dtype=nl.float32, buffer=nl.psum)
        for kd in range(_cdiv(in_f, TILE_K)):
            kw = min(TILE_K, in_f - kd * TILE_K)
            nisa.nc_matmul(dst=ps, stationary=ktile(x_t, kd)[:kw, i * TILE_M:i * TILE_M + rows],
                           moving=wcols(w_t, kd, kw, n0, nw))
        nisa.tensor_tensor(dst=o[:, n0:n0 + nw], data1=ps, data2=extra[:rows, n0:n0 + nw], op=nl.add)
        yield
        if n0 + nw >= out_f:
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
    # weights loaded here whose W^T would take over a quarter of a partition stream in chunks (StreamedT)
    budget = nl.tile_size.total_available_sbuf_size // 4
    w1_t, b1_cols = w1 if isinstance(w1, tuple) else (weight_or_streamed(w1, budget, whole_t), bias_cols(b1))
    h_t = linear_t(x_t, d, tokens, w1_t, b1_cols, hidden, act, x_t.dtype)
    w2_t = w2 if w2.buffer == "sbuf" else weight_or_streamed(w2, budget, whole_t)
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
