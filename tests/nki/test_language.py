"""``nki.language`` (nl) kernels against numpy: indexing, tile_size, loops, program ids, operators,
reductions, matmul, transpose, softmax, where, copy, broadcast_to and device_print."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki
import nki.language as nl
from nkihub.simulator.targets import TRN1, TRN3

F32, BF16 = np.float32, ml_dtypes.bfloat16
RNG = np.random.default_rng(0)


def rand(*shape, dtype=F32):
    return RNG.uniform(-2, 2, size=shape).astype(F32).astype(dtype)


def unary_kernel(fn, out_shape=None, out_dtype=None):
    """A kernel that loads x, applies ``fn`` to the tile and stores the result."""
    @nki.jit
    def kernel(x):
        t = nl.load(x)
        y = fn(t)
        out = nl.ndarray(out_shape or y.shape, out_dtype or y.dtype, buffer=nl.shared_hbm)
        nl.store(out, y)
        return out
    return kernel


# -- indexing -------------------------------------------------------------------------------------------------
INDEXES = {
    "ints": (lambda x: x[3, 5:6], lambda a: a[3, 5:6]),
    "slices": (lambda x: x[2:6, 1:9], lambda a: a[2:6, 1:9]),
    "steps": (lambda x: x[0:8, 1:16:3], lambda a: a[0:8, 1:16:3]),
    "negative": (lambda x: x[-4:, :-2], lambda a: a[-4:, :-2]),
    "ellipsis": (lambda x: x[..., 4], lambda a: a[..., 4:5]),
    "ellipsis-lead": (lambda x: x[1:3, ...], lambda a: a[1:3, ...]),
    "ds": (lambda x: x[nl.ds(2, 4), nl.ds(8, 8)], lambda a: a[2:6, 8:16]),
}


@pytest.mark.parametrize("case", sorted(INDEXES))
def test_hbm_indexing(case):
    view, ref = INDEXES[case]
    x = rand(8, 16)

    @nki.jit
    def kernel(x):
        v = view(x)
        out = nl.ndarray(v.shape, v.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(v))
        return out

    got = kernel(x)
    want = ref(x)
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_tile_indexing_and_assignment():
    """Writing into a slice of an SBUF tile, then reading a strided view of it."""
    x = rand(4, 8)

    @nki.jit
    def kernel(x):
        t = nl.ndarray((4, 16), nl.float32, buffer=nl.sbuf)
        t[:, 0:8] = nl.load(x)
        t[:, 8:16] = 1.5
        out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(t[:, ::2]))
        return out

    np.testing.assert_array_equal(kernel(x), np.concatenate([x, np.full((4, 8), 1.5, F32)], 1)[:, ::2])


def test_three_dim_hbm_tensor():
    x = rand(2, 4, 8)

    @nki.jit
    def kernel(x):
        out = nl.ndarray((2, 4, 8), x.dtype, buffer=nl.shared_hbm)
        for b in nl.affine_range(2):
            nl.store(out[b], nl.exp(nl.load(x[b])))
        return out

    np.testing.assert_allclose(kernel(x), np.exp(x), rtol=1e-6)


# -- tile_size, loops, program ids ----------------------------------------------------------------------------
def test_tile_size_follows_the_target():
    assert (nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax) == (128, 128, 512)
    assert nl.tile_size.psum_fmax == nl.tile_size.psum_bank_fmax == 512  # NKI 0.4+: one bank, fp32
    assert nl.tile_size.psum_num_banks == 8 and nl.tile_size.bn_stats_fmax == 512
    seen = {}

    @nki.jit
    def kernel(x):
        seen["sbuf"] = nl.tile_size.total_available_sbuf_size
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    kernel.trace(rand(2, 2), target="trn1")
    assert seen["sbuf"] == TRN1.sbuf_bytes_per_partition
    kernel.trace(rand(2, 2), target="trn3")
    assert seen["sbuf"] == TRN3.sbuf_bytes_per_partition


@pytest.mark.parametrize("loop", [nl.affine_range, nl.sequential_range, nl.static_range, range])
def test_loops_unroll(loop):
    x = rand(8, 12)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        for i in loop(1, 8, 2):            # start, stop, step
            nl.store(out[i - 1:i + 1, :], nl.multiply(nl.load(x[i - 1:i + 1, :]), 2.0))
        return out

    np.testing.assert_array_equal(kernel(x), x * 2)
    kinds = {lp.kind for lp in kernel.trace(x).loops.values()}
    assert kinds == ({} if loop is range else {loop.__name__.split("_")[0]}) or loop is range


def test_sequential_range_carries_a_value():
    x = rand(4, 8)

    @nki.jit
    def kernel(x):
        acc = nl.zeros((4, 8), nl.float32)
        for i in nl.sequential_range(3):
            acc[...] = nl.add(acc, nl.load(x))
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, acc)
        return out

    np.testing.assert_allclose(kernel(x), 3 * x, rtol=1e-6)


def test_program_id_and_num_programs_in_a_grid():
    x = rand(6, 4)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        i, n = nl.program_id(0), nl.num_programs(0)
        rows = x.shape[0] // n
        assert nl.program_ndim() == 1
        nl.store(out[i * rows:(i + 1) * rows, :], nl.add(nl.load(x[i * rows:(i + 1) * rows, :]), float(i)))
        return out

    got = kernel[3](x)
    np.testing.assert_allclose(got, x + np.repeat(np.arange(3, dtype=F32), 2)[:, None], rtol=1e-6)


# -- operators and functions ----------------------------------------------------------------------------------
OPERATORS = {"+": (lambda a, b: a + b), "-": (lambda a, b: a - b), "*": (lambda a, b: a * b),
             "/": (lambda a, b: a / b)}


@pytest.mark.parametrize("sym", sorted(OPERATORS))
@settings(max_examples=8, deadline=None)
@given(p=st.sampled_from([1, 5, 128]), f=st.integers(1, 40), bf16=st.booleans(), scalar_left=st.booleans())
def test_operators_with_tiles_and_numbers(sym, p, f, bf16, scalar_left):
    fn = OPERATORS[sym]
    dt = BF16 if bf16 else F32
    a, b = rand(p, f, dtype=dt), (rand(p, f, dtype=dt) + 3).astype(dt)

    @nki.jit
    def kernel(a, b):
        ta, tb = nl.load(a), nl.load(b)
        y = fn(fn(ta, tb), 2.0) if not scalar_left else fn(0.5, fn(ta, tb))
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, y)
        return out

    a32, b32 = a.astype(F32), b.astype(F32)
    inner = fn(a32, b32).astype(dt).astype(F32)  # each nl call returns a tile of the inputs' dtype
    want = (fn(inner, F32(2.0)) if not scalar_left else fn(F32(0.5), inner)).astype(dt)
    got = kernel(a, b)
    assert got.dtype == dt
    np.testing.assert_array_equal(got.astype(F32), want.astype(F32))


def test_column_broadcast_operand():
    x, c = rand(8, 16), rand(8, 1)

    @nki.jit
    def kernel(x, c):
        y = nl.subtract(nl.load(x), nl.load(c))
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, y)
        return out

    np.testing.assert_array_equal(kernel(x, c), x - c)


UNARY = {"exp": np.exp, "tanh": np.tanh, "relu": lambda v: np.maximum(v, 0), "square": np.square,
         "abs": np.abs, "negative": np.negative, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
         "sqrt": lambda v: np.sqrt(np.abs(v)), "log": lambda v: np.log(np.abs(v)),
         "rsqrt": lambda v: 1 / np.sqrt(np.abs(v)), "reciprocal": lambda v: 1 / v,
         "silu": lambda v: v / (1 + np.exp(-v)), "gelu_apprx_tanh": lambda v: 0.5 * v * (1 + np.tanh(
             np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_functions(name):
    x = rand(16, 24)
    positive = name in ("sqrt", "log", "rsqrt")
    kernel = unary_kernel(lambda t: getattr(nl, name)(nl.abs(t) if positive else t))
    np.testing.assert_allclose(kernel(x), UNARY[name](x.astype(np.float64)), rtol=2e-6, atol=1e-6)


def test_maximum_minimum():
    a, b = rand(4, 8), rand(4, 8)

    @nki.jit
    def kernel(a, b):
        ta, tb = nl.load(a), nl.load(b)
        out = nl.ndarray((2, 4, 8), a.dtype, buffer=nl.shared_hbm)
        nl.store(out[0], nl.maximum(ta, tb))
        nl.store(out[1], nl.minimum(ta, tb))
        return out

    got = kernel(a, b)
    np.testing.assert_array_equal(got[0], np.maximum(a, b))
    np.testing.assert_array_equal(got[1], np.minimum(a, b))


@pytest.mark.parametrize("name,ref", [("max", np.max), ("min", np.min), ("sum", np.sum), ("mean", np.mean)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [1, 2, (1, 2), -1])
def test_reductions(name, ref, keepdims, axis):
    x = rand(8, 6, 10)
    kernel = unary_kernel(lambda t: getattr(nl, name)(t, axis=axis, keepdims=keepdims))
    want = ref(x.astype(np.float64), axis=axis, keepdims=keepdims)
    got = kernel(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transpose_x", [False, True])
def test_matmul(transpose_x):
    x, y = rand(64, 96, dtype=BF16), rand(96, 200, dtype=BF16)
    xin = np.ascontiguousarray(x.T) if transpose_x else x

    @nki.jit
    def kernel(x, y):
        r = nl.matmul(nl.load(x), nl.load(y), transpose_x=transpose_x)
        out = nl.ndarray(r.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(r))
        return out

    got = kernel(xin, y)
    assert got.shape == (64, 200)
    np.testing.assert_allclose(got, x.astype(np.float64) @ y.astype(np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape", [(16, 24), (128, 100)])
def test_transpose(shape):
    x = rand(*shape)
    kernel = unary_kernel(lambda t: nl.copy(nl.transpose(t), dtype=nl.float32))
    np.testing.assert_array_equal(kernel(x), x.T)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_softmax(dtype):
    x = rand(32, 64, dtype=dtype)
    got = unary_kernel(lambda t: nl.softmax(t, axis=1))(x)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(F32), e / e.sum(1, keepdims=True),
                               rtol=1e-5 if dtype == F32 else 8e-3, atol=1e-6)


def test_where_copy_and_dtype():
    x = rand(8, 16)

    @nki.jit
    def kernel(x):
        t = nl.load(x)
        w = nl.where(nl.greater(t, 0.0), t, -1.0)
        out = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(w, dtype=nl.bfloat16))
        return out

    got = kernel(x)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got, np.where(x > 0, x, -1).astype(BF16))


def test_broadcast_to_along_free_and_partition_dims():
    row, col = rand(1, 8), rand(4, 1)

    @nki.jit
    def kernel(row, col):
        out = nl.ndarray((2, 4, 8), nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], nl.broadcast_to(nl.load(row), (4, 8)))
        nl.store(out[1], nl.broadcast_to(nl.load(col), (4, 8)))
        return out

    got = kernel(row, col)
    np.testing.assert_array_equal(got[0], np.broadcast_to(row, (4, 8)))
    np.testing.assert_array_equal(got[1], np.broadcast_to(col, (4, 8)))


def test_zeros_ones_full_and_likes():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((4, 4, 6), nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], nl.zeros((4, 6), nl.float32))
        nl.store(out[1], nl.ones((4, 6), nl.bfloat16))
        nl.store(out[2], nl.full((4, 6), 2.5, nl.float32))
        t = nl.load(x)
        z = nl.zeros_like(t)
        e = nl.empty_like(t)
        e[...] = 3.0
        nl.store(out[3], nl.add(z, e))
        return out

    got = kernel(rand(4, 6))
    np.testing.assert_array_equal(got[:, 0, 0], [0, 1, 2.5, 3])
    assert (got == got[:, :1, :1]).all()


def test_device_print(capsys):
    x = np.arange(6, dtype=F32).reshape(2, 3)

    @nki.jit
    def kernel(x):
        t = nl.load(x)
        nl.device_print("tile=", t)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    kernel(x)
    kernel(x)  # replay prints again: the print is an instruction, not a trace-time side effect
    assert capsys.readouterr().out.count("tile=[[0. 1. 2.]\n [3. 4. 5.]]") == 2


def test_nl_functions_outside_a_kernel_say_so():
    with pytest.raises(RuntimeError, match="inside a kernel"):
        nl.ndarray((2, 2), nl.float32)


def test_buffers_and_dtypes():
    assert nl.is_psum(nl.psum) and nl.is_sbuf(nl.sbuf) and nl.is_hbm(nl.shared_hbm) and nl.is_hbm(nl.hbm)
    assert nl.is_on_chip(nl.sbuf) and not nl.is_on_chip(nl.private_hbm)
    assert nl.bfloat16 == np.dtype(BF16) and nl.float8_e4m3 == np.dtype(ml_dtypes.float8_e4m3)
    with pytest.raises(ValueError, match="unknown buffer"):
        nl.is_psum("dram")


def test_nl_range_is_an_in_order_loop_that_may_carry_values():
    # nl.range (used by nki-library, not on the API pages) behaves as the loop a Python range in a kernel
    # becomes: sequential, so a value carried from one iteration to the next is legal.
    @nki.jit
    def running_sum(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((128, x.shape[1]), nl.float32, buffer=nl.sbuf)
        for i in nl.range(x.shape[0] // 128):
            acc = nl.add(acc, nl.load(x[nl.ds(i * 128, 128), :]))
            nl.store(out[nl.ds(i * 128, 128), :], acc)
        return out

    x = np.random.default_rng(3).standard_normal((384, 8)).astype(np.float32)
    want = np.cumsum(x.reshape(3, 128, 8), axis=0).reshape(384, 8)
    np.testing.assert_allclose(running_sum(x), want, rtol=1e-5, atol=1e-5)
    prog = running_sum.trace(x)
    assert [lp.kind for lp in prog.loops.values()] == ["sequential"]
    assert list(nl.range(2, 8, 3)) == [2, 5]   # outside a kernel: Python's range


@pytest.mark.parametrize("dtype,value", [(np.int32, 100), (np.float32, -2.5)])
def test_store_of_a_number_fills_the_hbm_view(dtype, value):
    # nl.store's page: "value: an SBUF tile or a scalar value"; a scalar fills every element of dst
    @nki.jit
    def fill(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nki.isa.dma_copy(dst=out, src=x)
        nl.store(out[2:5, :], value)
        return out
    x = np.zeros((200, 6), dtype)
    want = x.copy()
    want[2:5] = value
    np.testing.assert_array_equal(fill(x), want)

    @nki.jit
    def fill_all(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value)
        return out
    np.testing.assert_array_equal(fill_all(x), np.full_like(x, value))
