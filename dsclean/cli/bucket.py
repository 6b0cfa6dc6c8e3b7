"""``dsclean scan|restore|recover`` on a storage URL (``s3://``, ``gs://``, ``az://``, ``file://``):
the object-storage options and the handlers that route to :mod:`dsclean.storage`."""

from __future__ import annotations

import argparse
import json

from .. import argtypes
from ..errors import UserError

#: the scan options that only mean something for a URL: dest -> its default
BUCKET_ONLY = {
    "storage_options": [],
    "manifest": None,
    "read_threads": None,
    "max_in_memory": None,
    "retries": None,
}


def add_storage_option(p: argparse._ActionsContainer) -> None:
    p.add_argument(
        "--storage-option",
        dest="storage_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an fsspec option of the storage URL, e.g. endpoint_url=http://127.0.0.1:9000 or "
        "client_kwargs.region_name=eu-west-1 (repeatable); credentials also come from the standard places "
        "(AWS_* variables, profiles, fsspec config); secret values are never printed or stored",
    )


def add_bucket_arguments(p: argparse.ArgumentParser) -> None:
    """The ``Object storage`` group of ``dsclean scan`` (used when ROOT is a URL)."""
    from ..storage.reads import DEFAULT_READ_THREADS, DEFAULT_RETRIES

    g = p.add_argument_group("Object storage", "when ROOT is a URL: s3://BUCKET/PREFIX, gs://, az://, file://")
    add_storage_option(g)
    g.add_argument(
        "--manifest",
        metavar="FILE",
        help="check the keys this file lists instead of listing the bucket: text (a key a line), CSV with a "
        "'key' column, or Parquet with a 'key' column (e.g. an S3 Inventory report); read streaming",
    )
    g.add_argument(
        "--read-threads",
        type=argtypes.count,
        metavar="N",
        help=f"object reads in flight per worker (default {DEFAULT_READ_THREADS})",
    )
    g.add_argument(
        "--max-in-memory",
        type=argtypes.size,
        metavar="SIZE",
        help="objects larger than this are checked from a temp file (removed after), not memory (default 256M)",
    )
    g.add_argument(
        "--retries",
        type=argtypes.count,
        metavar="N",
        help=f"retries of a read after throttling (503 SlowDown, 429) or a server error, with backoff "
        f"(default {DEFAULT_RETRIES})",
    )


def refuse_bucket_options(args: argparse.Namespace) -> None:
    """A local ROOT with an object-storage option: say so instead of ignoring it."""
    given = [k for k, default in BUCKET_ONLY.items() if getattr(args, k, default) not in (default, None, [])]
    if given:
        names = ", ".join("--" + k.replace("_", "-").removesuffix("s" if k == "storage_options" else "") for k in given)
        where = " ".join(args.root) if isinstance(args.root, list) else args.root
        raise UserError(f"{names}: only for a storage URL (s3://...), and {where} is local")


def cmd_scan_bucket(args: argparse.Namespace, check, write_html, flags=None) -> int:
    """``dsclean scan URL`` (``check``, ``flags``: the CheckOptions and FlagOptions of the checking and --flag-*
    options, built by cli.scan; ``write_html(args, summary, storage_options)``: cli.scan's ``--html``, passed in:
    no import back)."""
    from ..quality.flags import FlagOptions
    from ..scanning.scanner import format_summary
    from ..storage.reads import DEFAULT_READ_THREADS, ReadPolicy
    from ..storage.scan import BucketScanOptions, scan_bucket
    from ..storage.urls import parse_storage_options, redact_argv

    defaults = ReadPolicy()
    options = BucketScanOptions(
        storage_options=parse_storage_options(args.storage_options),
        check=check,
        jobs=args.jobs,
        read_threads=args.read_threads or DEFAULT_READ_THREADS,
        policy=ReadPolicy(
            retries=defaults.retries if args.retries is None else args.retries,
            max_in_memory=args.max_in_memory or defaults.max_in_memory,
        ),
        manifest=args.manifest,
        quarantine=args.quarantine,
        denylist=args.denylist is not None,  # --denylist [FILE], an option of shard sets and buckets (cli.parser)
        denylist_file=args.denylist or None,
        dry_run=args.dry_run,
        report_dir=args.report,
        state_dir=args.state_dir,
        include_hidden=args.include_hidden,
        rescan=args.rescan,
        backend=args.backend,
        scheduler=args.scheduler,
        command=tuple(redact_argv(["dsclean", *getattr(args, "argv", ())])),
        shard=args.shard,
        quarantine_flags=tuple(args.quarantine_flags),
        flags=flags if flags is not None else FlagOptions(),
    )
    unsupported = [
        name
        for name, on in (
            ("--from-log", bool(args.from_logs)),
            ("--backend", args.backend not in ("processes", "dask")),
        )
        if on
    ]
    if unsupported:
        raise UserError(f"{', '.join(unsupported)}: not yet for a storage URL (docs/guides/buckets.md)")
    if args.html:
        from ..report.source import check_output

        check_output(args.html, None)  # a local file (never in the bucket), refused before the scan, not after
    summary = scan_bucket(args.root, options)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    elif not args.quiet:
        print(format_summary(summary))
    if args.html:  # the report `dsclean report URL -o FILE` writes, of the scan just done
        write_html(args, summary, options.storage_options)
    from .scanend import scan_exit

    return scan_exit(args, summary)


def bucket_report(args: argparse.Namespace, verb: str):
    """``restore`` / ``recover`` of a bucket quarantine (args.quarantine is a URL)."""
    from ..storage import quarantine as bq
    from ..storage.urls import parse_storage_options

    options = parse_storage_options(getattr(args, "storage_options", []) or [])
    if verb == "restore":
        if args.root:
            raise UserError("--root: a bucket quarantine restores to the recorded URLs")
        return bq.restore(args.quarantine, options, args.state_dir)
    return bq.recover(args.quarantine, options, getattr(args, "state_dir", None))
