"""``kernels publish PATH``: build the kernel-repo layout and upload it in one commit (optionally signed)."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("publish", help="publish a kernel source package (a directory with kernel.json)")
    p.add_argument("path", help="kernel source package directory")
    p.add_argument("--repo-id", default=None, help="target repo (default: neuron/<name from kernel.json>)")
    p.add_argument("--endpoint", default=None, help="Hub URL (default: $HF_ENDPOINT)")
    p.add_argument("--token", default=None, help="write token (default: $HF_TOKEN)")
    p.add_argument("--sign", default=None, metavar="KEY",
                   help="private key file from `kernels keygen`: sign every variant with it")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..publish import publish

    print(publish(args.path, args.repo_id, endpoint=args.endpoint, token=args.token, sign=args.sign))
    return 0
