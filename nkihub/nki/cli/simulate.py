"""``nkihub simulate FILE.py:KERNEL --shape ... [--reference FILE.py:FN]``: run on random inputs, compare."""
from __future__ import annotations

import numpy as np

from nkihub.nki.cli.common import add_kernel_args, load_kernel, load_object, make_inputs
from nkihub.nki.dtypes import TOLERANCE, relative_error


def add_parser(sub) -> None:
    p = sub.add_parser("simulate", help="run a kernel on the simulator with random inputs")
    add_kernel_args(p)
    p.add_argument("--reference", default=None, metavar="FILE.py:FN",
                   help="a numpy function of the same arguments to compare the outputs with")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default by dtype)")
    p.set_defaults(func=run)


def _f32(a) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


def run(args) -> int:
    kernel = load_kernel(args.kernel)
    arrays, consts = make_inputs(args, random=True, seed=args.seed, kernel=kernel)
    outs = kernel.run(*arrays, target=args.target, **consts)
    outs = [] if outs is None else list(outs) if isinstance(outs, tuple) else [outs]
    for k, o in enumerate(outs):
        print(f"output {k}: shape {tuple(o.shape)} {o.dtype}, mean {_f32(o).mean():.6g}, "
              f"max |x| {np.abs(_f32(o)).max(initial=0):.6g}")
    if args.reference is None:
        return 0
    ref = load_object(args.reference)(*arrays, **consts)
    refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    if len(refs) != len(outs):
        raise ValueError(f"the reference returned {len(refs)} outputs, the kernel {len(outs)}")
    ok = True
    for k, (o, r) in enumerate(zip(outs, refs)):
        r = np.asarray(r)
        if tuple(r.shape) != tuple(o.shape):
            raise ValueError(f"output {k}: kernel shape {tuple(o.shape)}, reference shape {tuple(r.shape)}")
        rtol = args.rtol if args.rtol is not None else TOLERANCE.get(str(o.dtype), 1e-4)
        err = np.abs(_f32(o) - _f32(r))
        rel = relative_error(o, r)
        good = rel <= rtol
        ok &= good
        print(f"output {k}: max abs error {err.max(initial=0):.3g}, relative to max |ref| {rel:.3g} "
              f"(tolerance {rtol:g}): {'OK' if good else 'MISMATCH'}")
    return 0 if ok else 1
