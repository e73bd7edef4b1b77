"""``kernels verify REPO``: download every variant and check each file against its recorded digests."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="check every file of a kernel repo against its digests")
    p.add_argument("repo_id")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", default=None)
    g.add_argument("--revision", default=None)
    p.add_argument("--endpoint", default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from hub_client.client import download_snapshot

    from .. import config
    from ..loading import _select_ref, verify_variant

    ref = _select_ref(args.repo_id, args.version, args.revision, args.endpoint, config.offline(), required=False)
    snap = download_snapshot(args.repo_id, revision=ref, allow_patterns=["build/*"], cache_dir=config.cache_dir(),
                             endpoint=config.endpoint(args.endpoint), token=config.token(),
                             local_files_only=config.offline())
    build = snap / "build"
    failures = 0
    for variant in sorted(p for p in build.iterdir() if p.is_dir()) if build.is_dir() else []:
        bad = verify_variant(variant)
        failures += len(bad)
        status = "ok" if not bad else f"{len(bad)} mismatch(es)"
        print(f"{variant.name}: {status}")
        for rel, want, got in bad:
            print(f"  {rel}: expected {want}, got {got}")
    print(f"{args.repo_id} @ {ref} ({snap.name[:12]}): {'verified' if not failures else 'FAILED'}")
    return 1 if failures else 0
