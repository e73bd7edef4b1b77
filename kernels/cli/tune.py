"""``kernels tune PATH``: run the sweeps a package's kernel.json declares (nki.autotune, cost-model
estimates) and write its tuned.json, which launches apply and ``kernels publish`` puts on the card."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="autotune a kernel package's parameters per target; writes PATH/tuned.json")
    add_tune_args(p)
    p.add_argument("path", help="kernel source package directory (kernel.json declares a \"tuning\" section)")
    p.set_defaults(func=run)


def add_tune_args(p) -> None:
    p.add_argument("--target", default="trn1,trn2", help="targets to tune for (default trn1,trn2)")
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default one per core)")
    p.add_argument("--ray", default=None, metavar="ADDRESS", help="a Ray cluster (default RAY_ADDRESS if set)")


def tune(path, target, workers, ray) -> int:
    """Sweep ``path`` and print one line per (kernel, shapes, target); returns the number of targets
    where no candidate passed."""
    from ..tuning import tune_package

    def progress(done, total, result):
        print(f"\r  {done}/{total} candidates", end="", file=sys.stderr, flush=True)
    out, results = tune_package(path, target.split(","), workers=workers, ray=ray, progress=progress)
    print(file=sys.stderr)
    failed = 0
    for name, case, report in results:
        for t in report.targets:
            best, speed = report.best.get(t), report.speedup(t)
            if best is None:
                failed += 1
                print(f"{name} {t}: no candidate passed")
                continue
            versus = f", {speed:.2f}x the default {report.default}" if speed else ""
            print(f"{name} {t} {' '.join(map(str, case['args'][:3]))}: {best.config} at "
                  f"{best.latency_s * 1e6:.2f} us (estimate){versus}")
    print(f"wrote {out}")
    return failed


def run(args) -> int:
    return 1 if tune(args.path, args.target, args.workers, args.ray) else 0
