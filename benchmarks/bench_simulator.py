"""Simulator speed against torch doing the same math, measured side by side in one run.

    .venv/bin/python benchmarks/bench_simulator.py [--repeat N] [--cases a,b] [--no-check] [--reference]

Cases: the AWS NKI matrix-multiplication tutorial at 1024^3 bf16, neuron/vit-attn at (8, 12, 197, 64) bf16,
neuron/flash-attn's forward at (1, 8, 2048, 128) causal bf16, and neuron/layernorm, neuron/softmax and
neuron/gelu-mlp. Each kernel is called through ``nki.jit`` (traced once, then replayed: the first
calls make the batched plan a slice after each, and are not timed; the timed ones run it) and timed against torch on the same inputs:
``torch-native`` in the kernel's dtype (bf16) and ``torch-fp32`` on fp32 copies of the bf16 inputs,
the floor for a faithful simulation of bf16 inputs with fp32 accumulation. The table prints best-of-N
times of rounds that time the three side by side, the ratios, the ratio of CPU seconds (all threads;
steadier than wall time when other processes share the cores), and the simulator's instructions per
second. ``--check`` (default) first checks the fast engine's outputs are bit-identical to the reference
executor's; ``--reference`` also times the reference executor. Ratios are of this machine in this run.
"""
from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.nn.functional as F

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.nki.arrays import to_numpy


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


def _randn(*shape, scale=1.0, seed=0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).bfloat16()


def _f32(args):
    return [a.float() if isinstance(a, torch.Tensor) else a for a in args]


def cases() -> dict:
    """name -> (kernel, args, torch native fn(*args), torch fp32 fn(*fp32 args)); bf16 throughout."""
    from nkihub.kernels.library.flash_attn.nki_kernels import flash_fwd_kernel
    from nkihub.kernels.library.gelu_mlp.nki_kernels import gelu_mlp_kernel, plan
    from nkihub.kernels.library.layernorm.nki_kernels import layer_norm_kernel
    from nkihub.kernels.library.softmax.nki_kernels import softmax_kernel
    from nkihub.kernels.library.vit_attn.nki_kernels import vit_attention_kernel

    def sdpa(causal):
        return lambda q, k, v, *_: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                  scale=1 / math.sqrt(q.shape[-1]))
    qkv_vit = [_randn(8, 12, 197, 64, seed=s) for s in range(3)]
    qkv_flash = [_randn(1, 8, 2048, 128, seed=s) for s in range(3)]
    x_ln, w_ln, b_ln = _randn(2048, 1024), 1 + _randn(1024, scale=0.1, seed=1), _randn(1024, scale=0.1, seed=2)
    x_mlp = _randn(394, 768)
    mlp = [_randn(3072, 768, scale=0.03, seed=1), _randn(3072, scale=0.1, seed=2),
           _randn(768, 3072, scale=0.03, seed=3), _randn(768, scale=0.1, seed=4)]
    block, resident = plan(768, 3072, 2)

    def torch_mlp(x, w1, b1, w2, b2, *_):
        return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)
    return {
        "matmul-tutorial 1024^3": (matmul_tiled, [_randn(1024, 1024), _randn(1024, 1024, seed=1)],
                                   lambda a, b: a.T @ b),
        "vit-attn (8,12,197,64)": (vit_attention_kernel, [*qkv_vit, 1 / 8], sdpa(False)),
        "flash-attn fwd (1,8,2048,128) causal": (flash_fwd_kernel, [*qkv_flash, True, 1 / math.sqrt(128)],
                                                 sdpa(True)),
        "layernorm (2048,1024)": (layer_norm_kernel, [x_ln, w_ln, b_ln, 1e-5],
                                  lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], w, b, eps)),
        "softmax (4096,2048)": (softmax_kernel, [_randn(4096, 2048, scale=3)], lambda x: torch.softmax(x, -1)),
        "gelu-mlp (394,768,3072)": (gelu_mlp_kernel, [x_mlp, *mlp, block, resident], torch_mlp),
    }


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, process CPU seconds: every thread's, the simulator's lanes and torch's pool)."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _same_bits(kernel, args) -> bool:
    from nkihub.simulator.executor import Executor
    compiled = kernel.specialize(*args)
    arrays = [to_numpy(a) for a in args if isinstance(a, torch.Tensor)]
    got = compiled.executor.run(arrays)
    want = Executor(compiled.program, compiled.target, checked=True).run(arrays)
    return all(a.tobytes() == b.tobytes() for a, b in zip(got, want))


