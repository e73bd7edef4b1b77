"""NKI kernels of neuron/vit-block: one transformers ViTLayer (pre-norm) fused into one kernel.

    h1  = x + o_proj(attention(q_proj(ln1(x)), k_proj(ln1(x)), v_proj(ln1(x))))
    out = h1 + fc2(gelu(fc1(ln2(h1))))

Per image (S tokens) everything stays on chip; the stages are in stages.py: LayerNorm on row tiles, Q^T
(pre-scaled by 1/sqrt(dh)) and K^T produced transposed, V row-major; attention per (128-query tile, head)
with scores in PSUM and the softmax on chip, software-pipelined over the steps; the output projection and
fc2 add bias and residual in their PSUM evacuation. The images form a software pipeline: image b's
attention (Vector/Scalar bound) is interleaved unit by unit in program order with image b-1's output
projection and MLP and image b+1's LayerNorm and projections (Tensor bound), so the in-order engine queues
overlap them. With ``resident`` every weight is loaded and transposed once, where image 0 first uses it
(its DMA runs ahead on free queues), and stays in SBUF across the batch as k-tile groups small enough for
a fragmented SBUF; otherwise each is loaded just before its stage (large or fp32 weights) and images run
one at a time, and a weight whose W^T would take over a quarter of an SBUF partition (fp32 fc1/fc2 at
ViT-L/H widths) streams through in chunks of output features (gelu_mlp's StreamedT).
"""
import nki
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.gelu_mlp.nki_kernels import ACTIVATIONS, weight_or_streamed
from nkihub.kernels.library.layernorm.nki_kernels import load_row_vector
from nkihub.kernels.library.matmul.nki_kernels import TILE_K, TILE_M, _cdiv, plain_tiles, transpose_into

from .ln_transposed import load_cols
from .stages import attention_stage, head_layout, post_stage, pre_stage


