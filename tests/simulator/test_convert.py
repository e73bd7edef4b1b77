"""The fast engine's casts give numpy/ml_dtypes' bits: every bf16 value, fp32 around every bf16 rounding
boundary, specials (signed zeros, infinities, NaN payloads, subnormals) and random fp32, strided and
broadcast operands. (All 2^32 fp32 values were checked once against ml_dtypes when torch's rounding was
adopted; see nkihub/simulator/convert.py.)"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from nkihub.simulator.convert import BF16, F32, TORCH_MIN_ELEMS, cast_into, caster

ALL_BF16 = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(BF16)
SPECIALS = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
                     0x7FBFFFFF, 0x00000001, 0x807FFFFF, 0x00008000, 0x00018000, 0x7F7F8000, 0x7F7FFFFF,
                     0x3F808000, 0x3F818000, 0xBF808000], dtype=np.uint32).view(np.float32)


def _bits(a):
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _fp32_cases() -> np.ndarray:
    """fp32 values at, just below and just above every bf16 rounding boundary, specials, random."""
    hi = np.arange(2 ** 16, dtype=np.uint32) << 16
    near = np.concatenate([hi + 0x8000, hi + 0x7FFF, hi + 0x8001, hi + 0x18000 & 0xFFFFFFFF, hi])
    rng = np.random.default_rng(0)
    rand = rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([near, rand, SPECIALS.view(np.uint32)]).view(np.float32)


def test_every_bf16_widens_exactly():
    out = np.empty(ALL_BF16.shape, F32)
    cast_into(out, ALL_BF16)
    assert np.array_equal(_bits(out), _bits(ALL_BF16.astype(np.float32)))


def test_fp32_to_bf16_rounds_as_ml_dtypes_nan_signs_included():
    x = _fp32_cases()
    out = np.empty(x.shape, BF16)
    cast_into(out, x)
    with np.errstate(all="ignore"):
        want = x.astype(BF16)
    assert np.array_equal(_bits(out), _bits(want))


@pytest.mark.parametrize("dt", [ml_dtypes.float8_e4m3, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_fp8_widens_exactly(dt):
    a = np.arange(256, dtype=np.uint8).view(dt).reshape(16, 16)
    out = np.empty((16, 32), F32)[:, ::2]
    cast_into(out, a)
    assert np.array_equal(_bits(out), _bits(a.astype(np.float32)))


@pytest.mark.parametrize("direction", ["up", "down"])
def test_strided_and_transposed_views(direction):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((64, 256)).astype(np.float32)
    base.view(np.uint32)[::7, ::5] = 0x7FC00001      # NaNs with a payload
    base[3, ::3] = -0.0
    src = base[:, 10:138].T if direction == "down" else base.astype(BF16)[:, 10:138].T
    dst = np.empty((200, 80), BF16 if direction == "down" else F32)[20:148, 5:69]
    assert dst.size >= TORCH_MIN_ELEMS
    with np.errstate(all="ignore"):
        want = src.astype(dst.dtype)
    caster(dst, src)()
    assert np.array_equal(_bits(dst), _bits(want))


@pytest.mark.parametrize("direction", ["up", "down"])
def test_a_stack_of_column_blocks_casts_through_torch_with_the_same_bits(direction, monkeypatch):
    """Members of a stack that are column blocks of one tile (the stack axis walks memory faster than the
    partitions) have the innermost axis of a contiguous work array: torch casts them, bit for bit."""
    import nkihub.simulator.convert as convert
    rng = np.random.default_rng(2)
    tile = rng.standard_normal((128, 8 * 96)).astype(np.float32)
    tile.view(np.uint32)[::9, ::7] = 0xFFC00003      # NaNs with a payload and a sign
    tile[5, ::4] = -0.0
    if direction == "up":
        tile = tile.astype(BF16)
    item = tile.itemsize
    src = np.ndarray((8, 128, 96), tile.dtype, tile, 0, (96 * item, tile.strides[0], item))
    dst = np.empty((8, 128, 96), F32 if direction == "up" else BF16)
    used = []
    monkeypatch.setattr(convert, "torch_view", lambda a, f=convert.torch_view: used.append(a.shape) or f(a))
    caster(dst, src)()
    with np.errstate(all="ignore"):
        want = src.astype(dst.dtype)
    assert used and np.array_equal(_bits(dst), _bits(want))


def test_broadcast_source_and_small_arrays_take_the_numpy_path():
    col = np.array([[1.5], [np.nan], [-2.25]], np.float32)
    dst = np.empty((3, 4000), BF16)
    cast_into(dst, col)
    assert np.array_equal(_bits(dst), _bits(np.broadcast_to(col, dst.shape).astype(BF16)))
    small = np.empty((2, 3), BF16)
    cast_into(small, np.full((2, 3), 1 + 2 ** -9, np.float32))
    assert (small.astype(np.float32) == 1.0).all()      # ties to even


def test_torch_threads_untouched():
    before = torch.get_num_threads()
    cast_into(np.empty(1 << 16, BF16), np.ones(1 << 16, np.float32))
    assert torch.get_num_threads() == before
