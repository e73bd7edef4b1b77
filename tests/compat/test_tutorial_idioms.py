"""Old-dialect idioms the public NKI tutorials rely on, in our own small kernels: a ``mask=`` covers the
whole statement it guards, ``psum += nisa.nc_matmul(...)`` into a fresh PSUM tensor starts the
accumulation, ``nki.benchmark`` through an SPMD grid, ``nl.static_cast`` of host arrays."""
import ml_dtypes
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkihub.nki.errors import KernelRuleError

RNG = np.random.default_rng(11)


@nki.jit
def masked_statement(x):
    """Rows past n are never loaded; the mask on the store also covers exp(2v) + 1 and the activation."""
    n, f = x.shape
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(f)[None, :]
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        v = nl.load(x[rows, i_f], mask=(rows < n))
        nl.store(out[rows, i_f], value=nl.exp(nl.multiply(v, 2.0)) + 1.0, mask=(rows < n))
        a = nisa.activation(op=nl.tanh, data=v)
        nl.store(out2[rows, i_f], value=a, mask=(rows < n))
    return out, out2


def test_a_mask_covers_the_expression_it_guards():
    x = RNG.random((200, 16)).astype(np.float32)
    out, out2 = masked_statement(x)
    np.testing.assert_allclose(out, np.exp(2 * x) + 1, rtol=1e-5)
    np.testing.assert_allclose(out2, np.tanh(x), rtol=1e-5, atol=1e-6)


def test_an_unmasked_use_still_reads_the_unloaded_rows():
    """The mask covers only its own statement: using the same value unmasked elsewhere is still a read of
    rows nothing loaded."""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(16)[None, :]
        v = nl.load(x[i_p, i_f], mask=(i_p < 100))
        e = nl.exp(v)
        nl.store(out, value=e * 2.0)
        return out
    with pytest.raises(KernelRuleError, match="read-uninitialized"):
        k(np.zeros((100, 16), np.float32))


