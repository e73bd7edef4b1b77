"""NKI kernels of neuron/rmsnorm: RMSNorm over the last dim, rows on partitions."""
import nki
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.common import issued_ahead
from nkihub.kernels.library.layernorm.nki_kernels import TILES_AHEAD, load_row_tiles, load_row_vector


def rms_normalize_tile(x_tile, rows, eps, w_tile, out_dtype):
    """RMSNorm of an SBUF tile x_tile [rows, F]: mean(x^2) comes from one Scalar Engine pass (square of
    x / sqrt(F) with a fused free-axis sum), rstd = (ms + eps) ** -0.5 on the Vector Engine, then
    x * rstd (Scalar, scale is free) and * weight (Vector). Returns a new SBUF tile of ``out_dtype``."""
    f = x_tile.shape[1]
    sq = nl.ndarray((rows, f), dtype=nl.float32, buffer=nl.sbuf)
    ms = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=sq, op=nl.square, data=x_tile, scale=float(f) ** -0.5, reduce_op=nl.add,
                    reduce_res=ms, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    rstd = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=rstd, data=ms, op0=nl.add, operand0=eps, op1=nl.power, operand1=-0.5)
    xn = nl.ndarray((rows, f), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=xn, op=nl.copy, data=x_tile, scale=rstd)
    out = nl.ndarray((rows, f), dtype=out_dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=out, data1=xn, data2=w_tile[:rows], op=nl.multiply)
    return out


@nki.jit
def rms_norm_kernel(x, weight, eps, tiles_per_dma=1):
    """RMSNorm over the last dim. x [R, F] (bf16/fp32, HBM), weight [F]; returns [R, F] in x's dtype.
    128 rows per tile on partitions; the weight is loaded once, broadcast to all partitions.
    ``tiles_per_dma`` (nki.autotune): 128-row tiles of x per load DMA."""
    r, f = x.shape
    out = nl.ndarray((r, f), dtype=x.dtype, buffer=nl.shared_hbm)
    p = nl.tile_size.pmax
    w_tile = load_row_vector(weight, min(p, r))
    for r0, rows, x_tile in issued_ahead(load_row_tiles(x, tiles_per_dma), max(TILES_AHEAD, tiles_per_dma)):
        y = rms_normalize_tile(x_tile, rows, eps, w_tile, x.dtype)
        nisa.dma_copy(dst=out[r0:r0 + rows, :], src=y)
    return out
