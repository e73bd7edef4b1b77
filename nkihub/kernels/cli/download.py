"""``nkihub download [PROJECT]``: fetch the locked kernels into the cache (for offline loads)."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("download", help="download the kernels pinned in kernels.lock")
    p.add_argument("project_dir", nargs="?", type=Path, default=Path("."))
    p.add_argument("--all-variants", action="store_true", help="download every build variant, not just this machine's")
    p.add_argument("--endpoint", default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..lockfile import download_locked

    for path in download_locked(args.project_dir, all_variants=args.all_variants, endpoint=args.endpoint):
        print(path)
    return 0
