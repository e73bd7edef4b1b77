"""ALU operators of the instruction table that take one input: ``nl.abs`` (|x|) and ``nl.invert``
(bitwise NOT) in ``op`` fields (AWS's operator table lists both); the scalar operand is ignored."""
from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def abs_and_max(x):
    t = nl.load(x)
    mags = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    peak = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=mags, data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.maximum, reduce_res=peak)
    out = nl.ndarray((x.shape[0], x.shape[1] + 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out[:, 0:x.shape[1]], mags)
    nl.store(out[:, x.shape[1]:x.shape[1] + 1], peak)
    return out


@nki.jit
def bitwise_not(x):
    t = nl.load(x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=t, op0=nl.invert, operand0=0, engine=nisa.vector_engine)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, r)
    return out


def test_abs_in_an_op_field_takes_magnitudes_and_feeds_the_reduction():
    x = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)
    out = abs_and_max(x)
    assert np.array_equal(out[:, :16], np.abs(x))
    assert np.array_equal(out[:, 16], np.abs(x).max(axis=1))


def test_invert_in_an_op_field_flips_every_bit():
    x = np.arange(-8, 8, dtype=np.int32).reshape(4, 4)
    assert np.array_equal(bitwise_not(x), ~x)
