"""NKI kernels of neuron/vit-block: one transformers ViTLayer (pre-norm) fused into one kernel.

    h1  = x + o_proj(attention(q_proj(ln1(x)), k_proj(ln1(x)), v_proj(ln1(x))))
    out = h1 + fc2(gelu(fc1(ln2(h1))))

Per image (S tokens) everything stays on chip: LayerNorm on row tiles; ln1(x)^T built with Tensor Engine
transposes; Q^T and K^T produced transposed (features on partitions: two 64-dim heads per 128-partition
tile, bias fused in the PSUM evacuation), V row-major; per head and 128-query tile the scores stay in
PSUM, softmax reads them there (max on the Vector Engine, exp with the 1/sqrt(d) scale and a fused row
sum on the Scalar Engine), P^T comes from Tensor Engine transposes, P V accumulates in PSUM and is
normalised by 1/sum on the way out; the output projection adds bias and residual during its PSUM
evacuation; the MLP is the fused gelu-mlp stage. With ``resident`` every weight is transposed once and
stays in SBUF across the batch; otherwise each is loaded just before its stage (large or fp32 weights).
"""
import nki
import nki.isa as nisa
import nki.language as nl

from kernels.library.gelu_mlp.nki_kernels import linear_rows, linear_t, load_linear, mlp_block, transposed_rows
from kernels.library.layernorm.nki_kernels import load_row_vector, normalize_tile
from kernels.library.matmul.nki_kernels import (TILE_K, TILE_M, TILE_N, _cdiv, build_a_transposed, k_slices,
                                                plain_tiles, transpose_into)


def load_weights(params, d, rows):
    """SBUF copies of the block's weights: W^T tiles and bias columns/rows (see load_linear)."""
    (ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b) = params
    hidden = fc1_w.shape[0]
    return {
        "ln1": (load_row_vector(ln1_w, rows), load_row_vector(ln1_b, rows)),
        "ln2": (load_row_vector(ln2_w, rows), load_row_vector(ln2_b, rows)),
        "q": load_linear(q_w, q_b), "k": load_linear(k_w, k_b),
        "v": build_a_transposed(v_w, 0, d, k_slices(0, d, 1)), "v_b": load_row_vector(v_b, rows),
        "o": build_a_transposed(o_w, 0, d, k_slices(0, d, 1)), "o_b": load_row_vector(o_b, rows),
        "fc1": load_linear(fc1_w, fc1_b),
        "fc2": build_a_transposed(fc2_w, 0, d, k_slices(0, hidden, 1)), "fc2_b": load_row_vector(fc2_b, rows),
    }


class _Lazy:
    """Weights loaded on first use inside one image's pass (non-resident mode): each lives only from its
    load to its last use, so at most one stage's weights occupy SBUF at a time."""

    def __init__(self, params, d, rows):
        self.params, self.d, self.rows = params, d, rows

    def __getitem__(self, key):
        (ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w,
         fc2_b) = self.params
        d, rows = self.d, self.rows
        loaders = {
            "ln1": lambda: (load_row_vector(ln1_w, rows), load_row_vector(ln1_b, rows)),
            "ln2": lambda: (load_row_vector(ln2_w, rows), load_row_vector(ln2_b, rows)),
            "q": lambda: load_linear(q_w, q_b), "k": lambda: load_linear(k_w, k_b),
            "v": lambda: build_a_transposed(v_w, 0, d, k_slices(0, d, 1)),
            "v_b": lambda: load_row_vector(v_b, rows),
            "o": lambda: build_a_transposed(o_w, 0, d, k_slices(0, d, 1)),
            "o_b": lambda: load_row_vector(o_b, rows),
            "fc1": lambda: load_linear(fc1_w, fc1_b),
            "fc2": lambda: build_a_transposed(fc2_w, 0, d, k_slices(0, fc2_w.shape[1], 1)),
            "fc2_b": lambda: load_row_vector(fc2_b, rows),
        }
        return loaders[key]()


