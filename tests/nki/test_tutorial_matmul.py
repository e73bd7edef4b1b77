"""The public NKI matrix-multiplication tutorial kernel, unmodified (dma_copy into SBUF tiles, nc_matmul
accumulating into a PSUM tile across an affine_range, tensor_copy out of PSUM, dma_copy to HBM), against
numpy with bf16 inputs, fp32 accumulation and one rounding to bf16 at the end."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl


# ---- the tutorial kernel, verbatim ----
@nki.jit
def nki_matmul_tiled_(lhsT, rhs):
    K, M = lhsT.shape
    K_, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M = nl.tile_size.gemm_stationary_fmax
    TILE_K = nl.tile_size.pmax
    TILE_N = nl.tile_size.gemm_moving_fmax
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            res_psum = nl.ndarray((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                nisa.nc_matmul(dst=res_psum, stationary=lhsT_tile, moving=rhs_tile)
            res_sb = nl.ndarray(res_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb, src=res_psum)
            nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], src=res_sb)
    return result


# ---- end of the tutorial kernel ----


@pytest.mark.parametrize("k,m,n", [(128, 128, 512), (256, 384, 1024)])
def test_tutorial_matmul_matches_numpy(k, m, n):
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((k, m)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    out = nki_matmul_tiled_(lhsT, rhs)
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == (m, n)
    exact = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    # fp32 accumulation then one rounding to bf16: within half a bf16 ulp of the exact value, plus the
    # fp32 sum's own error.
    tol = np.abs(exact) * 2.0 ** -8 + 1e-4 * np.sqrt(k)
    assert (np.abs(out.astype(np.float64) - exact) <= tol).all()


def test_tutorial_matmul_program_shape():
    a = np.zeros((256, 128), ml_dtypes.bfloat16)
    b = np.zeros((256, 1024), ml_dtypes.bfloat16)
    p = nki_matmul_tiled_.trace(a, b)
    counts = {}
    for ins in p.instructions:
        counts[ins.opcode] = counts.get(ins.opcode, 0) + 1
    # 1 x 2 output tiles, 2 contraction steps each: 4 matmuls accumulating in pairs.
    assert counts == {"dma_copy": 2 * 2 * 2 + 2, "nc_matmul": 4, "tensor_copy": 2}
    assert [i.attrs["accumulate"] for i in p.instructions if i.opcode == "nc_matmul"] == [False, True] * 2


def test_tutorial_matmul_with_torch_tensors():
    a = torch.randn(128, 128).to(torch.bfloat16)
    b = torch.randn(128, 512).to(torch.bfloat16)
    out = nki_matmul_tiled_(a, b)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), (a.float().T @ b.float()), rtol=8e-3, atol=1e-2)
