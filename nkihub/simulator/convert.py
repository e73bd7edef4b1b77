"""Exact dtype conversions, fast: the same bits as numpy/ml_dtypes ``astype`` (round to nearest even,
NaN, infinities and subnormals included), several times faster for bf16.

ml_dtypes converts element by element through a generic cast loop; torch's vectorised copy rounds fp32
to bf16 identically for every non-NaN value (checked over all 2^32 fp32 bit patterns) and widens bf16
to fp32 exactly, at 3-6x the speed. The one difference is NaN: torch writes 0xffff for every NaN, ml_dtypes
a quiet NaN with the input's sign (0x7fc0 / 0xffc0), so NaN results are rewritten after the copy (0xffff
can only come from a NaN input, so one max-reduction finds them). fp8 is left to ml_dtypes (torch
saturates float8_e4m3fn where ml_dtypes gives NaN) except the exact widening to fp32 (a 256-entry
table). Other pairs go through numpy's own ``astype``.

The torch path runs with torch's threads as the caller set them: the simulator's engines call it with
one thread per simulator thread (see ``simulator.threads``), so torch's pool never competes with them.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

try:  # torch is a dependency of nkihub, but the machine layer runs without it (slower casts)
    import torch
except ImportError:  # pragma: no cover - exercised only where torch is absent
    torch = None

F32 = np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)
_FP8 = tuple(np.dtype(t) for t in (ml_dtypes.float8_e4m3, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2))
# Below this many elements a numpy/ml_dtypes cast costs less than a torch call.
TORCH_MIN_ELEMS = 2048
_NAN_BITS = np.uint16(0xFFFF)   # what torch writes for any NaN


def _widen_table(dt: np.dtype) -> np.ndarray:
    return np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)


_WIDEN = {dt: _widen_table(dt) for dt in _FP8}


def torch_view(a: np.ndarray):
    """A torch tensor sharing ``a``'s memory (bf16 and fp32 views with non-negative strides), else None."""
    if torch is None or a.dtype not in (F32, BF16) or any(s < 0 for s in a.strides):
        return None
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _fix_nans(dst: np.ndarray, src: np.ndarray) -> None:
    """Rewrite torch's NaN bits (0xffff) in a bf16 ``dst`` the way ml_dtypes writes NaN: 0x7fc0 with the
    sign of the fp32 source."""
    bits = dst.view(np.uint16)
    if bits.size and bits.max() == _NAN_BITS:
        nan = bits == _NAN_BITS
        neg = np.signbit(np.broadcast_to(src, dst.shape))
        bits[nan] = np.where(neg[nan], np.uint16(0xFFC0), np.uint16(0x7FC0))


def _inner(a: np.ndarray):
    """The axis ``a`` walks fastest in memory: the smallest stride among axes of more than one element
    (the last such axis on a tie; None when there is none)."""
    axes = [d for d in range(a.ndim) if a.shape[d] > 1]
    return min(axes, key=lambda d: (abs(a.strides[d]), -d)) if axes else None


def caster(dst: np.ndarray, src: np.ndarray):
    """``cast() `` doing ``dst[...] = src.astype(dst.dtype)`` bit for bit, for arrays fixed in memory (the
    torch views are made once here). Float destinations only; integer destinations need the engines'
    saturating rounding (``simulator.isa.base.store``)."""
    # torch is the faster cast when both sides walk their innermost axis in the same order, however the
    # outer axes are laid out (a stack of column blocks of one tile: 0.14 against 0.42 ns per element
    # widening, 0.18 against 1.03 narrowing); for a transposing copy numpy's strided loop is (0.47
    # against 0.67 ns per element widening).
    if dst.size >= TORCH_MIN_ELEMS and ((dst.dtype == BF16 and src.dtype == F32) or
                                        (dst.dtype == F32 and src.dtype == BF16)) and \
            (src.shape != dst.shape or _inner(src) == _inner(dst)):
        td, ts = torch_view(dst), torch_view(src)
        if td is not None and ts is not None:
            if dst.dtype == F32:
                return lambda: td.copy_(ts)
            return lambda: (td.copy_(ts), _fix_nans(dst, src))
    if dst.dtype == F32 and src.dtype in _WIDEN:
        table = _WIDEN[src.dtype]
        raw = src.view(np.uint8)

        def widen():
            dst[...] = table[raw]
        return widen
    return lambda: np.copyto(dst, src, casting="unsafe")


def cast_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src.astype(dst.dtype)`` bit for bit (``src`` of ``dst``'s shape or broadcastable);
    float destinations only (see :func:`caster`, which binds once for arrays that stay put)."""
    caster(dst, src)()


def as_f32(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a`` as fp32 (``a`` itself when it already is; else converted into ``out`` or a new array)."""
    if a.dtype == F32:
        return a
    if out is None:
        out = np.empty(a.shape, F32)
    cast_into(out, a)
    return out
