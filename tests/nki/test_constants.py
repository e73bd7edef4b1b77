"""Constants of ``nki.language`` as AWS NKI 0.3+ documents them: ``shared_identity_matrix`` is an SBUF tile
(uint8 unless a dtype is given, written into ``dst`` when passed), ``shared_constant`` takes an array or the
path of a ``.npy`` file; and a tensor handle is truthy (``if params.bias:`` tests that one was given)."""
from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def test_identity_matrix_is_an_sbuf_tile_of_the_requested_dtype():
    seen = {}

    @nki.jit
    def k(x):
        eye = nl.shared_identity_matrix(32)
        seen["default"] = (eye.buffer, eye.dtype, eye.shape)
        into = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.sbuf)
        same = nl.shared_identity_matrix(32, dtype=nl.float32, dst=into)
        seen["dst"] = same is into
        out = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.add(into, nl.load(x)))
        return out

    x = np.ones((32, 32), np.float32)
    assert np.array_equal(k(x), np.eye(32) + 1)
    assert seen["default"] == ("sbuf", np.dtype(np.uint8), (32, 32)) and seen["dst"]


def test_shared_constant_loads_a_npy_file(tmp_path):
    path = tmp_path / "table.npy"
    table = np.arange(64, dtype=np.float32).reshape(8, 8)
    np.save(path, table)

    @nki.jit
    def k(x):
        c = nl.shared_constant(str(path))
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(c), nl.load(x)))
        return out

    assert np.array_equal(k(np.ones((8, 8), np.float32)), table + 1)


def test_optional_tensor_arguments_are_tested_by_truth():
    @nki.jit
    def k(x, bias=None):
        t = nl.load(x)
        if bias:
            t = nl.add(t, nl.load(bias))
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    x = np.ones((4, 8), np.float32)
    assert np.array_equal(k(x), x) and np.array_equal(k(x, bias=x), 2 * x)
