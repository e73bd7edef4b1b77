"""Entry point of the ``nkihub`` command: the Hub subcommands (serve, publish, versions, info, lock,
download, verify, benchmark, keygen, tune-package) and the kernel-author ones (compile, profile, simulate,
tune). The name is nkihub's own: Hugging Face's ``kernels`` and AWS's ``nki`` / ``neuronx-cc`` ship commands
of their own names, and this one never shadows them.

Known errors (kernel rule violations, Hub errors, bad arguments, missing files) become one line on stderr
with a hint to set ``NKIHUB_DEBUG=1`` for the traceback, and a non-zero exit; anything else is a bug and
keeps its traceback.
"""
from __future__ import annotations

import argparse
import sys

from nkihub.kernels import config


def _subcommands():
    from nkihub.kernels.cli import (benchmark, download, info, keygen, lock, publish, serve, tune as tune_package,
                                    verify, versions)
    from nkihub.nki.cli import compile as compile_cmd
    from nkihub.nki.cli import profile as profile_cmd
    from nkihub.nki.cli import simulate as simulate_cmd
    from nkihub.nki.cli import tune as tune_cmd
    return (serve, publish, versions, info, lock, download, verify, benchmark, keygen, tune_package,
            compile_cmd, profile_cmd, simulate_cmd, tune_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nkihub", description="Write, verify, estimate, publish and fetch "
                                     "NeuronCore kernels: the local Hub and the NKI tools.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _subcommands():
        module.add_parser(sub)
    return parser


def _known_errors() -> tuple[type[BaseException], ...]:
    from nkihub.hub_client import HubClientError
    from nkihub.simulator.errors import NkiError

    known: list[type[BaseException]] = [NkiError, HubClientError, ValueError, TypeError, FileNotFoundError,
                                        PermissionError, ConnectionError, ImportError, SyntaxError]
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


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    # A kernel error renders "file:line:col / source / caret / error: ..." : keep where and what.
    lines = text.splitlines()
    first = lines[0] if lines else type(error).__name__
    message = next((ln for ln in lines if ln.startswith("error:")), None)
    return f"{first}: {message[len('error: '):]}" if message and message != first else first


def main(argv: list[str] | None = None) -> int:
    """Run one ``nkihub`` subcommand; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("nkihub: interrupted", file=sys.stderr)
        return 130
    except _known_errors() as e:
        if config.debug():
            raise
        print(f"nkihub {args.command}: error: {_one_line(e)}", file=sys.stderr)
        print("(set NKIHUB_DEBUG=1 for the full message and traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
