"""``nkihub verify REPO``: download every variant and check each file against its digests and signature,
and a checked signature against the revision's version, the release and its expiry (:mod:`kernels.freshness`;
this machine's memory of accepted versions is neither read nor changed)."""

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
    from ..freshness import Request, check_current, is_pinned
    from ..loading import _refs, _select_ref
    from ..signing import SIGNATURES, KernelSignatureError, check_signature, signature_path, trusted_for
    from ..verify import check_files

    ref = _select_ref(args.repo_id, args.version, args.revision, args.endpoint, config.offline(), required=False)
    snap = fetch_snapshot(args.repo_id, revision=ref, allow_patterns=["build/*", "signatures/*"],
                          cache_dir=config.cache_dir(), endpoint=config.endpoint(args.endpoint), token=config.token(),
                          local_files_only=config.offline())
    variants = sorted({rel.split("/")[1] for rel in snap.files if rel.startswith("build/") and rel.count("/") >= 2})
    tag_names, tags = _refs(args.repo_id, snap.commit, config.offline(), args.endpoint)
    request = Request(ref, snap.commit, is_pinned(ref, tag_names), tags)
    docs = {rel[len(SIGNATURES):-len(".json")]: data for rel, data in snap.files.items()
            if rel.startswith(SIGNATURES) and rel.endswith(".json")}
    failures = 0
    for variant in variants:
        prefix = f"build/{variant}/"
        files = {rel[len(prefix):]: data for rel, data in snap.files.items() if rel.startswith(prefix)}
        bad = check_files(files)
        try:
            signed = check_signature(args.repo_id, variant, files, snap.files.get(signature_path(variant)))
            if signed.checked:
                siblings = {v: d for v, d in docs.items() if v != variant}
                note = check_current(args.repo_id, variant, signed, request, siblings=siblings,
                                     trusted=trusted_for(args.repo_id), variants=set(variants),
                                     required=config.require_signature())
                signed = f"{signed}{note}"
        except KernelSignatureError as e:
            bad.append(("signature", "a trusted signature", str(e)))
            signed = "signature refused"
        failures += len(bad)
        print(f"{variant}: {'ok' if not bad else f'{len(bad)} mismatch(es)'}; {signed}")
        for rel, want, got in bad:
            print(f"  {rel}: expected {want}, got {got}")
    print(f"{args.repo_id} @ {ref} ({snap.commit[:12]}): {'verified' if not failures else 'FAILED'}")
    return 1 if failures else 0
