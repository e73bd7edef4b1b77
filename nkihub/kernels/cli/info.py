"""``nkihub info REPO``: versions, build variants and which one this machine would load."""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="describe a kernel repo and the variant chosen here")
    p.add_argument("repo_id")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", default=None, help="major version (default: newest)")
    g.add_argument("--revision", default=None)
    p.add_argument("--backend", default=None, choices=["cpu", "neuron"])
    p.add_argument("--endpoint", default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from nkihub.hub_client.client import hf_api

    from .. import config
    from ..loading import _remote_variants, _select_ref, available_versions
    from ..variants import select_variant

    versions = available_versions(args.repo_id, endpoint=args.endpoint, offline=False)
    # No --version: describe the newest, said here (not the loader's "no version given" warning, which is
    # for kernels.get in a program). No version branches at all: _select_ref says so.
    newest = args.version is None and args.revision is None and bool(versions)
    version = max(versions) if newest else args.version
    ref = _select_ref(args.repo_id, version, args.revision, args.endpoint, False, required=False)
    api = hf_api(config.endpoint(args.endpoint), config.token())
    commit = api.repo_info(args.repo_id, repo_type="kernel", revision=ref).sha
    print(f"{args.repo_id} @ {ref} ({commit[:12]}){'  (newest; --version N for another)' if newest else ''}")
    print(f"versions: {', '.join(f'v{v}' for v in sorted(versions)) or 'none'}")
    selection = select_variant(_remote_variants(args.repo_id, ref, args.endpoint), args.backend)
    print("variants:\n  " + selection.table().replace("\n", "\n  "))
    if selection.chosen:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(args.repo_id, f"build/{selection.chosen}/metadata.json", repo_type="kernel",
                               revision=commit, endpoint=config.endpoint(args.endpoint),
                               cache_dir=config.cache_dir())
        meta = json.loads(open(path).read())
        extra = meta.get("nkihub", {})
        print(f"name: {meta.get('name')}  package version: {extra.get('package-version', '?')}  "
              f"license: {meta.get('license')}")
        if extra.get("functions"):
            print(f"functions: {', '.join(extra['functions'])}")
        print(f"files: {len(meta.get('digest', {}).get('files', {}))} (sha256 recorded)")
    return 0
