"""NKI kernels of neuron/softmax: softmax along the last dim, rows on partitions, rows of any length.

Rows are processed in chunks of at most ``chunk`` elements per instruction. A row that fits on chip
(``resident``) is loaded once: max over the chunks, exp with a fused sum on the Scalar Engine, one
reciprocal, a scale on the Vector Engine. A longer row streams twice from HBM: an online pass keeps a
running max and a running sum rescaled by exp(old_max - new_max), then a second pass writes
exp(x - max - log(sum)) in one Scalar Engine instruction per chunk.
"""
import nki
import nki.isa as nisa
import nki.language as nl

from nkihub.kernels.library.common import issued_ahead

# Bytes per partition a resident row may use (input tile + fp32 exponentials + output tile).
RESIDENT_BYTES = 96 * 1024
# Resident 128-row tiles whose loads are issued ahead of the tile being computed: DMAs are triggered in
# program order, so the next tiles' loads must be written before this tile's store to overlap its compute.
TILES_AHEAD = 2


def _chunks(f, chunk):
    return [(lo, min(f, lo + chunk)) for lo in range(0, f, chunk)]


def softmax_resident_tile(x_tile, rows, chunk, out_dtype):
    """Softmax of an SBUF tile x_tile [rows, F] along the free dim; returns a new SBUF tile [rows, F]."""
    f = x_tile.shape[1]
    spans = _chunks(f, chunk)
    maxes = nl.ndarray((rows, len(spans)), dtype=nl.float32, buffer=nl.sbuf)
    for c, (lo, hi) in enumerate(spans):
        nisa.tensor_reduce(dst=maxes[:rows, c:c + 1], op=nl.maximum, data=x_tile[:rows, lo:hi], axis=1)
    neg_max = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=maxes, axis=1, negate=True)
    e = nl.ndarray((rows, f), dtype=nl.float32, buffer=nl.sbuf)
    sums = nl.ndarray((rows, len(spans)), dtype=nl.float32, buffer=nl.sbuf)
    for c, (lo, hi) in enumerate(spans):
        nisa.activation(dst=e[:rows, lo:hi], op=nl.exp, data=x_tile[:rows, lo:hi], bias=neg_max,
                        reduce_op=nl.add, reduce_res=sums[:rows, c:c + 1], reduce_cmd=nisa.reduce_cmd.reset_reduce)
    total = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=total, op=nl.add, data=sums, axis=1)
    inv = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=inv, data=total)
    out = nl.ndarray((rows, f), dtype=out_dtype, buffer=nl.sbuf)
    for lo, hi in spans:
        nisa.tensor_scalar(dst=out[:rows, lo:hi], data=e[:rows, lo:hi], op0=nl.multiply, operand0=inv)
    return out


def _softmax_streamed_rows(x, out, r0, rows, chunk):
    """Softmax of rows r0:r0+rows of HBM x [R, F] into HBM out, two passes over HBM (online max/sum)."""
    spans = _chunks(x.shape[1], chunk)
    run_max = run_sum = None
    for lo, hi in spans:  # pass 1: online max and rescaled sum (loop-carried: sequential)
        xc = nl.ndarray((rows, hi - lo), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xc, src=x[r0:r0 + rows, lo:hi])
        cmax = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=cmax, op=nl.maximum, data=xc, axis=1)
        new_max = cmax
        if run_max is not None:
            new_max = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=new_max, data1=run_max, data2=cmax, op=nl.maximum)
        neg_max = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=neg_max, data=new_max, op0=nl.multiply, operand0=-1.0)
        junk = nl.ndarray((rows, hi - lo), dtype=nl.float32, buffer=nl.sbuf)
        csum = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=junk, op=nl.exp, data=xc, bias=neg_max, reduce_op=nl.add, reduce_res=csum,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        if run_sum is not None:
            corr = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=corr, op=nl.exp, data=run_max, bias=neg_max)
            scaled = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=scaled, data1=run_sum, data2=corr, op=nl.multiply)
            total = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=total, data1=scaled, data2=csum, op=nl.add)
            csum = total
        run_max, run_sum = new_max, csum
    # bias = -(max + log(sum)) so that pass 2 is one exp per chunk
    log_sum = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=log_sum, op=nl.log, data=run_sum)
    bias = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=bias, data1=log_sum, data2=run_max, op=nl.add)
    nisa.tensor_scalar(dst=bias, data=bias, op0=nl.multiply, operand0=-1.0)
    for lo, hi in spans:  # pass 2
        xc = nl.ndarray((rows, hi - lo), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xc, src=x[r0:r0 + rows, lo:hi])
        yc = nl.ndarray((rows, hi - lo), dtype=out.dtype, buffer=nl.sbuf)
        nisa.activation(dst=yc, op=nl.exp, data=xc, bias=bias)
        nisa.dma_copy(dst=out[r0:r0 + rows, lo:hi], src=yc)


@nki.jit
def softmax_kernel(x, chunk=2048, resident_bytes=RESIDENT_BYTES):
    """Softmax along the last dim. x [R, F] (bf16/fp32, HBM) -> [R, F] in x's dtype; 128 rows per tile.
    ``chunk``: free elements per instruction; rows needing more than ``resident_bytes`` per partition
    on chip are streamed twice from HBM."""
    r, f = x.shape
    out = nl.ndarray((r, f), dtype=x.dtype, buffer=nl.shared_hbm)
    p = nl.tile_size.pmax
    tiles = [(t * p, min(p, r - t * p)) for t in range((r + p - 1) // p)]
    if f * (2 * x.itemsize + 4) > resident_bytes:
        for r0, rows in tiles:
            _softmax_streamed_rows(x, out, r0, rows, chunk)
        return out

    def loaded():
        for r0, rows in tiles:
            x_tile = nl.ndarray((rows, f), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x_tile, src=x[r0:r0 + rows, :])
            yield r0, rows, x_tile
    for r0, rows, x_tile in issued_ahead(loaded(), TILES_AHEAD):
        y = softmax_resident_tile(x_tile, rows, chunk, x.dtype)
        nisa.dma_copy(dst=out[r0:r0 + rows, :], src=y)
    return out
