"""LayerNorm whose affine (weight, bias) rides on the transposes that follow it in the ViT block.

The block needs every LayerNorm output only transposed (features on partitions, as the stationary or
moving operand of the next projection). After the transpose the LayerNorm weight and bias are
per-partition scalars, so they cost nothing extra in the PSUM evacuation of the transposes (``scale``
and ``bias`` of the Scalar Engine's activation, or one tensor_scalar with two operands on the Vector
Engine) instead of two full-width elementwise passes per row tile (a GpSimd multiply and an fp32 Vector
add of [rows, D] each).

    (the normalisation itself is layernorm's ``normalized_tile``: stats Vector, apply Scalar)
    transposed_affine [(xn, rows)] -> (xn^T * w + b) as [128, D/128, tokens]  (Tensor + evacuation)
"""
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.matmul.nki_kernels import TILE_K, TILE_M, _cdiv


def load_cols(vec, tiles=None):
    """HBM vector [F] as per-partition columns [128, ntiles] fp32: column t holds vec[f0:f0 + rows] for the
    t-th of ``tiles`` [(f0, rows)] (default: 128 features a column)."""
    f = vec.shape[0]
    if tiles is None:
        tiles = [(t * TILE_K, min(TILE_K, f - t * TILE_K)) for t in range(_cdiv(f, TILE_K))]
    cols = nl.ndarray((TILE_K, len(tiles)), dtype=nl.float32, buffer=nl.sbuf)
    for t, (f0, hw) in enumerate(tiles):
        nisa.dma_copy(dst=cols[:hw, t:t + 1], src=vec[f0:f0 + hw].reshape((hw, 1)))
    return cols


def _affine_out(dst, src, w_col, b_col, k):
    """dst = src * w_col + b_col (per-partition columns) out of PSUM, alternating Vector and Scalar."""
    if k % 2 == 0:
        nisa.tensor_scalar(dst=dst, data=src, op0=nl.multiply, operand0=w_col, op1=nl.add, operand1=b_col)
    else:
        nisa.activation(dst=dst, op=nl.copy, data=src, scale=w_col, bias=b_col)


def transposed_affine(row_tiles, f, dtype, w_cols, b_cols, out=None):
    """x^T * w + b (features on partitions) from SBUF row tiles [(tile [rows <= 128, f], rows)]: a new
    SBUF tile [128, f/128, tokens] of ``dtype`` (or ``out``, a list of [128, tokens] tiles); w_cols and
    b_cols [128, f/128] fp32 from load_cols. Up to four transposes share one PSUM bank; each feature tile
    is evacuated on its own (its weight and bias are that tile's columns)."""
    total = sum(r for _, r in row_tiles)
    n_ft = _cdiv(f, TILE_K)
    x_t = out if out is not None else nl.ndarray((TILE_K, n_ft, total), dtype=dtype, buffer=nl.sbuf)
    col, k = 0, 0
    for tile, rows in row_tiles:
        for t0 in range(0, n_ft, 4):
            ps = nl.ndarray((TILE_K, 4, TILE_M), dtype=nl.float32, buffer=nl.psum)
            for t in range(t0, min(n_ft, t0 + 4)):
                kw = min(TILE_K, f - t * TILE_K)
                nisa.nc_transpose(dst=ps[:kw, t - t0, :rows], data=tile[:rows, t * TILE_K:t * TILE_K + kw])
            for t in range(t0, min(n_ft, t0 + 4)):
                kw = min(TILE_K, f - t * TILE_K)
                dst = x_t[t] if isinstance(x_t, list) else x_t[:, t, :]
                _affine_out(dst[:kw, col:col + rows], ps[:kw, t - t0, :rows], w_cols[:kw, t:t + 1],
                            b_cols[:kw, t:t + 1], k)
                k += 1
        col += rows
    return x_t
