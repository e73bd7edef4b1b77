"""What kernels hand back, as AWS NKI defines it: output tensors the caller passes in are written in place
and may be returned; a returned view (``out.reshape(...)``) keeps its shape; a masked store writes only
the masked elements; a bad return names the tensor at the ``return`` line."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import neuronxcc.nki as old_nki
import neuronxcc.nki.language as old_nl
import nki
import nki.language as nl
from nkihub.nki.errors import KernelRuleError

RNG = np.random.default_rng(5)


@nki.jit
def scale_into(x, out):
    """Writes 2x into the caller's ``out`` and returns it."""
    nl.store(out, nl.multiply(nl.load(x), 2.0))
    return out


def test_a_caller_output_is_written_in_place_and_returned():
    x = RNG.random((4, 8)).astype(np.float32)
    out = np.zeros_like(x)
    got = scale_into(x, out)
    assert got is out                       # the caller's own array comes back
    np.testing.assert_array_equal(out, 2 * x)


def test_a_caller_output_works_with_torch_tensors():
    x = torch.rand(4, 8)
    out = torch.zeros(4, 8)
    got = scale_into(x, out)
    assert got is out
    torch.testing.assert_close(out, 2 * x)


@nki.jit
def write_top_rows(x, out):
    """Writes only rows 0:2 of the caller's ``out``; returns nothing."""
    nl.store(out[0:2, :], nl.load(x[0:2, :]))


def test_unwritten_parts_of_a_caller_output_keep_the_callers_data():
    x = RNG.random((4, 8)).astype(np.float32)
    out = np.full((4, 8), -7.0, np.float32)
    assert write_top_rows(x, out) is None
    np.testing.assert_array_equal(out[:2], x[:2])
    np.testing.assert_array_equal(out[2:], -7.0)


@nki.jit
def returns_reshaped(x, out):
    """Returns the allocated result and the caller's output, both reshaped."""
    res = nl.ndarray((4, 8), x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(res, t)
    nl.store(out, t)
    return res.reshape((2, 16)), out.reshape((32,))


def test_a_returned_reshape_keeps_its_shape():
    x = RNG.random((4, 8)).astype(np.float32)
    out = np.zeros((4, 8), np.float32)
    res, flat = returns_reshaped(x, out)
    assert res.shape == (2, 16) and flat.shape == (32,)
    np.testing.assert_array_equal(res, x.reshape(2, 16))
    np.testing.assert_array_equal(flat, x.reshape(32))
    assert np.shares_memory(flat, out)      # a view of the caller's tensor


@nki.jit
def returns_a_slice(x):
    res = nl.ndarray((4, 8), x.dtype, buffer=nl.shared_hbm)
    nl.store(res, nl.load(x))
    return res[1:3, 2:6]


def test_a_returned_slice_is_that_part_of_the_tensor():
    x = RNG.random((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(returns_a_slice(x), x[1:3, 2:6])


@old_nki.jit
def masked_store(x, out):
    """Old dialect: rows 0..n-1 of a 128-row tile, stored under ``mask=`` into the caller's ``out``."""
    n = x.shape[0]
    i_p, i_f = old_nl.arange(128)[:, None], old_nl.arange(x.shape[1])[None, :]
    t = old_nl.load(x[i_p, i_f], mask=(i_p < n))
    old_nl.store(out[i_p, i_f], value=t, mask=(i_p < 96))


def test_a_masked_store_stores_only_the_masked_elements():
    x = RNG.random((128, 8)).astype(np.float32)
    out = np.full((128, 8), 3.0, np.float32)
    masked_store(x, out)
    np.testing.assert_array_equal(out[:96], x[:96])
    np.testing.assert_array_equal(out[96:], 3.0)


@nki.jit
def returns_a_tile(x):
    t = nl.load(x)
    return t


def test_returning_an_on_chip_tile_points_at_the_return_line_and_names_it():
    with pytest.raises(KernelRuleError) as info:
        returns_a_tile(np.ones((2, 2), np.float32))
    err = info.value
    lines, first = inspect.getsourcelines(returns_a_tile.fn)
    ret_line = first + next(i for i, line in enumerate(lines) if line.strip() == "return t")
    assert err.rule == "kernel-return" and err.loc.line == ret_line
    assert err.operand == "load" and "on-chip (sbuf) tile" in str(err) and "return t" in str(err)


def test_returning_a_number_is_a_kernel_return_error():
    @nki.jit
    def returns_number(x):
        return 3
    with pytest.raises(KernelRuleError, match=r"it returns int 3 .*\[rule: kernel-return\]"):
        returns_number(np.ones((2, 2), np.float32))
