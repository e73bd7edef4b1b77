"""Kernels the cost-model tests estimate (tracing only: no test here runs their math)."""
from __future__ import annotations

import numpy as np
import ml_dtypes

import nki
import nki.isa as nisa
import nki.language as nl

BF16 = ml_dtypes.bfloat16


def arrays(*shapes, dtype=BF16):
    """Zero arrays of ``shapes`` (the cost model reads shapes and dtypes only)."""
    return [np.zeros(s, dtype=dtype) for s in shapes]


def make_matmul(*, hoist: bool, tile_n: int = 512, extra_vector: int = 0, activation: bool = False):
    """The tutorial tiled matmul ``out[M, N] = lhsT[K, M].T @ rhs[K, N]``; ``hoist`` loads the stationary
    tiles once per row block instead of in the innermost loop."""

    @nki.jit
    def matmul(lhsT, rhs):
        K, M = lhsT.shape
        _, N = rhs.shape
        out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
        for m in nl.affine_range(M // 128):
            kept = []
            if hoist:
                for k in nl.affine_range(K // 128):
                    t = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=t, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                    kept.append(t)
            for n in nl.affine_range(N // tile_n):
                acc = nl.ndarray((128, tile_n), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // 128):
                    if hoist:
                        st = kept[k]
                    else:
                        st = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                        nisa.dma_copy(dst=st, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                    mv = nl.ndarray((128, tile_n), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=mv, src=rhs[k * 128:(k + 1) * 128, n * tile_n:(n + 1) * tile_n])
                    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
                res = nl.ndarray((128, tile_n), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                for _ in range(extra_vector):
                    nisa.tensor_scalar(dst=res, data=res, op0=nl.multiply, operand0=1.0)
                if activation:
                    nisa.activation(dst=res, op=nl.exp, data=res)
                nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * tile_n:(n + 1) * tile_n], src=res)
        return out

    return matmul


@nki.jit
def resident_matmul(lhsT, rhs):
    """A well-tiled matmul: every operand is loaded once with long contiguous rows, then all matmuls run
    from SBUF (K, M <= 1024; N <= 2048)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    lt, rt = [], []
    for k in nl.affine_range(K // 128):
        a = nl.ndarray((128, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])
        b = nl.ndarray((128, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, :])
        lt.append(a)
        rt.append(b)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                nisa.nc_matmul(dst=acc, stationary=lt[k][:, m * 128:(m + 1) * 128],
                               moving=rt[k][:, n * 512:(n + 1) * 512])
            res = nl.ndarray((128, 512), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=res)
    return out


@nki.jit
def two_engines(a, b, dependent: bool):
    """Vector work on ``a`` and Scalar work on ``b`` (or on the Vector result when ``dependent``)."""
    out1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    vx = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=vx, data=x, op0=nl.multiply, operand0=2.0)
    sy = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.activation(dst=sy, op=nl.exp, data=vx if dependent else y)
    nisa.dma_copy(dst=out1, src=vx)
    nisa.dma_copy(dst=out2, src=sy)
    return out1, out2
