"""The high-level ``nl`` functions take PSUM tiles where their engines need SBUF (AWS: "If the tile is in
PSUM, an extra copy will be performed"), and ``nisa.tensor_copy`` takes an output ``dtype``."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

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


@nki.jit
def five_free_dims(x):
    """exp and add over a [4, 2, 2, 2, 2, 2] view whose free dims cannot merge (every dim is sliced)."""
    out = nl.ndarray((4, 2, 2, 2, 2, 2), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    v = t[:, 0:2, 0:2, 0:2, 0:2, 0:2]
    nl.store(out, nl.add(nl.exp(v), v))
    return out


def test_nl_expressions_over_more_than_four_free_dims_are_split():
    x = RNG.random((4, 3, 3, 3, 3, 3)).astype(np.float32)
    v = x[:, :2, :2, :2, :2, :2]
    np.testing.assert_allclose(five_free_dims(x), np.exp(v) + v, rtol=1e-6)
    prog = five_free_dims.trace(x)
    acts = [i for i in prog.instructions if i.opcode == "activation"]
    assert len(acts) == 2
    assert all(len(ap.dims) - 1 <= 4 for i in prog.instructions if i.opcode != "dma_copy"
               for ap in (*i.dst.values(), *i.src.values()))


def test_an_isa_instruction_over_five_free_dims_is_refused():
    @nki.jit
    def k(x):
        out = nl.ndarray((4, 2, 2, 2, 2, 2), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = nl.ndarray((4, 2, 2, 2, 2, 2), nl.float32, buffer=nl.sbuf)
        nisa.activation(r, nl.exp, t[:, 0:2, 0:2, 0:2, 0:2, 0:2])
        nl.store(out, r)
        return out
    with pytest.raises(nki.KernelRuleError, match="access-pattern-dims"):
        k(RNG.random((4, 3, 3, 3, 3, 3)).astype(np.float32))


def test_shared_identity_matrix_lives_in_sbuf():
    """AWS NKI: "an identity matrix in SBUF" (default dtype uint8); it feeds the Tensor Engine directly.
    The old dialect's is a shared constant in HBM, loaded like one."""
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        eye = nl.shared_identity_matrix(n=x.shape[0], dtype=nl.float32)
        assert eye.buffer == "sbuf" and nl.shared_identity_matrix(4).dtype == np.uint8
        mine = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        assert nl.shared_identity_matrix(x.shape[0], dtype=nl.float32, dst=mine) is mine
        p = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
        nisa.nc_matmul(p, eye, nl.load(x))           # I.T @ x = x
        nl.store(out, nl.add(p, mine))               # ... + I
        return out

    @old_nki.jit
    def old(x):
        out = old_nl.ndarray(x.shape, dtype=old_nl.float32, buffer=old_nl.shared_hbm)
        eye = old_nl.shared_identity_matrix(x.shape[0], dtype=old_nl.float32)
        assert eye.buffer == "shared_hbm"
        old_nl.store(out, value=old_nl.load(eye))
        return out
    x = RNG.random((32, 32)).astype(np.float32)
    np.testing.assert_allclose(k(x), x + np.eye(32), rtol=1e-6)
    np.testing.assert_array_equal(old(x), np.eye(32))
