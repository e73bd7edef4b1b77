"""Every library kernel over its grid of sizes and both dtypes, in one run.

For each kernel: correctness and simulator time against torch on this CPU (same run, small size, bf16 and
fp32), and cost-model estimates on trn1 and trn2 at every size (with the fused-over-unfused speedup where
there is a baseline). Writes ``results.md``, ``results.json`` and PNG plots to ``--out``.

    .venv/bin/python benchmarks/bench_all.py                  # everything (several minutes)
    .venv/bin/python benchmarks/bench_all.py --quick          # small sizes only
    .venv/bin/python benchmarks/bench_all.py --only neuron/matmul --sizes large

Every latency printed is an estimate from the cost model, not a measurement on hardware.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import torch

from nkihub.kernels.library import LIBRARY
from nkihub.kernels.library.cases import CASES
from nkihub.kernels.library.measure import check, estimate
from nkihub.kernels.library.plots import estimates_png, sim_ratio_png


def _md_table(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/bench")
    parser.add_argument("--only", action="append", help="Hub repo name(s) to run, e.g. neuron/matmul")
    parser.add_argument("--sizes", action="append", help="size names to estimate (default: all)")
    parser.add_argument("--quick", action="store_true", help="estimate the small sizes only")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    checks, estimates = [], []
    for repo, module_path in LIBRARY.items():
        if args.only and repo not in args.only:
            continue
        case, module = CASES[repo], importlib.import_module(module_path)
        for dtype in (torch.bfloat16, torch.float32):
            checks.append(check(module, case, "small", dtype))
            c = checks[-1]
            print(f"{repo:18s} {c.dtype:8s} {'ok' if c.ok else 'WRONG':5s} err {c.max_rel_error:.1e}  "
                  f"simulator/torch {c.sim_over_torch:6.1f}x", flush=True)
        sizes = ["small"] if args.quick else (args.sizes or list(case.sizes))
        for size in sizes:
            if size not in case.sizes:
                continue
            t0 = time.perf_counter()
            e = estimate(module, case, size)
            estimates.append(e)
            speed = e.speedup("trn2")
            print(f"{repo:18s} {size:8s} trn1 {e.latency_s['trn1'] * 1e6:9.1f} us  trn2 "
                  f"{e.latency_s['trn2'] * 1e6:9.1f} us (estimates)  MFU {e.mfu:5.1%}  bottleneck {e.bottleneck}"
                  + (f"  fused/unfused {speed:.2f}x" if speed else "") + f"  [{time.perf_counter() - t0:.0f} s]",
                  flush=True)

    md = ["# nkihub kernel benchmarks", "",
          "Simulator against torch: both measured on this CPU in the same run (small sizes).", "",
          _md_table(["kernel", "dtype", "result", "max rel err", "simulator s", "torch s", "simulator/torch"],
                    [(c.repo, c.dtype, "ok" if c.ok else "WRONG", f"{c.max_rel_error:.1e}", f"{c.sim_s:.4f}",
                      f"{c.torch_s:.4f}", f"{c.sim_over_torch:.1f}x") for c in checks]),
          "", "Cost-model estimates (bf16; not measurements on hardware).", "",
          _md_table(["kernel", "size", "trn1 us", "trn2 us", "MFU (trn2)", "bottleneck", "fused/unfused (trn2)"],
                    [(e.repo, e.size, f"{e.latency_s['trn1'] * 1e6:.1f}", f"{e.latency_s['trn2'] * 1e6:.1f}",
                      f"{e.mfu:.1%}", e.bottleneck, f"{e.speedup('trn2'):.2f}x" if e.baseline_s else "-")
                     for e in estimates])]
    (out / "results.md").write_text("\n".join(md) + "\n")
    (out / "results.json").write_text(json.dumps({"checks": [c.__dict__ for c in checks],
                                                  "estimates": [e.to_json() for e in estimates]}, indent=2))
    if estimates:
        estimates_png(estimates, out / "estimated_latency.png")
    if checks:
        sim_ratio_png(checks, out / "simulator_vs_torch.png")
    print(f"\nwrote {out}/results.md, results.json and PNG plots")
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
