"""The cost model against published measurements: every row of the calibration set, estimated and compared.

Each row of ``benchmarks/calibration/rows.toml`` is a latency AWS or others published for an NKI kernel, with
the kernel's code (read from a git snapshot of its repository, run unmodified from a scratch folder), the
shapes, dtype and target. This prints, per row, the estimate, the measurement and their ratio, then per
target the mean absolute percentage error (MAPE) and how many rows fall within 0.67-1.5x, for the rows used
while choosing cost rules ("fit") and those kept aside ("held-out"); it writes ``calibration.md``,
``calibration.json`` and a log-log plot ``calibration.png`` to ``--out``, and, per target, the band of
ratios that ``nkihub.simulator.uncertainty`` should hold, from the held-out rows only.

    git clone https://github.com/aws-neuron/aws-neuron-sdk /path/snapshots/aws-neuron+aws-neuron-sdk
    ...                                  (one per repository the rows name: see rows.toml)
    .venv/bin/python benchmarks/bench_calibration.py --snapshots /path/snapshots
    .venv/bin/python benchmarks/bench_calibration.py --only docs-mamba-v2-4096ch,accelopt-rope

Estimates are the cost model's; measurements are what their sources report (different SDK versions, p50 or
p99 as each row says). Rows whose snapshot is missing, or that the simulator cannot run, are listed, not
scored.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from calibration.rows import Snapshots, arguments, load

BAND = (0.67, 1.5)


def _estimate(row, snaps):
    import nki
    kernel = snaps.kernel(row)
    args, kwargs = arguments(row)
    return nki.profile(kernel, *args, target=row.target, **kwargs)


def summary(results: list[dict]) -> dict:
    """Per (target, split) and per target over both splits: rows scored, MAPE and rows within ``BAND``."""
    groups: dict = {}
    for r in results:
        if r.get("ratio") is None:
            continue
        for key in ((r["target"], r["split"]), (r["target"], "all")):
            groups.setdefault(key, []).append(r["ratio"])
    out = {}
    for (target, split), ratios in sorted(groups.items()):
        out[f"{target}/{split}"] = {
            "rows": len(ratios),
            "mape": sum(abs(x - 1) for x in ratios) / len(ratios),
            "within_band": sum(BAND[0] <= x <= BAND[1] for x in ratios),
            "log_ratio_quantiles": _quantiles([math.log(x) for x in ratios]),
        }
    return out


def held_out_band(results: list[dict], min_rows_for_percentiles: int = 10) -> dict:
    """Per target, the (low, high) estimate/measured band ``nkihub.simulator.uncertainty.RATIO_BAND`` should
    hold, from the held-out rows only (fit rows say how well rules were chosen, not how far an estimate of an
    unseen kernel may be off): the 10th..90th percentile with at least ``min_rows_for_percentiles`` rows,
    else their whole spread (min..max). Targets without a scored held-out row are left out."""
    out = {}
    for target in sorted({r["target"] for r in results}):
        ratios = sorted(r["ratio"] for r in results
                        if r["target"] == target and r["split"] == "held-out" and r.get("ratio") is not None)
        if not ratios:
            continue
        if len(ratios) >= min_rows_for_percentiles:
            q = _quantiles([math.log(x) for x in ratios])
            lo, hi = math.exp(q["p10"]), math.exp(q["p90"])
        else:
            lo, hi = ratios[0], ratios[-1]
        out[target] = {"band": (round(lo, 2), round(hi, 2)), "rows": len(ratios),
                       "from": "p10..p90" if len(ratios) >= min_rows_for_percentiles else "min..max"}
    return out


def _quantiles(values: list[float]) -> dict:
    v = sorted(values)
    pick = lambda q: v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]
    return {"min": v[0], "p10": pick(0.1), "p50": pick(0.5), "p90": pick(0.9), "max": v[-1]}


def plot(results: list[dict], path: Path) -> Path:
    """Estimate against measurement, log-log, with y = x and the 0.67-1.5x band."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.5, 6))
    ax = fig.add_subplot(1, 1, 1)
    scored = [r for r in results if r.get("ratio") is not None]
    lo = min(min(r["measured_us"], r["estimate_us"]) for r in scored) / 2
    hi = max(max(r["measured_us"], r["estimate_us"]) for r in scored) * 2
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label="estimate = measured")
    ax.fill_between([lo, hi], [lo * BAND[0], hi * BAND[0]], [lo * BAND[1], hi * BAND[1]], color="0.9",
                    label=f"{BAND[0]}-{BAND[1]}x")
    colours = {"trn1": "tab:blue", "trn2": "tab:red", "trn3": "tab:green"}
    for r in scored:
        ax.scatter(r["measured_us"], r["estimate_us"], s=22, color=colours.get(r["target"], "tab:gray"),
                   marker="o" if r["split"] == "fit" else "^", edgecolors="none")
    for target, colour in colours.items():
        if any(r["target"] == target for r in scored):
            ax.scatter([], [], color=colour, label=target)
    ax.scatter([], [], marker="o", color="0.4", label="fit rows")
    ax.scatter([], [], marker="^", color="0.4", label="held-out rows")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured latency (us, published)")
    ax.set_ylabel("estimated latency (us, cost model)")
    ax.set_title("nkihub cost model against published NKI measurements", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _md(results: list[dict], summ: dict) -> str:
    lines = ["| row | kind | target | split | estimate (us) | measured (us) | ratio | source |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        est = f"{r['estimate_us']:,.1f}" if r.get("estimate_us") else r.get("note", "")
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") else "-"
        lines.append(f"| {r['id']} | {r['kind']} | {r['target']} | {r['split']} | {est} | "
                     f"{r['measured_us']:,.1f} | {ratio} | [{r['where']}]({r['source']}) |")
    lines += ["", "| target/split | rows | MAPE | within 0.67-1.5x |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['rows']} | {v['mape']:.1%} | {v['within_band']} |" for k, v in summ.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", action="append",
                        help="folder of git snapshots or clones (default: $NKIHUB_SNAPSHOTS, else /work/.mirror)")
    parser.add_argument("--scratch", default=os.environ.get("NKIHUB_CALIBRATION_SCRATCH", "/tmp/nkihub-calibration"),
                        help="where the kernels' files are written and imported from (outside the repository)")
    parser.add_argument("--only", action="append", help="row id(s) to run: repeated, or comma-separated")
    parser.add_argument("--out", default="out/bench")
    args = parser.parse_args(argv)
    only = {i.strip() for o in args.only or () for i in o.split(",") if i.strip()}
    roots = args.snapshots or [os.environ.get("NKIHUB_SNAPSHOTS", "/work/.mirror")]
    snaps = Snapshots(roots, Path(args.scratch))
    results = []
    print(f"{'row':34s} {'kind':13s} {'target':6s} {'split':8s} {'estimate us':>13s} {'measured us':>13s} "
          f"{'ratio':>6s}")
    for row in load():
        if only and row.id not in only:
            continue
        res = {k: getattr(row, k) for k in ("id", "kind", "target", "split", "measured_us", "source", "where")}
        if row.excluded:
            res["note"] = f"excluded: {row.excluded}"
        else:
            t0 = time.perf_counter()
            try:
                rep = _estimate(row, snaps)
                res.update(estimate_us=rep.latency_s * 1e6, ratio=rep.latency_s * 1e6 / row.measured_us,
                           bottleneck=rep.bottleneck, seconds=time.perf_counter() - t0)
            except Exception as exc:   # a row the simulator cannot run is reported, not scored
                res["note"] = f"not run: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:160]}"
        results.append(res)
        shown = (f"{res['estimate_us']:13,.1f} {row.measured_us:13,.1f} {res['ratio']:6.2f}" if "ratio" in res
                 else f"{'':13s} {row.measured_us:13,.1f}  {res['note']}")
        print(f"{row.id:34s} {row.kind:13s} {row.target:6s} {row.split:8s} {shown}", flush=True)
    summ = summary(results)
    print()
    for key, v in summ.items():
        q = v["log_ratio_quantiles"]
        print(f"{key:14s} rows {v['rows']:3d}  MAPE {v['mape']:6.1%}  within {BAND[0]}-{BAND[1]}x "
              f"{v['within_band']}/{v['rows']}  ratio p10..p90 {math.exp(q['p10']):.2f}..{math.exp(q['p90']):.2f}")
    band = held_out_band(results)
    for target, b in band.items():
        print(f"RATIO_BAND[{target!r}] from {b['rows']} held-out rows ({b['from']}): {b['band'][0]:.2f}..{b['band'][1]:.2f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps({"rows": results, "summary": summ, "held_out_band": band},
                                                     indent=1))
    (out / "calibration.md").write_text(_md(results, summ))
    if any(r.get("ratio") for r in results):
        print(f"wrote {plot(results, out / 'calibration.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
