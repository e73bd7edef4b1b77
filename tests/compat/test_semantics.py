"""Old-dialect semantics: masks, PSUM accumulation with +=, iota/affine_select, benchmark results, errors."""
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkihub.nki.errors import KernelRuleError


@nki.jit
def masked_exp(x):
    n, f = x.shape
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(f)[None, :]
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        tile = nl.load(x[rows, i_f], mask=(rows < n))
        e = nl.exp(tile, mask=(rows < n))
        nl.store(out[rows, i_f], value=e, mask=(rows < n))
    return out


def test_mask_partial_last_tile():
    x = np.random.default_rng(0).standard_normal((200, 16)).astype(np.float32)
    np.testing.assert_allclose(masked_exp(x), np.exp(x), rtol=1e-6)


def test_out_of_bounds_without_mask_is_a_rule_error():
    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(16)[None, :]
        nl.store(out[i_p, i_f], value=nl.load(x[64 + i_p, i_f]))
        return out
    with pytest.raises(KernelRuleError, match="index-out-of-bounds"):
        bad(np.zeros((128, 16), np.float32))


@nki.jit
def matmul_acc(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        a = nl.load(lhsT[k * 128:(k + 1) * 128, :])
        b = nl.load(rhs[k * 128:(k + 1) * 128, :])
        res += nisa.nc_matmul(a, b)
    nl.store(out, value=nl.copy(res, dtype=nl.float32))
    return out


def test_psum_accumulation_with_plus_equals_and_benchmark():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((256, 64)).astype(np.float32)
    b = rng.standard_normal((256, 96)).astype(np.float32)
    np.testing.assert_allclose(matmul_acc(a, b), a.T @ b, rtol=1e-4, atol=1e-3)
    prog = matmul_acc.trace(a, b)
    assert sum(i.opcode == "nc_matmul" for i in prog.instructions) == 2
    bench = nki.benchmark(warmup=2, iters=3)(matmul_acc)
    np.testing.assert_allclose(bench(a, b), a.T @ b, rtol=1e-4, atol=1e-3)
    lat = bench.benchmark_result.nc_latency
    assert lat.get_latency_percentile(50) == lat.get_latency_percentile(99) > 0
    with pytest.raises(ValueError):
        lat.get_latency_percentile(101)


def test_iota_affine_select_and_transpose():
    @nki.jit
    def k(x):
        out = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray((32, 32), dtype=nl.int32, buffer=nl.shared_hbm)
        out3 = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(32)[:, None], nl.arange(32)[None, :]
        t = nl.load(x)
        nl.store(out, nisa.affine_select(i_p - i_f >= 0, t, -1.0))
        nl.store(out2, nisa.iota(i_p * 100 + i_f, dtype=nl.int32))
        nl.store(out3, nisa.nc_transpose(t))
        return out, out2, out3
    x = np.random.default_rng(2).standard_normal((32, 32)).astype(np.float32)
    sel, io, tr = k(x)
    np.testing.assert_array_equal(sel, np.where(np.tri(32, dtype=bool), x, -1.0))
    np.testing.assert_array_equal(io, np.arange(32)[:, None] * 100 + np.arange(32)[None, :])
    np.testing.assert_array_equal(tr, x.T)


def test_nc_grid_and_mgrid_names():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.mgrid[0:64, 0:8]
        rows = nl.program_id(0) * 64 + i.p
        nl.store(out[rows, i.x], value=nl.multiply(nl.load(x[rows, i.x]), 2.0))
        return out
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    np.testing.assert_array_equal(k[nl.spmd_dim(nl.nc(2))](x), 2 * x)


def test_load_transpose2d_and_tensor_methods():
    @nki.jit
    def k(x):
        out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load_transpose2d(x)
        nl.store(out, t.astype(nl.float32).assert_shape((16, 8)))
        return out
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(k(x), x.T)


def test_affine_range_with_precise_schedule_keeps_the_kernel_order():
    # precise_schedule=True (not in the public docs; nki-samples' pipelined_attention passes it) keeps the
    # kernel's order: an iteration may use what the one before wrote.
    @nki.jit
    def running(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((128, x.shape[1]), nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(x.shape[0] // 128, precise_schedule=True):
            acc = nl.add(acc, nl.load(x[i * 128:(i + 1) * 128, :]))
            nl.store(out[i * 128:(i + 1) * 128, :], acc)
        return out

    x = np.random.default_rng(7).standard_normal((256, 8)).astype(np.float32)
    np.testing.assert_allclose(running(x), np.concatenate([x[:128], x[:128] + x[128:]]), rtol=1e-6)
    assert [lp.kind for lp in running.trace(x).loops.values()] == ["sequential"]


def test_gemm_grids_index_the_matmul_tiles():
    # gemm_grid: the moving operand / result tile [128, 512]; gemm_stationary_grid: the stationary [128, 128].
    @nki.jit
    def mm(a, b):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.gemm_grid()
        s_p, s_f = nl.gemm_stationary_grid()
        stationary = nl.load(a[s_p, s_f])
        moving = nl.load(b[i_p, i_f])
        res = nisa.nc_matmul(stationary, moving)
        nl.store(out[i_p, i_f], value=res)
        return out

    r = np.random.default_rng(8)
    a, b = r.standard_normal((128, 128)).astype(np.float32), r.standard_normal((128, 512)).astype(np.float32)
    np.testing.assert_allclose(mm(a, b), a.T @ b, rtol=1e-4, atol=1e-3)
