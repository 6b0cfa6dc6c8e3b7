"""The ``dsclean`` command: a thin layer of argparse over the Python API.

One module per command group (:mod:`.scan`, :mod:`.index`, :mod:`.diagnose`):
each parses, calls the API, prints.

Exit codes: 0 done; 1 ``--check`` found bad files (or a restore refused
entries); 2 usage error or bad input (message, no traceback); 130/143
interrupted by SIGINT/SIGTERM after flushing what was decided.
"""
from __future__ import annotations

import argparse
import signal
import sys
from typing import Sequence

from .. import __version__
from ..errors import UserError
from . import diagnose, index, report, scan
from .exit_codes import EXIT_OK, EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsclean", description="Make image and audio training data safe to feed to PyTorch.")
    parser.add_argument("--version", action="version", version=f"dsclean {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    scan.add_parsers(sub)
    index.add_parsers(sub)
    diagnose.add_parsers(sub)
    report.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    args.argv = list(sys.argv[1:] if argv is None else argv)  # shown in reports: how the command was run
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"dsclean {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("dsclean: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