def attention_rows(q_t, k_t, v_rows, s, d, heads, scale, dtype):
    """Multi-head attention output, row-major: [(tile [rows, d] of ``dtype``, rows)] per 128 queries
.
    q_t, k_t: [128, n_d_tiles, s] (feature f on partition f % 128 of tile f // 128); v_rows: row tiles
    [(tile [rows, d], rows)] of V (keys on partitions)."""
    dh = d // heads
    n_kt = _cdiv(s, TILE_K)
    outs = []
    for i in range(_cdiv(s, TILE_M)):
        qw = min(TILE_M, s - i * TILE_M)
        o = nl.ndarray((qw, d), dtype=dtype, buffer=nl.sbuf)
        for h in range(heads):
            t, p0 = (h * dh) // TILE_K, (h * dh) % TILE_K
            chunks = [(c0, min(TILE_N, s - c0)) for c0 in range(0, s, TILE_N)]
            # scores [qw, s] stay in PSUM (one bank per 512 keys); softmax reads them there
            maxes = nl.ndarray((qw, len(chunks)), dtype=nl.float32, buffer=nl.sbuf)
            scores = []
            for c, (c0, cw) in enumerate(chunks):
                sc = nl.ndarray((qw, cw), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=sc, stationary=q_t[p0:p0 + dh, t, i * TILE_M:i * TILE_M + qw],
                               moving=k_t[p0:p0 + dh, t, c0:c0 + cw])
                nisa.tensor_reduce(dst=maxes[:, c:c + 1], op=nl.maximum, data=sc, axis=1)
                scores.append(sc)
            neg_max = nl.ndarray((qw, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=maxes, axis=1, negate=True)
            nisa.tensor_scalar(dst=neg_max, data=neg_max, op0=nl.multiply, operand0=scale)
            p = nl.ndarray((qw, s), dtype=dtype, buffer=nl.sbuf)
            sums = nl.ndarray((qw, len(chunks)), dtype=nl.float32, buffer=nl.sbuf)
            for c, (c0, cw) in enumerate(chunks):
                nisa.activation(dst=p[:, c0:c0 + cw], op=nl.exp, data=scores[c], scale=scale, bias=neg_max,
                                reduce_op=nl.add, reduce_res=sums[:, c:c + 1],
                                reduce_cmd=nisa.reduce_cmd.reset_reduce)
            inv = nl.ndarray((qw, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=inv, op=nl.add, data=sums, axis=1)
            nisa.reciprocal(dst=inv, data=inv)
            p_t = nl.ndarray((TILE_K, n_kt, qw), dtype=dtype, buffer=nl.sbuf)
            transpose_into(p_t, p, qw, 0, plain_tiles(s), h)
            acc = nl.ndarray((qw, dh), dtype=nl.float32, buffer=nl.psum)
            for kt in range(n_kt):
                kw = min(TILE_K, s - kt * TILE_K)
                v_tile, _ = v_rows[kt]
                nisa.nc_matmul(dst=acc, stationary=p_t[:kw, kt, :qw], moving=v_tile[:kw, h * dh:(h + 1) * dh])
            nisa.tensor_scalar(dst=o[:, h * dh:(h + 1) * dh], data=acc, op0=nl.multiply, operand0=inv)
        outs.append((o, qw))
    return outs


def _added(a, b, rows, d):
    """A new fp32 SBUF tile a[:rows] + b[:rows] ([rows, d]), on GpSimd (bias + residual, off the busy
    Vector Engine)."""
    out = nl.ndarray((rows, d), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=out, data1=a[:rows], data2=b[:rows], op=nl.add, engine=nisa.gpsimd_engine)
    return out


def vit_block_image(x, out, b, w, s, d, heads, hidden, eps, scale):
    """The fused block for image b of x [B, S, D] into out [B, S, D]; ``w`` gives SBUF weights by name.
    A generator: it yields between stages so the caller can interleave the stages of several images in
    program order; the in-order engine queues then overlap one image's softmax and LayerNorm (Vector,
    Scalar) with another image's matmuls (Tensor)."""
    dt = x.dtype
    x_rows, xn_rows = [], []
    ln1_w, ln1_b = w["ln1"]
    for i in range(_cdiv(s, TILE_M)):
        rows = min(TILE_M, s - i * TILE_M)
        xt = nl.ndarray((rows, d), dtype=dt, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[b, i * TILE_M:i * TILE_M + rows, :])
        x_rows.append(xt)
        xn_rows.append((normalize_tile(xt, rows, eps, ln1_w, ln1_b, dt), rows))
    xn_t = transposed_rows(xn_rows, d, dt)
    yield
    q_t = linear_t(xn_t, d, s, *w["q"], d, nl.copy, dt)
    k_t = linear_t(xn_t, d, s, *w["k"], d, nl.copy, dt)
    v_b = w["v_b"]
    v_rows = linear_rows(xn_t, d, s, w["v"], d, lambda i, rows: v_b, dt)
    yield
    attn = attention_rows(q_t, k_t, v_rows, s, d, heads, scale, dt)
    attn_t = transposed_rows(attn, d, dt)
    yield
    o_b = w["o_b"]
    h1 = linear_rows(attn_t, d, s, w["o"], d, lambda i, rows: _added(x_rows[i], o_b, rows, d), nl.float32)
    ln2_w, ln2_b = w["ln2"]
    hn = [(normalize_tile(t, rows, eps, ln2_w, ln2_b, dt), rows) for t, rows in h1]
    hn_t = transposed_rows(hn, d, dt)
    yield
    fc2_b = w["fc2_b"]
    outs = mlp_block(hn_t, d, s, w["fc1"], None, w["fc2"], hidden,
                     lambda i, rows: _added(h1[i][0], fc2_b, rows, d), dt)
    for i, (o, rows) in enumerate(outs):
        nisa.dma_copy(dst=out[b, i * TILE_M:i * TILE_M + rows, :], src=o)


@nki.jit
def vit_block_kernel(x, ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b,
                     fc2_w, fc2_b, heads, eps, resident=True, interleave=2):
    """One ViTLayer. x [B, S, D] (bf16/fp32, HBM); Linear weights in torch layout ([out, in]): q/k/v/o
    [D, D], fc1 [H, D], fc2 [D, H]; biases and LayerNorm parameters 1-D; all in x's dtype.
    Returns [B, S, D] in x's dtype. S <= 2048 (scores of one query tile fit 4 PSUM banks).
    ``interleave`` images have their stages interleaved in program order (software pipelining)."""
    n_img, s, d = x.shape
    hidden = fc1_w.shape[0]
    out = nl.ndarray((n_img, s, d), dtype=x.dtype, buffer=nl.shared_hbm)
    params = (ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b)
    rows = min(TILE_M, s)
    w = load_weights(params, d, rows) if resident else _Lazy(params, d, rows)
    scale = float(d // heads) ** -0.5
    for b0 in nl.affine_range(_cdiv(n_img, interleave)):
        passes = [vit_block_image(x, out, b, w, s, d, heads, hidden, eps, scale)
                  for b in range(b0 * interleave, min(n_img, (b0 + 1) * interleave))]
        while passes:  # round-robin over the images' stages
            passes = [p for p in passes if next(p, StopIteration) is not StopIteration]
    return out


def plan(d, hidden, itemsize, sbuf_bytes=192 * 1024):
    """Whether vit_block_kernel keeps all weights resident: their transposed tiles and broadcast bias
    rows must take at most ~70% of a trn1 SBUF partition, leaving room for one image's activations."""
    weight_bytes = (4 * _cdiv(d, TILE_K) * d + _cdiv(d, TILE_K) * hidden + _cdiv(hidden, TILE_K) * d) * itemsize
    weight_bytes += 7 * d * 4
    return weight_bytes <= int(sbuf_bytes * 0.7)
