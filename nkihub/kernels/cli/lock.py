"""``nkihub lock [PROJECT]``: pin [tool.kernels.dependencies] to commits in kernels.lock."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("lock", help="write kernels.lock from pyproject.toml [tool.kernels.dependencies]")
    p.add_argument("project_dir", nargs="?", type=Path, default=Path("."))
    p.add_argument("--endpoint", default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..lockfile import LOCKFILE, lock_kernels

    locks = lock_kernels(args.project_dir, endpoint=args.endpoint)
    for lk in locks:
        what = f"v{lk.version}" if lk.version is not None else lk.revision
        print(f"{lk.repo_id} {what} -> {lk.commit}")
    print(f"wrote {args.project_dir / LOCKFILE}")
    return 0
