"""NKI kernels of neuron/layernorm: layer normalisation over the last dim, rows on partitions."""
import nki
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.common import issued_ahead

# 128-row tiles whose loads are issued ahead of the tile being normalised (at least one DMA group): DMAs
# are triggered in program order, so the next tiles' loads must be written before this tile's store to
# overlap its compute.
TILES_AHEAD = 2


def load_row_vector(vec, rows, dtype=nl.float32):
    """A [rows, F] SBUF tile holding the HBM vector ``vec`` [F] on every partition (one DMA with a zero
    partition stride); used for weights and biases that act along the free dim."""
    f = vec.shape[0]
    if rows > 1:
        return nl.broadcast_to(vec.reshape((1, f)), (rows, f), dtype=dtype)
    out = nl.ndarray((1, f), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=vec.reshape((1, f)))
    return out


def row_stats(x_tile, rows):
    """(mean, variance) columns [rows, 1] of an SBUF tile x_tile [rows, F] with bn_stats on chunks of at most
    bn_stats_fmax elements (the instruction's limit) and one bn_aggr."""
    f = x_tile.shape[1]
    chunk = nl.tile_size.bn_stats_fmax
    n_chunks = (f + chunk - 1) // chunk
    stats = nl.ndarray((rows, 6 * n_chunks), dtype=nl.float32, buffer=nl.sbuf)
    for c in nl.affine_range(n_chunks):
        lo = c * chunk
        hi = min(f, lo + chunk)
        nisa.bn_stats(dst=stats[:rows, 6 * c:6 * (c + 1)], data=x_tile[:rows, lo:hi])
    mv = nl.ndarray((rows, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=mv, data=stats)
    return mv


def normalized_tile(x_tile, rows, eps, dtype):
    """(x - mean) * rstd of an SBUF tile x_tile [rows, F]: statistics on the Vector Engine, the
    normalisation on the Scalar Engine (scale and bias are free there). A new SBUF tile [rows, F] of
    ``dtype``, without the affine weight and bias."""
    f = x_tile.shape[1]
    mv = row_stats(x_tile, rows)
    # rstd = (var + eps) ** -0.5 and nbias = -mean * rstd, both [rows, 1]
    rstd = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=rstd, data=mv[:rows, 1:2], op0=nl.add, operand0=eps, op1=nl.power, operand1=-0.5)
    nbias = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=nbias, data=mv[:rows, 0:1], op0=nl.multiply, operand0=rstd, op1=nl.multiply,
                       operand1=-1.0)
    xn = nl.ndarray((rows, f), dtype=dtype, buffer=nl.sbuf)
    nisa.activation(dst=xn, op=nl.copy, data=x_tile, bias=nbias, scale=rstd)
    return xn


def normalize_tile(x_tile, rows, eps, w_tile, b_tile, out_dtype):
    """LayerNorm of an SBUF tile x_tile [rows, F]: :func:`normalized_tile` (fp32), then the weight on
    GpSimd and the bias on the Vector Engine. Returns a new SBUF tile [rows, F] of ``out_dtype``."""
    f = x_tile.shape[1]
    xn = normalized_tile(x_tile, rows, eps, nl.float32)
    y = nl.ndarray((rows, f), dtype=nl.float32, buffer=nl.sbuf)
    # the weight multiply goes to the otherwise idle GpSimd engine so the Vector Engine is not the bottleneck
    nisa.tensor_tensor(dst=y, data1=xn, data2=w_tile[:rows], op=nl.multiply, engine=nisa.gpsimd_engine)
    out = nl.ndarray((rows, f), dtype=out_dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=out, data1=y, data2=b_tile[:rows], op=nl.add)
    return out


def load_row_tiles(x, tiles_per_dma):
    """Yield (row0, rows, SBUF tile [rows, F]) covering x [R, F] (HBM) in 128-row tiles; full tiles are
    loaded ``tiles_per_dma`` at a time by one DMA (fewer, larger transfers), a partial last tile alone."""
    r, f = x.shape
    p = nl.tile_size.pmax
    full = r // p
    for t0 in range(0, full, max(1, tiles_per_dma)):
        n = min(max(1, tiles_per_dma), full - t0)
        group = nl.ndarray((p, n, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=group, src=x[t0 * p:(t0 + n) * p, :].reshape((n, p, f)).permute((1, 0, 2)))
        for j in range(n):
            yield (t0 + j) * p, p, group[:, j, :]
    if r % p:
        rows = r % p
        tile = nl.ndarray((rows, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[full * p:r, :])
        yield full * p, rows, tile


@nki.jit
def layer_norm_kernel(x, weight, bias, eps, tiles_per_dma=1):
    """LayerNorm over the last dim. x [R, F] (bf16/fp32, HBM), weight/bias [F]; returns [R, F] in x's dtype.
    128 rows per tile on partitions; weight and bias are loaded once (broadcast to all partitions).
    ``tiles_per_dma`` (nki.autotune): 128-row tiles of x per load DMA."""
    r, f = x.shape
    out = nl.ndarray((r, f), dtype=x.dtype, buffer=nl.shared_hbm)
    p = nl.tile_size.pmax
    w_tile = load_row_vector(weight, min(p, r))
    b_tile = load_row_vector(bias, min(p, r))
    for r0, rows, x_tile in issued_ahead(load_row_tiles(x, tiles_per_dma), max(TILES_AHEAD, tiles_per_dma)):
        y = normalize_tile(x_tile, rows, eps, w_tile, b_tile, x.dtype)
        nisa.dma_copy(dst=out[r0:r0 + rows, :], src=y)
    return out