def weight_t(w, group_bytes=12288):
    """W^T of a torch Linear weight w [out, in] (HBM) as a list of [128, out] k-tile views (k-tile t holds
    input features t*128..t*128+127 on partitions), in w's dtype. The k-tiles live in separate SBUF tiles
    of at most ``group_bytes`` per partition (and at most 4 k-tiles, one PSUM bank of transposes), so a
    weight loaded mid-kernel fits in a fragmented SBUF."""
    out_f, in_f = w.shape
    per = max(1, min(4, group_bytes // (out_f * w.itemsize)))
    tiles = plain_tiles(in_f)
    groups = []
    for g0 in range(0, len(tiles), per):
        g = tiles[g0:g0 + per]
        groups.append((nl.ndarray((TILE_K, len(g), out_f), dtype=w.dtype, buffer=nl.sbuf),
                       [(j, kw, cols) for j, (_, kw, cols) in enumerate(g)]))
    for i in range(_cdiv(out_f, TILE_M)):
        mw = min(TILE_M, out_f - i * TILE_M)
        nat = nl.ndarray((mw, in_f), dtype=w.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=nat, src=w[i * TILE_M:i * TILE_M + mw, :])
        for k, (tile, g) in enumerate(groups):
            transpose_into(tile, nat, mw, i * TILE_M, g, i + k)
    return [tile[:, j, :] for tile, g in groups for j in range(len(g))]


STREAM_FRACTION = 4   # see _Weights


class _Weights:
    """SBUF weights by name (W^T tiles, bias columns/rows, LayerNorm columns), each loaded and transposed
    where the program first asks for it. ``resident``: kept for the rest of the kernel, so image 0 starts
    once its own weights are in (the later weights' DMAs have free queues and run ahead of their
    transposes); otherwise loaded again at every use and alive only until its last use in that pass, so
    at most one stage's weights occupy SBUF at a time."""

    def __init__(self, params, rows, resident, qk_tiles):
        self.params, self.rows, self.resident, self.cache = params, rows, resident, {}
        self.qk_tiles = qk_tiles    # the Q/K output tiles of stages.head_layout
        # a weight loaded per use whose W^T would take more than a quarter of a partition (fp32 at ViT-L/H
        # widths: fc1/fc2 alone outgrow trn1's SBUF) streams in chunks of output features
        self.budget = None if resident else nl.tile_size.total_available_sbuf_size // STREAM_FRACTION

    def _wt(self, w):
        return weight_t(w) if self.budget is None else weight_or_streamed(w, self.budget, weight_t)

    def __getitem__(self, key):
        if key not in self.cache or not self.resident:
            self.cache[key] = self._load(key)
        return self.cache[key]

    def _load(self, key):
        (ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w,
         fc2_b) = self.params
        rows = self.rows
        wt = self._wt
        loaders = {
            "ln1": lambda: (load_cols(ln1_w), load_cols(ln1_b)),
            "ln2": lambda: (load_cols(ln2_w), load_cols(ln2_b)),
            "q": lambda: (wt(q_w), load_cols(q_b, self.qk_tiles)),
            "k": lambda: (wt(k_w), load_cols(k_b, self.qk_tiles)),
            "v": lambda: wt(v_w),
            "v_b": lambda: load_row_vector(v_b, rows),
            "o": lambda: wt(o_w),
            "o_b": lambda: load_row_vector(o_b, rows),
            "fc1": lambda: (wt(fc1_w), load_cols(fc1_b)),
            "fc2": lambda: wt(fc2_w),
            "fc2_b": lambda: load_row_vector(fc2_b, rows),
        }
        return loaders[key]()


def _merge(*gens):
    """Drive stage generators round-robin (one unit each) until all are done: the attention steps of one
    image interleave in program order with the projection/MLP units of its neighbours, whose own
    LayerNorm chains hide behind each other's matmuls."""
    gens = [g for g in gens if g is not None]
    while gens:
        gens = [g for g in gens if next(g, StopIteration) is not StopIteration]


def _chain(*gens):
    for g in gens:
        if g is not None:
            yield from g


@nki.jit
def vit_block_kernel(x, ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b,
                     fc2_w, fc2_b, heads, eps, resident=None, interleave=None, activation="gelu"):
    """One ViTLayer. x [B, S, D] (bf16/fp32, HBM); Linear weights in torch layout ([out, in]): q/k/v/o
    [D, D], fc1 [H, D], fc2 [D, H]; biases and LayerNorm parameters 1-D; all in x's dtype.
    Returns [B, S, D] in x's dtype. S <= 2048 (scores of one query tile fit 4 PSUM banks); any head dim
    D / heads up to 256 (see stages.head_layout); ``activation`` the MLP's GELU (a key of gelu_mlp's
    ACTIVATIONS: "gelu", "gelu_tanh", "quick_gelu").
    With ``interleave`` >= 2 the images form a software pipeline: while image b runs its attention
    (Vector/Scalar bound), image b-1 runs its output projection and MLP and image b+1 its LayerNorm and
    Q/K/V projections (Tensor bound), interleaved unit by unit in program order. With 1 the images run
    one after another (least SBUF: for weights that are not resident). None for either lets the kernel
    choose for the SBUF of the target it is traced for (see ``plan``)."""
    n_img, s, d = x.shape
    hidden = fc1_w.shape[0]
    out = nl.ndarray((n_img, s, d), dtype=x.dtype, buffer=nl.shared_hbm)
    params = (ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b)
    rows = min(TILE_M, s)
    if resident is None:
        resident = plan(d, hidden, x.itemsize, nl.tile_size.total_available_sbuf_size)
    if interleave is None:
        interleave = 2 if resident else 1
    w = _Weights(params, rows, resident, head_layout(d, heads)[0])
    scale = float(d // heads) ** -0.5
    st = [dict() for _ in range(n_img)]

    def pre(b):
        return pre_stage(x, b, w, st[b], s, d, eps, scale, heads) if 0 <= b < n_img else None

    def attn(b):
        return attention_stage(st[b], s, d, heads, x.dtype) if 0 <= b < n_img else None

    def post(b):
        return post_stage(st[b], out, b, w, s, d, hidden, eps, ACTIVATIONS[activation]) if 0 <= b < n_img else None

    if interleave <= 1:
        for b in range(n_img):
            _merge(_chain(pre(b), attn(b), post(b)))
        return out
    _merge(pre(0))
    for b in range(n_img + 1):
        _merge(attn(b), post(b - 1), pre(b + 1))
    return out


def plan(d, hidden, itemsize, sbuf_bytes):
    """Whether vit_block_kernel keeps all weights resident: their transposed tiles and broadcast bias
    rows must take at most 60% of an SBUF partition of ``sbuf_bytes``, leaving room for the activations
    of the three images in flight (ViT-B bf16: resident on trn2 and trn3, loaded per stage on trn1)."""
    weight_bytes = (4 * _cdiv(d, TILE_K) * d + _cdiv(d, TILE_K) * hidden + _cdiv(hidden, TILE_K) * d) * itemsize
    weight_bytes += 7 * d * 4
    return weight_bytes <= int(sbuf_bytes * 0.6)
