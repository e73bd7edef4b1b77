"""Simulator speed against torch on the CPU, measured side by side in one run.

    .venv/bin/python benchmarks/bench_simulator.py [--repeat N]

Two kernels: a tiled bf16 matmul 1024x1024x1024 (the NKI tutorial's tiling) and a row softmax over
(4096, 2048) fp32. Each is timed on the simulator (a replayed call: the Program is already traced) and
as the same math in torch (torch.matmul in bf16, torch.softmax); the table prints the ratio
simulator / torch (target: within 20x) and the replay time against the first (tracing) call. These are
ratios on this machine in this run, not absolute figures about any other machine.
"""
from __future__ import annotations

import argparse
import statistics
import time

import ml_dtypes
import numpy as np
import torch

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_tiled(lhsT, rhs):
    """result[M, N] = lhsT[K, M].T @ rhs[K, N], tiled as the public NKI matmul tutorial tiles it."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M, TILE_K, TILE_N = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
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


@nki.jit
def row_softmax(x):
    """out[R, C] = softmax(x, axis=1), 128 rows per tile."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for i in nl.affine_range(R // P):
        tile = nl.load(x[i * P:(i + 1) * P, :])
        nl.store(out[i * P:(i + 1) * P, :], nl.softmax(tile, axis=1))
    return out


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _first_call(kernel, *args) -> float:
    kernel._cache.clear()  # a cold start: trace, validate, allocate, run
    t0 = time.perf_counter()
    kernel(*args)
    return time.perf_counter() - t0


def measure(repeat: int = 5) -> list[dict]:
    """Rows of (case, simulator s, torch s, ratio, first-call s, replay/first ratio)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    ta, tb = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16), torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)
    x = rng.standard_normal((4096, 2048)).astype(np.float32)
    tx = torch.from_numpy(x)
    cases = [
        ("matmul bf16 1024^3", matmul_tiled, (a, b), lambda: torch.matmul(ta.T, tb)),
        ("softmax fp32 4096x2048", row_softmax, (x,), lambda: torch.softmax(tx, dim=1)),
    ]
    rows = []
    for name, kernel, args, ref in cases:
        first = _first_call(kernel, *args)
        sim = _best(lambda: kernel(*args), repeat)
        ref()  # warm torch up too
        tor = _best(ref, repeat)
        rows.append({"case": name, "sim_s": sim, "torch_s": tor, "ratio": sim / tor, "first_s": first,
                     "replay_over_first": sim / first})
    return rows


def table(rows: list[dict]) -> str:
    """A small text table of the ratios."""
    head = (f"{'case':<24} {'sim/torch':>10} {'replay/first':>13} {'sim ms':>8} {'torch ms':>9} "
            f"{'first ms':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['case']:<24} {r['ratio']:>9.1f}x {r['replay_over_first']:>12.2f}x "
                     f"{r['sim_s'] * 1e3:>8.1f} {r['torch_s'] * 1e3:>9.1f} {r['first_s'] * 1e3:>9.1f}")
    lines.append("target: sim/torch <= 20x; ms are this machine in this run (best of --repeat)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    print(table(measure(args.repeat)))


if __name__ == "__main__":
    main()
