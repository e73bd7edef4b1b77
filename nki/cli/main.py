"""Entry point of the ``nki`` command (``nki compile|profile|simulate|tune``).

Known errors (kernel rule violations, bad arguments, missing files) become one line on stderr with a hint
to set ``NKIHUB_DEBUG=1`` for the traceback, and a non-zero exit.
"""
from __future__ import annotations

import argparse
import sys

from nki import config
from nki.cli import compile as compile_cmd
from nki.cli import profile as profile_cmd
from nki.cli import simulate as simulate_cmd
from nki.cli import tune as tune_cmd
from simulator.errors import NkiError

SUBCOMMANDS = (compile_cmd, profile_cmd, simulate_cmd, tune_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nki", description="Compile, profile (cost-model estimates), "
                                     "simulate and autotune NeuronCore kernels.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("nki: interrupted", file=sys.stderr)
        return 130
    except (NkiError, ValueError, TypeError, FileNotFoundError, ImportError, SyntaxError) as e:
        if config.debug():
            raise
        text = str(e).strip()
        # A kernel error renders "file:line:col / source / caret / error: ..." : keep where and what.
        lines = text.splitlines()
        first = lines[0] if lines else type(e).__name__
        message = next((ln for ln in lines if ln.startswith("error:")), None)
        one = f"{first}: {message[len('error: '):]}" if message and message != first else first
        print(f"nki {args.command}: error: {one}", file=sys.stderr)
        print("(set NKIHUB_DEBUG=1 for the full message and traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
