"""The main job: the whole nkihub loop on this machine (``bash scripts/demo.sh``).

This first version runs example kernels on the simulator against numpy; later steps (publishing to the
embedded Hub, ``kernels.get``, torch ops, kernelize, cost-model estimates) join as they land.
"""
from __future__ import annotations

import sys
import time

import numpy as np


def _examples():
    import ml_dtypes

    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def tiled_matmul(lhsT, rhs):
        k_dim, m_dim = lhsT.shape
        _, n_dim = rhs.shape
        result = nl.ndarray((m_dim, n_dim), dtype=lhsT.dtype, buffer=nl.shared_hbm)
        for m in nl.affine_range(m_dim // 128):
            for n in nl.affine_range(n_dim // 512):
                acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
                for k in nl.affine_range(k_dim // 128):
                    a = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                    b = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                    nisa.nc_matmul(acc, a, b)
                res = nl.copy(acc, dtype=result.dtype)
                nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], res)
        return result

    @nki.jit
    def row_softmax(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 128):
            tile = nl.load(x[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], nl.softmax(tile, axis=1))
        return out

    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((512, 1024)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((512, 1024)).astype(np.float32)

    def softmax_ref(v):
        e = np.exp(v - v.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return [
        ("tiled matmul bf16 (512x256)^T @ (512x1024)", tiled_matmul, (a, b),
         lambda: a.astype(np.float32).T @ b.astype(np.float32)),
        ("row softmax fp32 (512, 1024)", row_softmax, (x,), lambda: softmax_ref(x)),
    ]


def main(argv=None) -> int:
    """Run the demo and print one results table; returns the process exit code."""
    rows = []
    ok_all = True
    for name, kernel, args, ref in _examples():
        t0 = time.perf_counter()
        out = kernel(*args)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = kernel(*args)
        replay = time.perf_counter() - t0
        expected = ref()
        err = float(np.max(np.abs(out.astype(np.float32) - expected)) / max(1e-6, np.max(np.abs(expected))))
        ok = err < 2e-2
        ok_all &= ok
        rows.append((name, "ok" if ok else "WRONG", f"{err:.2e}", f"{first * 1e3:.0f} ms", f"{replay * 1e3:.0f} ms"))
    head = ("kernel", "result", "max rel. error", "first call (trace+run)", "replay")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
