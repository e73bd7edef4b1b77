"""``nkihub profile FILE.py:KERNEL --shape ...``: print the cost-model report, write trace JSON and PNG."""
from __future__ import annotations

from pathlib import Path

from nkihub import nki
from nkihub.nki.cli.common import add_kernel_args, load_kernel, make_inputs


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="estimate a kernel's time on a target (cost model; nothing runs)")
    add_kernel_args(p)
    p.add_argument("--out-dir", default=".", help="where to write KERNEL.TARGET.trace.json and .png")
    p.add_argument("--json", action="store_true", help="also write the report as KERNEL.TARGET.report.json")
    p.add_argument("--no-png", action="store_true", help="skip the PNG timeline")
    p.set_defaults(func=run)


def run(args) -> int:
    kernel = load_kernel(args.kernel)
    arrays, consts = make_inputs(args, random=False, kernel=kernel)
    report = nki.profile(kernel, *arrays, target=args.target, **consts)
    print(report.table())
    out_dir = Path(args.out_dir)
    stem = f"{report.kernel}.{report.target}"
    trace = report.timeline.save_perfetto(out_dir / f"{stem}.trace.json")
    print(f"\ntimeline (estimate): {trace}  (open in https://ui.perfetto.dev)")
    if not args.no_png:
        png = report.timeline.save_png(out_dir / f"{stem}.png")
        print(f"timeline picture: {png}")
    if args.json:
        path = out_dir / f"{stem}.report.json"
        report.save_json(path)
        print(f"report: {path}")
    return 0
