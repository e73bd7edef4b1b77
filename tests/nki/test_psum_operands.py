"""The high-level ``nl`` functions take PSUM tiles where their engines need SBUF (AWS: "If the tile is in
PSUM, an extra copy will be performed"), and ``nisa.tensor_copy`` takes an output ``dtype``."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import neuronxcc.nki as old_nki
import neuronxcc.nki.language as old_nl
import nki
import nki.isa as nisa
import nki.language as nl

RNG = np.random.default_rng(7)


def _opcodes(program):
    return [(i.opcode, {r: program.tensors[ap.tensor].buffer for r, ap in i.src.items()}) for i in program.instructions]


@nki.jit
def matmul_of_a_transpose(x, y):
    """(x.T) @ y where x.T comes out of nl.transpose in PSUM; the product is stored straight from PSUM."""
    out = nl.ndarray((x.shape[1], y.shape[1]), nl.float32, buffer=nl.shared_hbm)
    xt = nl.transpose(nl.load(x))            # x [K, M] -> [M, K], in PSUM
    prod = nl.matmul(xt, nl.load(y))         # a PSUM operand: copied to SBUF first
    nl.store(out, prod)                      # a PSUM value: copied to SBUF before the DMA
    return out


def test_matmul_and_store_take_psum_tiles():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    y = RNG.standard_normal((128, 96)).astype(np.float32)
    np.testing.assert_allclose(matmul_of_a_transpose(x, y), x.T @ y, rtol=1e-4, atol=1e-4)
    ops = _opcodes(matmul_of_a_transpose.trace(x, y))
    # Every Tensor Engine input and every DMA source is in SBUF: the PSUM tiles were copied.
    assert all(buf == "sbuf" for op, srcs in ops if op in ("nc_matmul", "nc_transpose") for buf in srcs.values())
    assert all(buf != "psum" for op, srcs in ops if op == "dma_copy" for buf in srcs.values())
    assert ("tensor_copy", {"src": "psum"}) in ops


@old_nki.jit
def old_store_of_psum(x):
    out = old_nl.ndarray((x.shape[1], x.shape[1]), dtype=old_nl.float32, buffer=old_nl.shared_hbm)
    t = old_nl.load(x)
    old_nl.store(out, value=old_nl.matmul(t, t, transpose_x=True))   # x.T @ x, a PSUM tile
    return out


def test_old_dialect_store_of_a_psum_tile():
    x = RNG.standard_normal((64, 32)).astype(np.float32)
    np.testing.assert_allclose(old_store_of_psum(x), x.T @ x, rtol=1e-4, atol=1e-4)


@nki.jit
def copy_with_dtype(x, dtype):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=t, dtype=dtype)
    nl.store(out, r)
    return out


def test_tensor_copy_dtype_rounds_through_it():
    """An fp32 destination with dtype=bfloat16 holds bf16-rounded values (the engine's output dtype)."""
    x = (1 + RNG.random((4, 8)) * 2 ** -10).astype(np.float32)
    got = copy_with_dtype(x, nl.bfloat16)
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert not np.array_equal(got, x)
    np.testing.assert_array_equal(copy_with_dtype(x, nl.float32), x)
    same = [i for i in copy_with_dtype.trace(x, nl.float32).instructions if i.opcode == "tensor_copy"]
    assert same and "dtype" not in same[0].attrs   # the destination's own dtype changes nothing
