"""``nkihub verify REPO``: download every variant and check each file against its digests and signature."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="check every file of a kernel repo against its digests and signatures")
    p.add_argument("repo_id")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", default=None)
    g.add_argument("--revision", default=None)
    p.add_argument("--endpoint", default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from nkihub.hub_client.snapshot import fetch_snapshot

    from .. import config
    from ..loading import _select_ref
    from ..signing import KernelSignatureError, check_signature, signature_path
    from ..verify import check_files

    ref = _select_ref(args.repo_id, args.version, args.revision, args.endpoint, config.offline(), required=False)
    snap = fetch_snapshot(args.repo_id, revision=ref, allow_patterns=["build/*", "signatures/*"],
                          cache_dir=config.cache_dir(), endpoint=config.endpoint(args.endpoint), token=config.token(),
                          local_files_only=config.offline())
    variants = sorted({rel.split("/")[1] for rel in snap.files if rel.startswith("build/") and rel.count("/") >= 2})
    failures = 0
    for variant in variants:
        prefix = f"build/{variant}/"
        files = {rel[len(prefix):]: data for rel, data in snap.files.items() if rel.startswith(prefix)}
        bad = check_files(files)
        try:
            signed = check_signature(args.repo_id, variant, files, snap.files.get(signature_path(variant)))
        except KernelSignatureError as e:
            bad.append(("signature", "a trusted signature", str(e)))
            signed = "signature refused"
        failures += len(bad)
        print(f"{variant}: {'ok' if not bad else f'{len(bad)} mismatch(es)'}; {signed}")
        for rel, want, got in bad:
            print(f"  {rel}: expected {want}, got {got}")
    print(f"{args.repo_id} @ {ref} ({snap.commit[:12]}): {'verified' if not failures else 'FAILED'}")
    return 1 if failures else 0
