"""nc_matmul's FP8 double-row performance mode (the matmul_perf_mode page: "Double FP8 mode, 2x matmul
throughput by packing two FP8 weight/ifmap element pairs"; NeuronCore-v3 and newer): operands carry two
contraction rows per partition, stationary [K, 2, M] and moving [K, 2, N], and dst[M, N] sums all 2K."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.nki.errors import KernelRuleError

FP8 = ml_dtypes.float8_e4m3


def kernel_for(mode, target="trn2"):
    @nki.jit(platform_target=target)
    def mm(a, b):
        k, _, m = a.shape
        n = b.shape[2]
        st = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        mv = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=st, src=a)
        nisa.dma_copy(dst=mv, src=b)
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=st, moving=mv, perf_mode=mode)
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=acc)
        nisa.dma_copy(dst=out, src=t)
        return out
    return mm


@pytest.mark.parametrize("k,m,n", [(128, 128, 512), (64, 16, 1000 // 2)])
@pytest.mark.parametrize("mode", [nisa.matmul_perf_mode.double_row, "double_row_gen3"])
def test_double_row_contracts_both_rows_of_each_partition(k, m, n, mode):
    rng = np.random.default_rng(0)
    a = rng.uniform(-2, 2, (k, 2, m)).astype(FP8)
    b = rng.uniform(-2, 2, (k, 2, n)).astype(FP8)
    want = np.einsum("kri,krj->ij", a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_allclose(kernel_for(mode)(a, b), want, rtol=1e-5, atol=1e-4)


def test_double_row_needs_neuroncore_v3_and_fp8_pairs():
    a = np.ones((32, 2, 8), FP8)
    b = np.ones((32, 2, 16), FP8)
    with pytest.raises(KernelRuleError, match="matmul-perf-mode.*NeuronCore-v3|NeuronCore-v3.*matmul-perf-mode"):
        kernel_for(nisa.matmul_perf_mode.double_row, "trn1")(a, b)
    with pytest.raises(KernelRuleError, match="fp8 inputs"):
        kernel_for(nisa.matmul_perf_mode.double_row)(a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16))
    with pytest.raises(KernelRuleError, match=r"two rows per partition"):
        kernel_for(nisa.matmul_perf_mode.double_row)(np.ones((32, 4, 8), FP8), np.ones((32, 4, 16), FP8))
