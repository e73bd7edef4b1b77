"""MX numerics (simulator.mx) against the OCP Microscaling v1.0 reference written from the spec
(mx_reference.py): element decoding, block scales, saturation, rounding, packing and MX dot products."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from nkihub.simulator import mx

_spec = importlib.util.spec_from_file_location("_nkihub_mx_reference", Path(__file__).with_name("mx_reference.py"))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)


def _data(seed: int, shape=(32, 16)) -> np.ndarray:
    """bf16 values over many binades, with a zero block, a tiny block and exact ties."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, size=shape))
    x[:8, :4] = 0.0
    x[8:16, 4:8] = rng.standard_normal((8, 4)) * 2.0 ** -130   # below E8M0's smallest scale
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn_x4", "float8_e5m2_x4"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quantize_matches_the_spec(dtype, seed):
    x = _data(seed)
    bits, scale = mx.quantize(x, dtype)
    want_elems, want_scale = ref.quantize(x.astype(np.float64), ref.X4[dtype])
    np.testing.assert_array_equal(scale, want_scale)
    got = np.vectorize(lambda c: ref.decode(int(c), ref.X4[dtype]))(ref.unpack_codes(bits, ref.X4[dtype]))
    np.testing.assert_array_equal(got, want_elems)


def test_zero_block_gets_the_smallest_scale_and_large_values_saturate():
    x = np.zeros((8, 4), np.float32)
    _, scale = mx.quantize(x, "float8_e4m3fn_x4")
    assert scale[0, 0] == 0
    x[0, 0], x[0, 1] = 448.0 * 1.9, 1.0          # amax 851.2: scale 2^(9 - 8) = 2; 851.2 / 2 = 425.6
    bits, scale = mx.quantize(x, "float8_e4m3fn_x4")
    assert scale[0, 0] == 127 + 1
    vals = mx.unpack(bits, "float8_e4m3fn_x4")
    assert vals[0, 0] == 416.0 and vals[0, 1] == 0.5   # 425.6 rounds to e4m3's 416 (spacing 32)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"])
def test_pack_unpack_round_trip_and_lane_order(dtype):
    fmt = ref.X4[dtype]
    codes = np.random.default_rng(3).integers(0, 16 if fmt == "e2m1" else 256, size=(4, 8))
    vals = np.vectorize(lambda c: ref.decode(int(c), fmt))(codes)
    finite = np.where(np.isfinite(vals), vals, 0.0)
    bits = mx.pack(finite.astype(np.float32), dtype)
    assert bits.dtype == (np.uint16 if fmt == "e2m1" else np.uint32)
    np.testing.assert_array_equal(mx.unpack(bits, dtype), finite.astype(np.float32))
    # Element 0 of each packed element sits in its lowest bits.
    np.testing.assert_array_equal(ref.unpack_codes(bits, fmt)[:, 0], mx.pack(finite, dtype)[:, 0] &
                                  (0xF if fmt == "e2m1" else 0xFF))


def test_dequantize_matches_the_spec():
    x = _data(4)
    bits, scale = mx.quantize(x, "float8_e5m2_x4")
    np.testing.assert_array_equal(mx.dequantize(bits, scale, "float8_e5m2_x4"),
                                  ref.dequantize(bits, scale, "e5m2").astype(np.float32))


def test_nan_block_gets_the_nan_scale():
    x = np.ones((8, 4), np.float32)
    x[3, 2] = np.nan
    _, scale = mx.quantize(x, "float8_e4m3fn_x4")
    assert scale[0, 0] == mx.E8M0_NAN
    assert np.isnan(mx.scales_to_factors(scale)).all()
