"""MX (microscaling) numerics of NeuronCore-v4: the 4-packed element dtypes, shared E8M0 block scales and
their SBUF layout, as used by ``quantize_mx`` and ``nc_matmul_mx``.

OCP Microscaling Formats (MX) v1.0: a block of 32 elements shares one scale X = 2^(e - 127) stored as an
E8M0 byte e (0xFF is NaN); an element's value is X times its own FP8/FP4 value. On the NeuronCore a block
is 8 partitions x 4 consecutive elements of a partition, the 4 elements packed in one ``*_x4`` element.
The scale of partitions 8r..8r+7 of a tile sits in partition (r // 4) * 32 + r % 4 of the scale tile:
4 partitions of scales at the start of each 32-partition SBUF quadrant the data spans.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator.dtypes import PACKED

BLOCK_PARTITIONS = 8         # partitions of one scaling block
PACK = 4                     # elements packed in one *_x4 element (and per partition of one block)
QUADRANT = 32                # SBUF partitions per quadrant
SCALES_PER_QUADRANT = QUADRANT // BLOCK_PARTITIONS
E8M0_BIAS = 127
E8M0_NAN = 0xFF
# Largest finite value and largest unbiased exponent (emax) of each element type (OCP MX v1.0, table 2).
ELEMENT_MAX = {"float8_e5m2_x4": (57344.0, 15), "float8_e4m3fn_x4": (448.0, 8), "float4_e2m1fn_x4": (6.0, 2)}


def unpack(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Float32 values [..., F * 4] of packed elements ``bits`` [..., F] (uint32 or uint16) of ``dtype``."""
    _, elem, width = PACKED[dtype]
    raw = np.ascontiguousarray(bits).astype(np.uint32)
    lanes = [(raw >> (width * i)) & ((1 << width) - 1) for i in range(PACK)]
    codes = np.stack(lanes, axis=-1).astype(np.uint8)
    return codes.view(elem).astype(np.float32).reshape(bits.shape[:-1] + (bits.shape[-1] * PACK,))


def pack(values: np.ndarray, dtype: str) -> np.ndarray:
    """Packed bits [..., F // 4] of ``values`` [..., F] cast to ``dtype``'s elements (round to nearest even;
    callers saturate first)."""
    storage, elem, width = PACKED[dtype]
    codes = np.asarray(values, dtype=np.float32).astype(elem).view(np.uint8).astype(np.uint32)
    codes = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // PACK, PACK)) & ((1 << width) - 1)
    out = np.zeros(codes.shape[:-1], dtype=np.uint32)
    for i in range(PACK):
        out |= codes[..., i] << (width * i)
    return out.astype(storage)


def scale_rows(partitions: int) -> list[tuple[int, int]]:
    """(first scale-tile partition, scale rows) per quadrant for data spanning ``partitions`` partitions."""
    rows = partitions // BLOCK_PARTITIONS
    return [(q * QUADRANT, min(SCALES_PER_QUADRANT, rows - q * SCALES_PER_QUADRANT))
            for q in range(-(-rows // SCALES_PER_QUADRANT))]


def scales_to_factors(scale_bits: np.ndarray) -> np.ndarray:
    """2^(e - 127) for E8M0 bytes ``e`` (NaN for 0xFF), float64."""
    e = np.asarray(scale_bits).astype(np.float64)
    return np.where(e == E8M0_NAN, np.nan, np.exp2(e - E8M0_BIAS))


def quantize(values: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """MX-quantize ``values`` [P, F] (P a multiple of 8, F of 4) to (packed bits [P, F // 4], E8M0 scales
    [P // 8, F // 4] uint8).

    The block scale is 2^(floor(log2(amax)) - emax) (OCP MX v1.0, section 6.3), clamped to E8M0's range
    (an all-zero block gets 2^-127); a block holding Inf or NaN gets the NaN scale. Elements are the
    values divided by the scale, saturated to the element type's largest finite value, rounded to
    nearest even.
    """
    vmax, emax = ELEMENT_MAX[dtype]
    x = np.asarray(values, dtype=np.float32)
    p, f = x.shape
    blocks = np.abs(x).reshape(p // BLOCK_PARTITIONS, BLOCK_PARTITIONS, f // PACK, PACK)
    amax = blocks.max(axis=(1, 3))
    # The biased fp32 exponent of amax is floor(log2(amax)) + 127 for normal numbers (0 for zero/subnormal).
    biased = (amax.view(np.uint32) >> 23) & 0xFF
    scale = np.clip(biased.astype(np.int64) - emax, 0, E8M0_NAN - 1).astype(np.uint8)
    scale[~np.isfinite(amax)] = E8M0_NAN
    factor = np.repeat(np.repeat(scales_to_factors(scale), BLOCK_PARTITIONS, axis=0), PACK, axis=1)
    q = np.clip(x.astype(np.float64) / factor, -vmax, vmax)
    return pack(q.astype(np.float32), dtype), scale


def dequantize(bits: np.ndarray, scale: np.ndarray, dtype: str) -> np.ndarray:
    """Float32 values [P, F * 4] of packed ``bits`` [P, F] with E8M0 block scales [P // 8, F]."""
    vals = unpack(bits, dtype).astype(np.float64)
    factor = np.repeat(np.repeat(scales_to_factors(scale), BLOCK_PARTITIONS, axis=0), PACK, axis=1)
    return (vals * factor).astype(np.float32)
