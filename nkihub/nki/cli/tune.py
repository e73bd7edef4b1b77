"""``nkihub tune FILE.py:KERNEL --shape ... --space NAME=V1,V2 --target trn1,trn2``: sweep a kernel's keyword
constants on the cost model; print the table of every candidate, write a plot of estimate by parameter
and the JSON report. Candidates run in local worker processes (one per core) or on a Ray cluster."""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

from nkihub import nki
from nkihub.nki.cli.common import add_kernel_args, load_kernel, load_object, make_inputs


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="autotune a kernel's keyword constants on the cost model (nothing runs on a device)")
    add_kernel_args(p)
    p.add_argument("--space", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="values of one parameter (repeat per parameter), or a JSON object of name -> list")
    p.add_argument("--configs", default=None, metavar="JSON", help="a JSON list of configs instead of --space")
    p.add_argument("--check", default=None, metavar="FILE.py:FN",
                   help="reference function of the kernel's arguments (numpy); default: the kernel's default config")
    p.add_argument("--check-shape", action="append", default=[], metavar="AxB",
                   help="shapes of the inputs candidates are simulated on (default: --shape up to 2^24 elements, "
                        "else leading slices of them the kernel accepts)")
    p.add_argument("--rtol", type=float, default=None, help="check tolerance, max error / max |expected| "
                   "(default by dtype)")
    p.add_argument("--search", choices=("auto", "exhaustive", "tpe"), default="auto",
                   help="exhaustive up to 256 configs, else Optuna TPE (auto)")
    p.add_argument("--budget", type=int, default=64, help="configs a TPE search evaluates per target")
    p.add_argument("--seed", type=int, default=0, help="seed of the TPE sampler and of the check inputs")
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default: one per core)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run candidates on this Ray cluster (default: RAY_ADDRESS if set)")
    p.add_argument("--out-dir", default=".", help="where to write KERNEL.tune.png and KERNEL.tune.json")
    p.add_argument("--no-png", action="store_true", help="skip the plot")
    p.add_argument("--no-cache", action="store_true", help="evaluate every candidate again")
    p.set_defaults(func=run)


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_space(items: list[str]) -> dict:
    """``["k_group=1,2,4", "m_tiles=2"]`` or ``['{"k_group": [1, 2]}']`` -> ``{"k_group": [1, 2, 4], ...}``."""
    space = {}
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                space.update(json.loads(item))
            except ValueError as e:
                raise ValueError(f"--space {item!r}: not a JSON object ({e})") from None
            continue
        name, eq, values = item.partition("=")
        if not eq or not name.strip() or not values.strip():
            raise ValueError(f"--space {item!r}: expected NAME=V1,V2,... (e.g. k_group=1,2,4)")
        space[name.strip()] = [_literal(v.strip()) for v in values.split(",") if v.strip()]
    return space


def _progress(total_hint: int):
    from tqdm import tqdm
    bar = tqdm(total=total_hint, unit="cand", desc="tuning", file=sys.stderr, dynamic_ncols=True,
               disable=None)   # None: no bar when stderr is not a terminal

    def update(done, total, result):
        bar.total = total
        bar.update(1)
        bar.set_postfix_str(f"{result.target} {result.status}", refresh=False)
    return bar, update


def run(args) -> int:
    kernel = load_kernel(args.kernel)
    if bool(args.space) == bool(args.configs):
        raise ValueError("give --space NAME=V1,V2,... (repeat per parameter) or --configs JSON, not both")
    space = parse_space(args.space) if args.space else None
    configs = json.loads(args.configs) if args.configs else None
    arrays, consts = make_inputs(args, random=True, seed=args.seed)
    check_args = None
    if args.check_shape:
        # the same --dtype/--arg, other shapes
        check_args, _ = make_inputs(argparse.Namespace(**{**vars(args), "shape": args.check_shape}), random=True,
                                    seed=args.seed)
    check = load_object(args.check) if args.check else None
    bar, update = _progress(0)
    try:
        report = nki.autotune.tune(kernel, *arrays, configs=configs, space=space, target=args.target, check=check,
                                   check_args=check_args, rtol=args.rtol, search=args.search, budget=args.budget,
                                   seed=args.seed, workers=args.workers, ray=args.ray, use_cache=not args.no_cache,
                                   progress=update, **consts)
    finally:
        bar.close()
    print(report.table())
    print(f"\n{len(report.results)} candidates in {report.seconds:.1f} s ({report.where}, {report.workers} "
          f"workers, {report.search} search); every latency is a cost-model estimate")
    out_dir = Path(args.out_dir)
    path = report.save_json(out_dir / f"{report.kernel}.tune.json")
    print(f"report: {path}")
    if not args.no_png:
        print(f"plot: {report.save_png(out_dir / f'{report.kernel}.tune.png')}")
    return 0 if len(report.best) == len(report.targets) else 1
