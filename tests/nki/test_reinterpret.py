"""Reinterpreting a tensor's bytes as another dtype: ``t.view(dtype)`` and ``t.ap(pattern, dtype=...)``
share storage with the tensor (writes through one are reads through the other), keep partitions on chip,
and the dataflow checks follow the shared bytes."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.simulator.errors import UninitializedWarning
from nkihub.nki.errors import KernelRuleError


@nki.jit
def fp32_bits_as_bf16(x):
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    halves = t.view(nl.bfloat16)                      # [P, 2F]: the low and high half of each fp32
    out = nl.ndarray(halves.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=halves)
    return out


def test_view_shares_bytes_and_rescales_the_innermost_dim():
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    got = fp32_bits_as_bf16(x)
    assert got.shape == (4, 12)
    np.testing.assert_array_equal(got.view(np.uint16), x.view(np.uint16))


@nki.jit
def write_through_view(x):
    t = nl.ndarray((x.shape[0], x.shape[1] // 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t.view(nl.bfloat16), src=x)     # fill the fp32 tile through its bf16 view
    out = nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_writes_through_a_view_initialise_the_tensor():
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    got = write_through_view(x)
    np.testing.assert_array_equal(got.view(np.uint16), x.view(np.uint16))


@nki.jit
def half_written(x):
    t = nl.ndarray((x.shape[0], x.shape[1] // 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t.view(nl.bfloat16)[:, 0:x.shape[1] // 2], src=x[:, 0:x.shape[1] // 2])
    out = nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_reading_bytes_no_view_wrote_is_caught():
    # the half no view wrote is stored as it is: a warning naming the rule (an error once computed on)
    with pytest.warns(UninitializedWarning, match="read-uninitialized"):
        out = half_written(np.ones((8, 16), ml_dtypes.bfloat16))
    assert (out.view(ml_dtypes.bfloat16)[:, :8].astype(np.float32) == 1).all()


@nki.jit
def packed_pairs(x):
    # uint8 [P, 2F] holding two fp4 codes per byte, seen as float4_e2m1fn_x4 [P, F // 2] (2 bytes each).
    p, f2 = x.shape
    v = x.ap(pattern=[[f2 // 2, p], [1, f2 // 2]], offset=0, dtype=nl.float4_e2m1fn_x4)
    t = nl.ndarray(v.shape, dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=v)
    out = nl.ndarray(v.shape, dtype=nl.uint16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t.view(nl.uint16))
    return out


def test_ap_with_dtype_counts_elements_of_the_new_dtype():
    x = np.arange(4 * 8, dtype=np.uint8).reshape(4, 8)
    got = packed_pairs(x)
    assert got.shape == (4, 4)
    np.testing.assert_array_equal(got, x.view(np.uint16))


@nki.jit
def misaligned(x):
    return x[:, 1:].view(nl.float32)


def test_a_view_must_start_on_an_element_boundary():
    with pytest.raises(KernelRuleError, match="not a multiple"):
        misaligned(np.ones((2, 8), ml_dtypes.bfloat16))
