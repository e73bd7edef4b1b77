"""``nkihub compile FILE.py:KERNEL --shape ... --dtype ... --target ... [-o out.json]``: write the artifact."""
from __future__ import annotations

from pathlib import Path

from nkihub import nki
from nkihub.nki.cli.common import add_kernel_args, load_kernel, make_inputs


def add_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile a kernel for a target and write the program artifact")
    add_kernel_args(p)
    p.add_argument("-o", "--output", default=None, help="artifact path (default: KERNEL.TARGET.json)")
    p.set_defaults(func=run)


def run(args) -> int:
    kernel = load_kernel(args.kernel)
    arrays, consts = make_inputs(args, random=False, kernel=kernel)
    program = nki.compile(kernel, *arrays, target=args.target, **consts)
    target = program.meta["compile"]["target"]
    out = Path(args.output or f"{program.name}.{target}.json")
    program.save(out)
    print(f"{program.summary()}; target {target}; wrote {out}")
    return 0
