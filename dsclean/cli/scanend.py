"""The end of ``dsclean scan``, shared by a folder's and a bucket's scan (:mod:`.scan`, :mod:`.bucket`)."""

from __future__ import annotations

import argparse
import signal
import sys

from .exit_codes import EXIT_FOUND_BAD, EXIT_INCOMPLETE, EXIT_OK


def scan_exit(args: argparse.Namespace, summary) -> int:
    """The exit code of a finished scan (a folder's or a bucket's), saying why when it was cut short."""
    from ..scanning.scanner import move_failure_line

    if summary.interrupted:
        print(
            f"dsclean scan: interrupted by {signal.Signals(summary.signal).name}; results so far were saved",
            file=sys.stderr,
        )
        return 128 + summary.signal
    if summary.stopped:
        print(f"dsclean scan: incomplete: {summary.stopped} ({summary.results_path})", file=sys.stderr)
    if summary.move_failures:
        print(
            f"dsclean scan: incomplete: {move_failure_line(summary)}; every failed path is in {summary.problems_path}",
            file=sys.stderr,
        )
    if summary.incomplete:
        return EXIT_INCOMPLETE
    return EXIT_FOUND_BAD if args.check and summary.bad else EXIT_OK
