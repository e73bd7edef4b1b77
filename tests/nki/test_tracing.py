"""What the builder records: an instruction's result assigned to a view is written there directly (no copy),
and a PSUM tile zeroed with ``nl.zeros`` then filled by matmuls compiles to matmuls that overwrite first
(no memset), as the compiler does; the values stay those of the copying / zeroing program."""
from __future__ import annotations

import numpy as np

import neuronxcc.nki as onki
import neuronxcc.nki.isa as onisa
import neuronxcc.nki.language as onl
import nki
import nki.isa as nisa
import nki.language as nl

RNG = np.random.default_rng(0)


def opcodes(kernel, *args):
    return [ins.opcode for ins in kernel.trace(*args).instructions]


# -- results written in place ----------------------------------------------------------------------------------
@onki.jit
def exp_into_slices(x):
    out = onl.ndarray(x.shape, dtype=x.dtype, buffer=onl.shared_hbm)
    buf = onl.ndarray((128, 2 * 64), dtype=x.dtype, buffer=onl.sbuf)
    for j in onl.affine_range(2):
        buf[:, j * 64:(j + 1) * 64] = onl.load(x[:, j * 64:(j + 1) * 64])
    for j in onl.affine_range(2):
        buf[:, j * 64:(j + 1) * 64] = onisa.activation(op=onl.exp, data=buf[:, j * 64:(j + 1) * 64])
    onl.store(out, buf)
    return out


def test_assigned_results_are_written_in_place():
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    ops = opcodes(exp_into_slices, x)
    # two loads straight into the slices, two activations in place, one store: no tensor_copy
    assert ops == ["dma_copy", "dma_copy", "activation", "activation", "dma_copy"]
    np.testing.assert_allclose(exp_into_slices(x), np.exp(x), rtol=1e-6)


@onki.jit
def reuse_after_assign(x):
    out = onl.ndarray(x.shape, dtype=x.dtype, buffer=onl.shared_hbm)
    buf = onl.ndarray((128, 64), dtype=x.dtype, buffer=onl.sbuf)
    t = onisa.activation(op=onl.exp, data=onl.load(x))
    buf[...] = t
    onl.store(out, onl.add(t, buf))       # the handle still reads the values it was assigned
    return out


def test_a_result_read_after_its_assignment_keeps_its_value():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(reuse_after_assign(x), 2 * np.exp(x), rtol=1e-6)


@onki.jit
def narrowing_assign(x):
    out = onl.ndarray(x.shape, dtype=np.float32, buffer=onl.shared_hbm)
    buf = onl.ndarray((128, 64), dtype=np.float32, buffer=onl.sbuf)
    buf[...] = onisa.activation(op=onl.exp, data=onl.load(x), dtype=nl.bfloat16)
    onl.store(out, buf)
    return out


def test_a_narrower_temporary_is_still_copied():
    # rounding to bf16 then widening is not what writing fp32 directly gives: keep the copy
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    assert "tensor_copy" in opcodes(narrowing_assign, x)


# -- PSUM zero-initialisation folded into the first matmul -------------------------------------------------------
@onki.jit
def zeros_then_matmuls(a, b):
    out = onl.ndarray((128, 512), dtype=np.float32, buffer=onl.shared_hbm)
    acc = onl.zeros((128, 512), dtype=np.float32, buffer=onl.psum)
    for k in onl.affine_range(2):
        acc += onisa.nc_matmul(onl.load(a[k * 128:(k + 1) * 128, :]), onl.load(b[k * 128:(k + 1) * 128, :]))
    onl.store(out, onl.copy(acc))
    return out


def test_psum_zeros_become_an_overwriting_first_matmul():
    a = RNG.standard_normal((256, 128)).astype(np.float32)
    b = RNG.standard_normal((256, 512)).astype(np.float32)
    program = zeros_then_matmuls.trace(a, b)
    assert "memset" not in [ins.opcode for ins in program.instructions]
    assert [ins.attrs["accumulate"] for ins in program.instructions if ins.opcode == "nc_matmul"] == [False, True]
    np.testing.assert_allclose(zeros_then_matmuls(a, b), a.T @ b, rtol=1e-4, atol=1e-3)


@nki.jit
def zeros_read_before_matmul(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    seen = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(seen, acc)            # the zeros are read: the memset has to run
    nisa.nc_matmul(acc, nl.load(a), nl.load(b), accumulate=True)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(res, acc, seen, nl.add)
    nl.store(out, res)
    return out


def test_zeros_that_are_read_are_kept():
    a = RNG.standard_normal((128, 128)).astype(np.float32)
    b = RNG.standard_normal((128, 512)).astype(np.float32)
    assert "memset" in opcodes(zeros_read_before_matmul, a, b)
    np.testing.assert_allclose(zeros_read_before_matmul(a, b), a.T @ b, rtol=1e-4, atol=1e-3)
