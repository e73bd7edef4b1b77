"""``nkihub serve``: run the local Hub on a storage directory."""

from __future__ import annotations

import os


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="run the local Hub-compatible server")
    p.add_argument("--root", required=True, help="storage directory (created if missing)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--token", default=None, help="token required for writes (default: $NKIHUB_HUB_TOKEN; none)")
    p.add_argument("--lfs-threshold", type=int, default=None,
                   help="serve files of at least this size as git-LFS (only for clients with HF_HUB_DISABLE_XET=1)")
    p.add_argument("--trusted-publisher", action="append", default=None, metavar="ORG",
                   help="organization the Hub reports as a trusted kernel publisher (repeatable; default: neuron)")
    p.set_defaults(func=run)


def run(args) -> int:
    from nkihub.hub_client.server import serve

    from nkihub.kernels import config

    token = args.token or os.environ.get("NKIHUB_HUB_TOKEN") or None
    keys = config.trusted_keys()  # the pages call a signature trusted by the keys a load here would trust
    print(f"nkihub Hub on http://{args.host}:{args.port} (root {args.root}); set HF_ENDPOINT to this URL; "
          f"open it in a browser to see its repos", flush=True)
    serve(args.root, host=args.host, port=args.port, token=token, lfs_threshold=args.lfs_threshold,
          trusted_publishers=tuple(args.trusted_publisher or ("neuron",)), trusted_keys=keys)
    return 0
