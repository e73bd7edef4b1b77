"""The kernel a new user writes from AWS's docs (issue 30): out = x + alpha * y with one alpha per row,
loads, one scalar_tensor_tensor and a store per 128-row tile inside affine_range. Shared by the profile
and picture tests."""
from __future__ import annotations

import inspect

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def axpy(x, y, alpha):
    """A new user's kernel: out = x + alpha * y with one alpha per row; x, y [N, F], alpha [N, 1]."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n, f = x.shape
    for i in nl.affine_range(n // 128):
        x_t = nl.ndarray((128, f), dtype=x.dtype, buffer=nl.sbuf)
        y_t = nl.ndarray((128, f), dtype=y.dtype, buffer=nl.sbuf)
        a_t = nl.ndarray((128, 1), dtype=alpha.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_t, src=x[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=y_t, src=y[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=a_t, src=alpha[i * 128:(i + 1) * 128, :])
        o_t = nl.ndarray((128, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=o_t, data=y_t, op0=nl.multiply, operand0=a_t, op1=nl.add, operand1=x_t)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=o_t)
    return out


def line_of(text: str) -> int:
    """The source line number of the first line of ``axpy`` that contains ``text``."""
    lines, first = inspect.getsourcelines(axpy.fn if hasattr(axpy, "fn") else axpy)
    return first + next(k for k, s in enumerate(lines) if text in s)


def axpy_args(f=2048, n=1024):
    """x, y [n, f] and alpha [n, 1], float32 (the default: the case the profile tests read)."""
    rng = np.random.default_rng(0)
    return (rng.random((n, f), dtype=np.float32), rng.random((n, f), dtype=np.float32),
            rng.random((n, 1), dtype=np.float32))
