"""``nkihub publish PATH``: build the kernel-repo layout and upload it in one commit (optionally signed)."""

from __future__ import annotations

from .tune import add_tune_args, tune


def add_parser(sub) -> None:
    p = sub.add_parser("publish", help="publish a kernel source package (a directory with kernel.json)")
    p.add_argument("path", help="kernel source package directory")
    p.add_argument("--repo-id", default=None, help="target repo (default: neuron/<name from kernel.json>)")
    p.add_argument("--endpoint", default=None, help="Hub URL (default: $HF_ENDPOINT)")
    p.add_argument("--token", default=None, help="write token (default: $HF_TOKEN)")
    p.add_argument("--sign", default=None, metavar="KEY",
                   help="private key file from `nkihub keygen`: sign every variant with it")
    p.add_argument("--expires", default=None, metavar="WHEN",
                   help="with --sign: the signature stops vouching that this is the current build after WHEN "
                        "(30d, 12h, 2w, or an ISO date); later loads of the branch warn, or refuse under "
                        "KERNELS_REQUIRE_SIGNATURE=1. Publish a new version before then")
    p.add_argument("--tune", action="store_true",
                   help="run the package's autotuning sweeps first and write its tuned.json (see `nkihub tune-package`)")
    add_tune_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..publish import publish

    if args.tune and tune(args.path, args.target, args.workers, args.ray):
        return 1

    print(publish(args.path, args.repo_id, endpoint=args.endpoint, token=args.token, sign=args.sign,
                  expires=args.expires))
    return 0