MAX_WARMUP = 400     # calls at most before timing (the batched plan is complete within 20-60 on these cases)


def measure(names=None, repeat: int = 5, check: bool = True, reference: bool = False) -> list[dict]:
    """One row per case: best-of-``repeat`` seconds of the simulator (a replayed call), torch native and
    torch fp32, measured in rounds side by side; the Program's instruction count; bit identity."""
    rows = []
    for name, (kernel, args, native) in cases().items():
        if names and not any(n in name for n in names):
            continue
        f32_args = _f32(args)
        sim = lambda: kernel(*args)  # noqa: E731
        first = _timed(sim)[0]
        compiled = kernel.specialize(*args)
        program = compiled.program
        # the fast engine makes its batched plan a slice after each call (NKIHUB_SIM_PLAN_BUDGET): call until
        # it is complete and tried (or given up), then once more, so the rounds below time the replay it settles on
        calls = 1
        while getattr(compiled.executor, "settling", False) and calls < MAX_WARMUP:
            sim()
            calls += 1
        sim()
        row = {"case": name, "instructions": len(program.instructions), "first_s": first, "warmup_calls": calls,
               "bit_identical": _same_bits(kernel, args) if check else None}
        timers = {"sim_s": sim, "native_s": lambda: native(*args),
                  "fp32_s": lambda: native(*f32_args).bfloat16()}
        if reference:
            ref = kernel.specialize(*args)
            from nkihub.simulator.executor import Executor
            ex = Executor(ref.program, ref.target, checked=True)
            arrays = [to_numpy(a) for a in args if isinstance(a, torch.Tensor)]
            timers["reference_s"] = lambda: ex.run(arrays)
        best = {k: float("inf") for k in timers}
        cpu = {k: float("inf") for k in timers}
        for _ in range(repeat):
            for k, fn in timers.items():
                wall, used = _timed(fn)
                best[k], cpu[k] = min(best[k], wall), min(cpu[k], used)
        row.update(best)
        row.update({"sim_cpu_s": cpu["sim_s"], "fp32_cpu_s": cpu["fp32_s"]})
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """The ratios as a text table."""
    ref = any("reference_s" in r for r in rows)
    head = (f"{'case':<38}{'instrs':>7}{'sim ms':>9}{'native ms':>10}{'fp32 ms':>9}{'sim/native':>11}"
            f"{'sim/fp32':>9}{'cpu ratio':>10}{'Minstr/s':>9}{'bits':>6}{'warmup':>7}" + (f"{'ref/sim':>9}" if ref else ""))
    lines = [head, "-" * len(head)]
    for r in rows:
        bits = {True: "same", False: "DIFF", None: "-"}[r["bit_identical"]]
        line = (f"{r['case']:<38}{r['instructions']:>7}{r['sim_s'] * 1e3:>9.1f}{r['native_s'] * 1e3:>10.1f}"
                f"{r['fp32_s'] * 1e3:>9.1f}{r['sim_s'] / r['native_s']:>10.2f}x{r['sim_s'] / r['fp32_s']:>8.2f}x"
                f"{r['sim_cpu_s'] / r['fp32_cpu_s']:>9.2f}x{r['instructions'] / r['sim_s'] / 1e6:>9.3f}{bits:>6}"
                f"{r['warmup_calls']:>7}")
        if ref:
            line += f"{r['reference_s'] / r['sim_s']:>8.1f}x"
        lines.append(line)
    lines.append("warmup: calls before the timed rounds (the fast engine's batched plan, made a slice after each "
                 "call, is complete after them); sim: a replayed call on the fast engine; native: torch in bf16; "
                 "fp32: torch on fp32 copies of the bf16 inputs; best of --repeat rounds, this machine in this run; cpu ratio: CPU seconds of all "
                 "threads, sim over fp32 (other processes inflate wall times far more than CPU times)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cases", default="", help="comma-separated substrings of case names")
    parser.add_argument("--no-check", action="store_true", help="skip the bit-identity check")
    parser.add_argument("--reference", action="store_true", help="also time the reference executor")
    args = parser.parse_args()
    from nkihub.simulator import config
    load = ", load average: %.2f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else ""
    print(f"cores: {os.cpu_count()}, torch threads: {torch.get_num_threads()}, simulator threads: "
          f"{config.fast_threads()}, engine: {config.engine()}{load}")
    names = [n for n in args.cases.split(",") if n]
    print(table(measure(names, args.repeat, not args.no_check, args.reference)))


if __name__ == "__main__":
    main()