@nki.jit
def masked_reduction_then_narrower_store(x):
    """A reduction under one mask (the rows loaded) stored under a narrower one (the rows wanted): the
    reduction's result is a full 128-row tile, so the store's mask cuts it like the destination."""
    n, k, f = x.shape
    out = nl.ndarray((n - 10, f), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_k, i_f = nl.mgrid[0:128, 0:k, 0:f]
    t = nl.load(x[i_p, i_k, i_f], mask=(i_p < n))
    m = nl.max(t[i_p, i_k, i_f], axis=[1], mask=(i_p < n))
    i_o, i_g = nl.mgrid[0:128, 0:f]
    nl.store(out[i_o, i_g], value=m, mask=(i_o < n - 10))
    return out


def test_a_masked_reduction_keeps_the_full_tile_shape():
    x = RNG.random((100, 3, 8)).astype(np.float32)
    np.testing.assert_array_equal(masked_reduction_then_narrower_store(x), x.max(axis=1)[:90])


@nki.jit
def accumulate_into_fresh_psum(lhsT, rhs):
    """``psum[i] += nc_matmul(...)`` into an uninitialised nl.ndarray(..., buffer=nl.psum) per block."""
    k, m = lhsT.shape
    _, n = rhs.shape
    out = nl.ndarray((2, m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((2, nl.par_dim(m), n), dtype=nl.float32, buffer=nl.psum)
    for b in nl.affine_range(2):
        for kt in nl.affine_range(k // 128):
            a = nl.load(lhsT[kt * 128:(kt + 1) * 128, :])
            w = nl.load(rhs[kt * 128:(kt + 1) * 128, :])
            acc[b, :, :] += nisa.nc_matmul(a, w)
        nl.store(out[b], value=nl.multiply(acc[b], b + 1.0))
    return out


def test_plus_equals_into_a_fresh_psum_tensor_starts_the_accumulation():
    lhsT = RNG.standard_normal((256, 32)).astype(np.float32)
    rhs = RNG.standard_normal((256, 64)).astype(np.float32)
    got = accumulate_into_fresh_psum(lhsT, rhs)
    ref = lhsT.T @ rhs
    np.testing.assert_allclose(got, np.stack([ref, 2 * ref]), rtol=1e-4, atol=1e-3)
    mm = [i.attrs["accumulate"] for i in accumulate_into_fresh_psum.trace(lhsT, rhs).instructions
          if i.opcode == "nc_matmul"]
    assert mm == [False, True, False, True]


@nki.jit
def add_tile(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 32 + nl.arange(32)[None, :]
    nl.store(out[ix, iy], value=nl.load(a[ix, iy]) + nl.load(b[ix, iy]))
    return out


def test_benchmark_through_an_spmd_grid_records_its_result():
    a = RNG.random((256, 64)).astype(np.float32)
    bench = nki.benchmark(warmup=1, iters=2)(add_tile)
    np.testing.assert_allclose(bench[2, 2](a, a), 2 * a)
    assert bench.benchmark_result is not None
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) > 0


def test_static_cast_of_host_arrays_rounds_like_the_hardware():
    x = np.array([1.0 + 2 ** -9, 3.14159, -2.5e-3], np.float64)
    got = nl.static_cast(x, nl.bfloat16)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, x.astype(np.float32).astype(ml_dtypes.bfloat16))


@nki.jit
def blocked_matmul(lhsT, rhs):
    """Two column blocks of lhsT and of rhs held in SBUF as block tiles (K // 128 blocks each), multiplied
    block by block into PSUM: at K = 8192 the rhs tiles take 128 KiB and the lhsT tiles 32 KiB of trn1's
    192 KiB per partition, with 1 KiB load and result tiles coming and going around them."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    kt, ip, im, i_n = K // 128, nl.arange(128)[:, None], nl.arange(128)[None, :], nl.arange(512)[None, :]
    for m in nl.affine_range(M // 256):
        left = nl.ndarray((2, kt, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        for b in nl.affine_range(2):
            for k in nl.affine_range(kt):
                left[b, k, ip, im] = nl.load(lhsT[k * 128 + ip, (2 * m + b) * 128 + im])
        for n in nl.affine_range(N // 1024):
            right = nl.ndarray((2, kt, nl.par_dim(128), 512), dtype=rhs.dtype, buffer=nl.sbuf)
            for b in nl.affine_range(2):
                for k in nl.affine_range(kt):
                    right[b, k, ip, i_n] = nl.load(rhs[k * 128 + ip, (2 * n + b) * 512 + i_n])
            for bm in nl.affine_range(2):
                for bn in nl.affine_range(2):
                    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(kt):
                        acc += nl.matmul(left[bm, k, ip, im], right[bn, k, ip, i_n], transpose_x=True)
                    nl.store(out[(2 * m + bm) * 128 + ip, (2 * n + bn) * 512 + i_n],
                             value=nl.copy(acc, dtype=out.dtype))
    return out


def test_blocked_matmul_tiles_fit_trn1_sbuf():
    """Placing the tiles in order of first use (next fit) leaves no 128 KiB hole for the second rhs
    block tile; the allocator finds the placement a compiler would and the kernel compiles for trn1."""
    lhsT = np.zeros((8192, 512), ml_dtypes.bfloat16)
    rhs = np.zeros((8192, 2048), ml_dtypes.bfloat16)
    prog = blocked_matmul.trace(lhsT, rhs, target="trn1")
    blocks = [s for s in prog.tensors.values() if s.block_addresses]
    assert {s.blocks for s in blocks} == {128}
    assert all(0 <= a and a + s.block_bytes <= 192 * 1024 for s in blocks for a in s.block_addresses)


def test_blocked_matmul_matches_numpy():
    rng = np.random.default_rng(3)
    lhsT = rng.standard_normal((256, 256)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((256, 1024)).astype(ml_dtypes.bfloat16)
    got = blocked_matmul.run(lhsT, rhs, target="trn1").astype(np.float32)
    want = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
