"""``nkihub versions REPO``: the major-version branches and release tags of a kernel repo."""

from __future__ import annotations

import re


def add_parser(sub) -> None:
    p = sub.add_parser("versions", help="list the versions of a kernel repo")
    p.add_argument("repo_id")
    p.add_argument("--endpoint", default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from nkihub.hub_client.client import hf_api

    from .. import config

    refs = hf_api(config.endpoint(args.endpoint), config.token()).list_repo_refs(args.repo_id, repo_type="kernel")
    majors = sorted((int(b.name[1:]), b.target_commit) for b in refs.branches if re.fullmatch(r"v\d+", b.name))
    tags = sorted((t.name, t.target_commit) for t in refs.tags)
    if not majors:
        print(f"{args.repo_id}: no version branches")
    for major, commit in majors:
        releases = [name for name, c in tags if c == commit]
        latest = "  (latest)" if major == majors[-1][0] else ""
        print(f"v{major}: {commit[:12]}  {' '.join(releases)}{latest}")
    return 0
