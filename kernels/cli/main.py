"""Entry point of the ``kernels`` command.

Known errors become one line on stderr (with a hint to set ``NKIHUB_DEBUG=1`` for the traceback)
and a non-zero exit; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys

from .. import config
from . import benchmark, download, info, keygen, lock, publish, serve, tune, verify, versions

SUBCOMMANDS = (serve, publish, tune, versions, info, lock, download, verify, benchmark, keygen)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernels", description="Publish, fetch, lock and serve NeuronCore kernels.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def _known_errors() -> tuple[type[BaseException], ...]:
    from hub_client import HubClientError

    known: list[type[BaseException]] = [HubClientError, ValueError, FileNotFoundError, PermissionError,
                                        ConnectionError]
    try:
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

        known += [HfHubHTTPError, LocalEntryNotFoundError]
    except ImportError:  # pragma: no cover
        pass
    try:  # the HTTP library under huggingface_hub 2.x: refused connections, timeouts
        import httpx2

        known.append(httpx2.TransportError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(known)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("kernels: interrupted", file=sys.stderr)
        return 130
    except _known_errors() as e:
        if config.debug():
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"kernels {args.command}: error: {first}", file=sys.stderr)
        print("(set NKIHUB_DEBUG=1 for the full message and traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
