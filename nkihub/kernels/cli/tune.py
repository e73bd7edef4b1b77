"""``nkihub tune-package PATH``: run the sweeps a package's kernel.json declares (nki.autotune, cost-model
estimates) and write its tuned.json, which launches apply and ``nkihub publish`` puts on the card."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser("tune-package", help="autotune a kernel package's parameters per target; writes PATH/tuned.json")
    add_tune_args(p)
    p.add_argument("path", nargs="+", help="kernel source package directories (kernel.json declares a \"tuning\" section)")
    p.add_argument("--recheck", action="store_true",
                   help="no sweep: re-estimate tuned.json's configs and defaults under the current cost rules; "
                        "exit 1 when one is stale (moved over 0.5%%, fails, or no longer beats its default)")
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


STALE = 0.005   # relative move of an estimate that makes a stored figure stale


def stale(row: dict) -> str:
    """Why a :func:`kernels.tuning.recheck` row needs a retune, or "" when it holds."""
    if row["tuned_us"] is None or row["default_us"] is None:
        return row["reason"]
    if row["tuned_us"] > row["default_us"]:
        return "tuned config now slower than the default"
    moved = [f for f, now in (("stored_us", "tuned_us"), ("stored_default_us", "default_us"))
             if row[f] and abs(row[now] - row[f]) > STALE * row[f]]
    return "estimates moved since the sweep" if moved else ""


def recheck(paths) -> int:
    """Print the recheck table of ``paths``; returns the number of stale rows."""
    from ..tuning import recheck as rows_of
    print("| kernel | target | shapes | default us | tuned us | ratio | stored default us | stored tuned us | status |")
    print("|---|---|---|---|---|---|---|---|---|")
    bad = 0
    for path in paths:
        for r in rows_of(path):
            why = stale(r)
            bad += bool(why)
            ratio = f"{r['default_us'] / r['tuned_us']:.3f}x" if r["tuned_us"] and r["default_us"] else ""
            print(f"| {r['kernel']} | {r['target']} | {r['shapes']} | {r['default_us']} | {r['tuned_us']} | {ratio} | "
                  f"{r['stored_default_us']} | {r['stored_us']} | {why or 'ok'} |", flush=True)
    if bad:
        print(f"{bad} stale: regenerate with `nkihub tune-package PATH` (a full sweep per package)")
    return bad


def run(args) -> int:
    if args.recheck:
        return 1 if recheck(args.path) else 0
    return 1 if sum(tune(p, args.target, args.workers, args.ray) for p in args.path) else 0
