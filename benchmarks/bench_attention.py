"""Cost-model estimates for the attention kernels: neuron/vit-attn against its unfused baseline, and
neuron/flash-attn's forward and backward MFU, on trn2 unless --target says otherwise.

    .venv/bin/python benchmarks/bench_attention.py            # the issue's shapes (about a minute: tracing)
    .venv/bin/python benchmarks/bench_attention.py --quick    # smaller flash-attn shape

Every latency is an estimate from the cost model (nki.profile), not a measurement on hardware. Kernels are
profiled from shapes only; nothing is executed numerically. The unfused baseline's latency is the sum of
its three kernel launches (QK^T, softmax, PV) run back to back.
"""
from __future__ import annotations

import argparse
import math
import time

import torch

import nki
from nkihub.kernels.library.attention_baseline import pv_kernel, qk_kernel, softmax_kernel
from nkihub.kernels.library.flash_attn.nki_kernels import flash_bwd_kernel, flash_fwd_kernel
from nkihub.kernels.library.vit_attn.nki_kernels import vit_attention_kernel

BF16 = torch.bfloat16


def _z(*shape, dtype=BF16):
    return torch.zeros(shape, dtype=dtype)


def row(name, shape, report, extra=""):
    active = ", ".join(f"{e} {f:.0%}" for e, f in sorted(report.engine_active.items(), key=lambda x: -x[1])
                       if f >= 0.005)
    print(f"  {name:<22} {shape:<22} {report.latency_s * 1e6:10.1f} us  {report.bottleneck:<8} "
          f"MFU {report.mfu:6.1%}  [{active}] {extra}")


def vit(target):
    b, h, s, d = 8, 12, 197, 64
    q, k, v = _z(b, h, s, d), _z(b, h, s, d), _z(b, h, s, d)
    scale = 1 / math.sqrt(d)
    shape = f"({b}, {h}, {s}, {d}) bf16"
    print(f"neuron/vit-attn vs unfused baseline, {shape}, {target} (estimates)")
    fused = nki.profile(vit_attention_kernel, q, k, v, scale, target=target)
    row("vit-attn (fused)", shape, fused)
    parts = [("qk (unfused)", qk_kernel, (q, k, scale)), ("softmax (unfused)", softmax_kernel, (_z(b, h, s, s),)),
             ("pv (unfused)", pv_kernel, (_z(b, h, s, s), v))]
    total = 0.0
    for name, kernel, args in parts:
        rep = nki.profile(kernel, *args, target=target)
        row(name, shape, rep)
        total += rep.latency_s
    ratio = total / fused.latency_s
    print(f"  unfused total {total * 1e6:.1f} us; fused speedup {ratio:.2f}x (target >= 2.4x)")
    return ratio


def flash(target, quick):
    b, h, s, d = (1, 2, 2048, 128) if quick else (1, 8, 4096, 128)
    q, k, v = _z(b, h, s, d), _z(b, h, s, d), _z(b, h, s, d)
    shape = f"({b}, {h}, {s}, {d}) bf16"
    print(f"neuron/flash-attn, {target} (estimates)")
    fwd = nki.profile(flash_fwd_kernel, q, k, v, False, 1 / math.sqrt(d), target=target)
    row("flash fwd", shape, fwd, "(target MFU >= 45%)")
    causal = nki.profile(flash_fwd_kernel, q, k, v, True, 1 / math.sqrt(d), target=target)
    row("flash fwd causal", shape, causal, "(MFU counts the matmuls issued)")
    bs = 1024
    bq, bk = _z(1, 2, bs, d), _z(1, 2, bs, d)
    bwd = nki.profile(flash_bwd_kernel, bq, bk, bk, bq, bq, _z(1, 2, bs, dtype=torch.float32),
                      _z(1, 2, bs, dtype=torch.float32), False, 1 / math.sqrt(d), target=target)
    row("flash bwd", f"(1, 2, {bs}, {d}) bf16", bwd, "(MFU of the backward's matmuls)")
    bwd_c = nki.profile(flash_bwd_kernel, bq, bk, bk, bq, bq, _z(1, 2, bs, dtype=torch.float32),
                        _z(1, 2, bs, dtype=torch.float32), True, 1 / math.sqrt(d), target=target)
    row("flash bwd causal", f"(1, 2, {bs}, {d}) bf16", bwd_c)
    if not quick:   # the shape (about 30 s of tracing)
        lse = _z(b, h, s, dtype=torch.float32)
        bwd_full = nki.profile(flash_bwd_kernel, q, k, v, q, q, lse, lse, False, 1 / math.sqrt(d), target=target)
        row("flash bwd", shape, bwd_full)
    return fwd.mfu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--quick", action="store_true", help="smaller flash-attn shape")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    vit(args.target)
    flash(args.target, args.quick)
    print(f"(tracing and scheduling took {time.perf_counter() - t0:.0f} s of wall time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
