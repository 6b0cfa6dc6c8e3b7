"""``dsclean report``: argparse wiring over :func:`dsclean.report.build.write_report`."""

from __future__ import annotations

import argparse

from .. import argtypes
from .bucket import add_storage_option
from .exit_codes import EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report of a scan: galleries, duplicates, charts, a table",
        description="Write ONE self-contained HTML file (no network requests) showing what a scan found.",
    )
    p.add_argument(
        "target",
        metavar="ROOT|RESULTS_DIR",
        help="a scanned dataset root (its last scan's results are used), a results folder/file, or a scanned "
        "storage URL (s3://...: its last scan's results; thumbnails of the objects read from the bucket)",
    )
    p.add_argument(
        "-o", "--output", default="report.html", metavar="FILE", help="the HTML file to write (default ./report.html)"
    )
    p.add_argument(
        "--dups",
        metavar="GROUPS.jsonl",
        help="duplicate groups from `dsclean dups` (split leakage first); "
        "default: exact duplicates inside ROOT when the scan recorded hashes",
    )
    p.add_argument("--no-thumbnails", action="store_true", help="no picture of any file in the report (privacy)")
    p.add_argument(
        "--absolute-paths",
        action="store_true",
        help="keep this machine's absolute paths in the report (default: shown relative, e.g. ROOT/...)",
    )
    p.add_argument(
        "--max-thumbnails",
        type=argtypes.count,
        default=200,
        metavar="N",
        help="thumbnails per bad/warn reason; the rest are counted (default 200)",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=argtypes.count,
        default=0,
        metavar="N",
        help="thumbnail worker processes (default: all usable cores)",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where ROOT's last scan is recorded (default: $DSCLEAN_STATE_DIR, else the per-user state folder)",
    )
    p.add_argument(
        "--failures",
        nargs="+",
        default=[],
        metavar="LOG",
        help='training failure logs (dsclean.guard\'s) for a "Failed in training" section (default: what '
        "dsclean quarantine --from-log recorded for ROOT, if anything)",
    )
    add_storage_option(
        p.add_argument_group(
            "Object storage",
            "a bucket scan's report reads the objects it shows with the scan's recorded storage options (secrets "
            "left out: they come from the environment, a profile or --storage-option again)",
        )
    )
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from ..report.build import ReportOptions, write_report
    from ..report.collect import Caps
    from ..storage.urls import parse_storage_options, redact_argv

    options = ReportOptions(
        dups=args.dups,
        thumbnails=not args.no_thumbnails,
        absolute_paths=args.absolute_paths,
        jobs=args.jobs,
        caps=Caps(per_reason=args.max_thumbnails),
        command=tuple(redact_argv(["dsclean", *getattr(args, "argv", ())])),
        state_dir=args.state_dir,
        failures=tuple(args.failures),
        storage_options=parse_storage_options(args.storage_options),
    )
    s = write_report(args.target, args.output, options)
    if args.json:
        import dataclasses
        import json

        print(json.dumps(dataclasses.asdict(s), indent=2, default=str))
    elif not args.quiet:
        print(f"scan results: {s.results_source}")
        print(format_report_summary(s))
    return EXIT_OK


def format_report_summary(s) -> str:
    thumbs = f"{s.thumbnails:,} thumbnails, {s.placeholders:,} placeholders"
    if s.failed:
        thumbs += f" ({s.failed:,} files crashed or hung a decoder)"
    line = (
        f"Report: {s.output} ({s.bytes / 1e6:,.1f} MB; {s.files:,} files, {s.problems:,} problems; "
        f"{thumbs}; {s.elapsed:.1f} s)"
    )
    return line + (f"\n{s.incomplete}" if getattr(s, "incomplete", None) else "")
