"""Autotuning on the cost model: for matmul, flash-attn and vit-attn, the best config found against the
kernel's current default per target and shape (the sweeps each package's kernel.json declares), and how
many candidates per second a sweep evaluates in one process, on local worker processes (one per core)
and on a Ray cluster started on this machine (loopback), whose reports must equal the local ones.

    .venv/bin/python benchmarks/bench_autotune.py            # every declared case (about 15 minutes here)
    .venv/bin/python benchmarks/bench_autotune.py --quick    # the first case of each kernel
    .venv/bin/python benchmarks/bench_autotune.py --no-ray   # skip the Ray cluster

Every latency is a cost-model estimate (compare within one run); candidates per second are measured
on this machine in this run, with the candidate and compile caches off (every candidate traced cold),
and depend on its load; local workers include starting their processes, the Ray workers stay up.
Writes out/bench/autotune.md and out/bench/autotune.json.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from nkihub.kernels.library import LIBRARY
from nkihub.kernels.tuning import sweep, tuning_spec
from nkihub.kernels.vendor import ROOT

KERNELS = ("neuron/matmul", "neuron/flash-attn", "neuron/vit-attn")


def package_dir(repo: str) -> Path:
    return ROOT.joinpath(*LIBRARY[repo].split("."))


def quick_copy(repo: str, tmp: Path) -> Path:
    """A copy of the package whose kernel.json keeps only the first case of each kernel."""
    import shutil
    src = package_dir(repo)
    dst = tmp / src.name
    if not dst.exists():
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        spec = json.loads((dst / "kernel.json").read_text())
        for k in spec["tuning"]["kernels"]:
            k["cases"] = k["cases"][:1]
        (dst / "kernel.json").write_text(json.dumps(spec))
    return dst


def timed_sweep(pkg: Path, **kw):
    start = time.perf_counter()
    results = sweep(pkg, workers=kw.pop("workers", None), ray=kw.pop("ray", None), use_cache=False)
    seconds = time.perf_counter() - start
    n = sum(len(report.results) for _, _, report in results)
    return results, n, seconds


def same(a, b) -> bool:
    return [[r.to_json() for r in rep.results] for _, _, rep in a] == [[r.to_json() for r in rep.results] for _, _, rep in b]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the first declared case of each kernel")
    ap.add_argument("--no-ray", action="store_true", help="skip the local Ray cluster")
    ap.add_argument("--out-dir", default="out/bench")
    args = ap.parse_args()
    # no compile cache either: otherwise every sweep after the first of a kernel skips its tracing and
    # the later modes (local workers, Ray) look faster than they are; workers and the Ray cluster
    # started below inherit this
    os.environ["NKI_CACHE_DIR"] = "off"
    tmp = Path(tempfile.mkdtemp(prefix="bench-autotune-pkgs-"))
    pkgs = {repo: quick_copy(repo, tmp) if args.quick else package_dir(repo) for repo in KERNELS}
    rows, speed = [], []
    for repo, pkg in pkgs.items():
        one, n1, s1 = timed_sweep(pkg, workers=1)
        local, n2, s2 = timed_sweep(pkg, workers=os.cpu_count())
        speed.append({"kernel": repo, "mode": "1 process", "candidates": n1, "seconds": s1})
        speed.append({"kernel": repo, "mode": f"local, {os.cpu_count()} workers", "candidates": n2, "seconds": s2,
                      "identical": same(one, local)})
        print(f"{repo}: {n1} candidates, {n1 / s1:.2f}/s in 1 process, {n2 / s2:.2f}/s on {os.cpu_count()} "
              f"local workers (identical: {same(one, local)})", flush=True)
        for name, case, report in one:
            for t in report.targets:
                best, default = report.best.get(t), report.default_result(t)
                rows.append({"kernel": repo, "target": t, "shapes": " ".join(map(str, case["args"][:3])),
                             "default": str(report.default), "default_us": default.latency_s * 1e6 if default and default.latency_s else None,
                             "best": str(best.config) if best else "none passed",
                             "best_us": best.latency_s * 1e6 if best else None,
                             "passed": sum(r.target == t and r.status == "ok" for r in report.results),
                             "candidates": sum(r.target == t for r in report.results)})
    if not args.no_ray:
        from nkihub.nki.autotune.localray import local_cluster
        with local_cluster(num_cpus=os.cpu_count() or 2) as address:
            for repo, pkg in pkgs.items():
                local = timed_sweep(pkg, workers=1)[0]
                on_ray, n, s = timed_sweep(pkg, ray=address)
                speed.append({"kernel": repo, "mode": f"ray, {os.cpu_count()} CPUs", "candidates": n, "seconds": s,
                              "identical": same(local, on_ray)})
                print(f"{repo}: {n / s:.2f} candidates/s on the local Ray cluster (identical: {same(local, on_ray)})",
                      flush=True)
    lines = ["# Autotuning (cost-model estimates; compare within this run)", "",
             "| kernel | target | shapes | default | default us | best found | best us | speedup | passed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sp = f"{r['default_us'] / r['best_us']:.3f}x" if r["default_us"] and r["best_us"] else ""
        lines.append(f"| {r['kernel']} | {r['target']} | {r['shapes']} | {r['default']} | "
                     f"{r['default_us'] or 0:.2f} | {r['best']} | {r['best_us'] or 0:.2f} | {sp} | "
                     f"{r['passed']}/{r['candidates']} |")
    lines += ["", "| kernel | where | candidates | seconds | candidates/s | same report as 1 process |", "|---|---|---|---|---|---|"]
    for s in speed:
        lines.append(f"| {s['kernel']} | {s['mode']} | {s['candidates']} | {s['seconds']:.1f} | "
                     f"{s['candidates'] / s['seconds']:.2f} | {s.get('identical', '')} |")
    text = "\n".join(lines)
    print("\n" + text)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "autotune.md").write_text(text + "\n")
    (out / "autotune.json").write_text(json.dumps({"rows": rows, "speed": speed}, indent=1) + "\n")
    worse = [r for r in rows if r["best_us"] is None or (r["default_us"] and r["best_us"] > r["default_us"])]
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())
