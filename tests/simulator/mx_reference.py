"""A numpy reference of OCP Microscaling (MX) v1.0 written from the specification's text, independent of
``simulator.mx`` (no ml_dtypes casts): element formats decoded and encoded from their bit fields, the
shared scale of a block from floor(log2(amax)) - emax, and MX dot products as sums of X * P_i products.
"""
from __future__ import annotations

import math

import numpy as np

# name -> (exponent bits, mantissa bits, bias, largest finite value, emax, has NaN/Inf encodings)
FORMATS = {
    "e4m3": (4, 3, 7, 448.0, 8, "nan-only"),      # S.1111.111 is NaN, no Inf
    "e5m2": (5, 2, 15, 57344.0, 15, "ieee"),       # exponent 11111: Inf / NaN
    "e2m1": (2, 1, 1, 6.0, 2, "none"),
}
X4 = {"float8_e4m3fn_x4": "e4m3", "float8_e5m2_x4": "e5m2", "float4_e2m1fn_x4": "e2m1"}


def decode(code: int, fmt: str) -> float:
    """The value of one element's bit pattern."""
    e_bits, m_bits, bias, _, _, special = FORMATS[fmt]
    sign = -1.0 if code >> (e_bits + m_bits) & 1 else 1.0
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    if special == "nan-only" and e == (1 << e_bits) - 1 and m == (1 << m_bits) - 1:
        return math.nan
    if special == "ieee" and e == (1 << e_bits) - 1:
        return math.nan if m else sign * math.inf
    if e == 0:
        return sign * m / (1 << m_bits) * 2.0 ** (1 - bias)
    return sign * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)


def round_to_format(v: float, fmt: str) -> float:
    """``v`` rounded to the nearest value of the element format (ties to even), saturating at the largest
    finite value (the MX conversion clamps)."""
    _, m_bits, bias, vmax, _, _ = FORMATS[fmt]
    a = abs(v)
    if a == 0:
        return 0.0
    if a >= vmax:
        return math.copysign(vmax, v)
    e = max(math.floor(math.log2(a)), 1 - bias)          # below the normal range the spacing is fixed
    quantum = 2.0 ** (e - m_bits)
    q = float(np.round(a / quantum)) * quantum             # numpy rounds half to even
    return math.copysign(min(q, vmax), v)


def block_scale_exponent(block: np.ndarray, fmt: str) -> int:
    """The E8M0 code of a block's shared scale: floor(log2(max |V_i|)) - emax, biased by 127 and kept
    in E8M0's range (a zero block gets the smallest scale, 2^-127)."""
    amax = float(np.max(np.abs(block)))
    if not math.isfinite(amax):
        return 0xFF
    if amax == 0:
        return 0
    shared = math.floor(math.log2(amax)) - FORMATS[fmt][4]
    return int(min(max(shared + 127, 0), 254))


def quantize(values: np.ndarray, fmt: str, block_p: int = 8, block_f: int = 4):
    """(element values [P, F], scale codes [P // 8, F // 4]) of MX-quantizing ``values``."""
    p, f = values.shape
    elems = np.zeros((p, f))
    scales = np.zeros((p // block_p, f // block_f), dtype=np.int64)
    for i in range(p // block_p):
        for j in range(f // block_f):
            rows, cols = slice(i * block_p, (i + 1) * block_p), slice(j * block_f, (j + 1) * block_f)
            code = block_scale_exponent(values[rows, cols], fmt)
            scales[i, j] = code
            x = 2.0 ** (code - 127)
            elems[rows, cols] = np.vectorize(lambda v: round_to_format(v / x, fmt))(values[rows, cols])
    return elems, scales


def unpack_codes(bits: np.ndarray, fmt: str) -> np.ndarray:
    """Element codes [P, F * 4] of packed elements [P, F] (element 0 in the lowest bits)."""
    width = 4 if fmt == "e2m1" else 8
    b = bits.astype(np.uint64)
    lanes = [(b >> (width * i)) & ((1 << width) - 1) for i in range(4)]
    return np.stack(lanes, axis=-1).reshape(bits.shape[0], -1).astype(np.int64)


def dequantize(bits: np.ndarray, scales: np.ndarray, fmt: str) -> np.ndarray:
    """X * P_i of packed data [P, F] (blocks of 8 partitions x one packed element) as float64 [P, F * 4]."""
    vals = np.vectorize(lambda c: decode(int(c), fmt))(unpack_codes(bits, fmt))
    x = np.exp2(scales.astype(np.float64) - 127)
    return vals * np.repeat(np.repeat(x, 8, axis=0), 4, axis=1)


def matmul(st_bits, mv_bits, st_scales, mv_scales, st_fmt, mv_fmt) -> np.ndarray:
    """[M, N] = sum over k and the 4 packed lanes of dequantized stationary [K, M*4] and moving [K, N*4]."""
    a = dequantize(st_bits, st_scales, st_fmt).reshape(st_bits.shape[0], -1, 4)
    b = dequantize(mv_bits, mv_scales, mv_fmt).reshape(mv_bits.shape[0], -1, 4)
    return np.einsum("kiq,kjq->ij", a, b)
