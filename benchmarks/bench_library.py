"""Cost-model estimates for the non-attention library kernels: latency and bottleneck engine per kernel,
the matmul's fraction of Tensor Engine peak, and the fused ViT block against its unfused baseline.

    .venv/bin/python benchmarks/bench_library.py            # full sizes (about 2 minutes: tracing)
    .venv/bin/python benchmarks/bench_library.py --quick    # smaller matmul

Every latency is an estimate from the cost model (nki.profile), not a measurement on hardware. Kernels
are profiled from shapes only; nothing is executed numerically.
"""
from __future__ import annotations

import argparse
import time

import torch

import nki
from nkihub.kernels.library.gelu_mlp.nki_kernels import gelu_mlp_kernel, plan as mlp_plan
from nkihub.kernels.library.layernorm.nki_kernels import layer_norm_kernel
from nkihub.kernels.library.matmul.nki_kernels import matmul_kernel
from nkihub.kernels.library.rmsnorm.nki_kernels import rms_norm_kernel
from nkihub.kernels.library.softmax.nki_kernels import softmax_kernel
from nkihub.kernels.library.vit_block.nki_kernels import vit_block_kernel
from nkihub.kernels.library.vit_block.unfused import vit_block_unfused

BF16 = torch.bfloat16


def _z(*shape, dtype=BF16):
    return torch.zeros(shape, dtype=dtype)


def vit_params(d, hidden, dtype=BF16):
    """Zero tensors shaped like a ViTLayer's 16 parameters (profiling reads shapes only)."""
    return (_z(d, dtype=dtype), _z(d, dtype=dtype)) + (_z(d, d, dtype=dtype), _z(d, dtype=dtype)) * 4 + \
        (_z(d, dtype=dtype), _z(d, dtype=dtype), _z(hidden, d, dtype=dtype), _z(hidden, dtype=dtype),
         _z(d, hidden, dtype=dtype), _z(d, dtype=dtype))


def unfused_estimate(x, params, heads, target):
    """Sum of the estimated latencies of the unfused baseline's kernel launches (run back to back)."""
    reports = []

    def call(kernel, *args):
        reports.append(nki.profile(kernel, *args, target=target))
        prog = kernel.trace(*args, target=target)
        spec = prog.tensors[prog.outputs[0]]
        return torch.zeros(tuple(spec.shape), dtype=getattr(torch, spec.dtype))
    vit_block_unfused(x, params, heads, 1e-12, call=call)
    return sum(r.latency_s for r in reports), reports


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1024x2048x2048 matmul instead of 4096x8192x8192")
    args = ap.parse_args(argv)
    m, k, n = (1024, 2048, 2048) if args.quick else (4096, 8192, 8192)
    b, s, d, heads, hidden = 8, 197, 768, 12, 3072
    x = _z(b, s, d)
    params = vit_params(d, hidden)
    rows = _z(b * s, d)
    token_block, resident = mlp_plan(d, hidden, 2)
    cases = [
        (f"neuron/matmul {m}x{k} @ {k}x{n}", "trn1", matmul_kernel, (_z(m, k), _z(k, n)), {}),
        (f"neuron/layernorm [{b * s}, {d}]", "trn2", layer_norm_kernel, (rows, _z(d), _z(d), 1e-12), {}),
        (f"neuron/rmsnorm [{b * s}, {d}]", "trn2", rms_norm_kernel, (rows, _z(d), 1e-6), {}),
        (f"neuron/softmax [{b * heads * s}, {s}]", "trn2", softmax_kernel, (_z(b * heads * s, s),), {}),
        ("neuron/softmax [1024, 65536] (streamed)", "trn2", softmax_kernel, (_z(1024, 65536),), {}),
        (f"neuron/gelu-mlp [{b * s}, {d}] H={hidden}", "trn2", gelu_mlp_kernel,
         (rows, *vit_params(d, hidden)[12:], token_block, resident), {}),
        (f"neuron/vit-block B={b} S={s} D={d} H={heads}", "trn2", vit_block_kernel,
         (x, *params, heads, 1e-12), {}),
    ]
    print("Estimates from the nkihub cost model (not hardware measurements), bf16.\n")
    print(f"| kernel | target | est. latency | MFU | bottleneck | busiest engines |\n|---|---|---|---|---|---|")
    reports = {}
    for name, target, kernel, kargs, kw in cases:
        t0 = time.perf_counter()
        r = nki.profile(kernel, *kargs, target=target, **kw)
        reports[name] = r
        busy = sorted(r.engine_active.items(), key=lambda kv: -kv[1])[:3]
        busy_s = ", ".join(f"{e} {a:.0%}" for e, a in busy)
        print(f"| {name} | {target} | {r.latency_s * 1e6:,.1f} us | {r.mfu:.1%} | {r.bottleneck} | {busy_s} |"
              f"  <!-- traced in {time.perf_counter() - t0:.0f}s -->")
    mm = reports[cases[0][0]]
    print(f"\nmatmul on trn1: estimated {mm.mfu:.1%} of Tensor Engine peak (target >= 80%)")
    fused = reports[cases[-1][0]].latency_s
    unfused, launches = unfused_estimate(x, params, heads, "trn2")
    print(f"vit-block B={b} S={s} D={d} bf16 on trn2: fused {fused * 1e6:,.1f} us vs unfused "
          f"{unfused * 1e6:,.1f} us over {len(launches)} launches: {unfused / fused:.2f}x (estimates)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
