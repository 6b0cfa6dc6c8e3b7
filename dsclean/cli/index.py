"""``dsclean index`` and ``dsclean info``: argparse wiring and human output.

The main CLI calls :func:`add_parsers` with its subparsers object; each
handler returns an exit code and raises :class:`UserError` for user mistakes.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from .. import argtypes
from ..errors import UserError
from .bucket import add_storage_option
from .exit_codes import EXIT_OK
from .scan import add_location_options, add_split_names_option, add_symlink_options

if TYPE_CHECKING:  # the index stage (pyarrow, numpy) is imported when an index command runs, not by the parser
    from ..index.summary import IndexSummary

_MAX_CLASSES_SHOWN = 30


def add_parsers(sub) -> None:
    """Register the ``index`` and ``info`` subcommands."""
    p = sub.add_parser(
        "index",
        help="write a compact memory-mapped index of the good files for IndexedDataset",
        description="Index the media files under ROOT (minus the quarantine and files the scan marked bad) "
        "into an Arrow file or an npy folder that IndexedDataset memory-maps.",
    )
    p.add_argument(
        "root",
        metavar="ROOT",
        help="the dataset's root folder, or a bucket prefix (s3://BUCKET/PREFIX, gs://, az://, file://): its good "
        "objects, judged by the prefix's last bucket scan (docs/guides/buckets.md)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="index to write: NAME.arrow (file) or NAME.npy (folder); with --splits, the folder to write "
        "SPLIT.arrow into",
    )
    p.add_argument(
        "--splits",
        action="store_true",
        help="ROOT is a split root (ROOT/train, ROOT/val, ...): write one index per split into the -o folder, "
        "every one with the same classes and class_to_idx (docs/guides/splits.md)",
    )
    p.add_argument(
        "--allow-class-mismatch",
        action="store_true",
        help="with --splits: accept splits whose class folders differ from train's (every split then gets the "
        "union of the classes; a class a split lacks is empty there); refused by default",
    )
    add_split_names_option(p)
    p.add_argument(
        "--format", choices=("arrow", "npy"), help="index format (default: from the output name, else arrow)"
    )
    p.add_argument("--labels", metavar="FILE.csv", help="labels from a CSV with columns path,label (flat layouts)")
    p.add_argument("--no-labels", action="store_true", help="no labels: every label is -1")
    p.add_argument(
        "--scan-results",
        metavar="FILE",
        nargs="+",
        help="scan results to exclude bad files: one file, or every part's of a job array "
        "(default: the last scan of ROOT, found through the state folder)",
    )
    p.add_argument(
        "--root-moved",
        action="store_true",
        help="accept --scan-results that record another root: the tree was moved or copied since its scan",
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="do not decode files the scan did not cover (never scanned, changed, restored): "
        "confirm them by magic bytes only",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=argtypes.count,
        default=0,
        metavar="N",
        help="processes checking files the scan did not cover (default: all usable cores)",
    )
    p.add_argument(
        "--files",
        choices=("dsclean", "imagefolder"),
        default="dsclean",
        help="which files: dsclean (media it can check; hidden files skipped; default) or imagefolder "
        "(torchvision's exact rule: IMG_EXTENSIONS, hidden files included, symlinks followed)",
    )
    add_symlink_options(p)
    add_location_options(p)
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder to leave out (repeatable); for a storage URL root, a URL or key prefix under it",
    )
    p.add_argument(
        "--dedup",
        action="store_true",
        help="leave out exact duplicates (same content hash), keeping the first in path order",
    )
    p.add_argument(
        "--facts",
        action="store_true",
        help="copy the scan's facts (media facts, content hash, quality facts) into the index "
        "(arrow only; default: none, so the index stays small)",
    )
    p.add_argument(
        "--include-warn",
        action="append",
        default=[],
        metavar="REASON[,REASON]",
        help="also index files whose scan verdict is a warning of this reason, left out by default: "
        "too_large, changed, ... (not judged) or truncated, corrupt (accepted by scan --lenient)",
    )
    p.add_argument(
        "--exclude-warn",
        action="append",
        default=[],
        metavar="REASON[,REASON]",
        help="leave out files whose scan verdict is a warning of this reason, shipped by default: "
        "cmyk, high_bit_depth, exif_rotated, grayscale, sample_rate_mismatch, ... "
        "(docs/guides/consistency.md)",
    )
    p.add_argument(
        "--loader",
        action="append",
        default=[],
        metavar="NAME",
        help="the loader profile training will use (repeatable; default pillow): files it cannot open are "
        "left out, and the index records it (IndexedDataset refuses another loader); see dsclean scan --loader",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (no progress, notes on stderr)")
    add_storage_option(p.add_argument_group("Object storage", "when ROOT is a URL: s3://BUCKET/PREFIX, gs://, az://"))
    p.set_defaults(func=cmd_index)

    p = sub.add_parser(
        "info",
        help="describe an index: rows, classes, kinds, sizes, metadata",
        description="Describe a dsclean index (Arrow file or npy folder).",
    )
    p.add_argument(
        "index", metavar="INDEX", help="an index written by dsclean index, or a shard folder written by dsclean pack"
    )
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing: exit 0 if INDEX is a readable index")
    p.set_defaults(func=cmd_info)


def cmd_index(args: argparse.Namespace) -> int:
    if args.allow_class_mismatch and not args.splits:
        raise UserError("--allow-class-mismatch goes with --splits (one index per split of a split root)")
    try:
        if args.splits:
            return _report_splits(args, _build(args))
        summary = _build(args)  # its notes are logged: dsclean.cli.main prints them (-q: errors only)
    except OSError as exc:  # a full disk while writing: the temp output is gone, an earlier index untouched
        from ..atomic import describe_write_error

        raise UserError(
            f"could not write the index: {describe_write_error(exc, exc.filename or args.output)}; "
            f"nothing was written ({args.output} is as it was)"
        ) from exc
    return _report(args, summary)


def _build(args: argparse.Namespace):
    from ..index.build import build_index  # imported here: `dsclean scan` need not load the index stage
    from ..index.options import IndexOptions
    from ..storage.urls import is_url

    url = is_url(args.root)
    if is_url(args.output or ""):
        raise UserError(
            f"{args.output}: -o must be a local file (or folder with --splits): the index is memory-mapped "
            "where it is read; write it here and copy it where you need it"
        )
    if args.storage_options and not url:
        raise UserError(f"--storage-option: only for a storage URL (s3://...), and {args.root} is local")

    options = IndexOptions(
        format=args.format,
        labels_csv=args.labels,
        no_labels=args.no_labels,
        scan_results=args.scan_results,
        exclude=tuple(args.exclude or ()),
        progress=not (args.quiet or args.json),
        check=not args.no_check,
        jobs=args.jobs,
        files=args.files,
        symlinks=args.symlinks,
        state_dir=args.state_dir,
        allow_inside_root=args.allow_inside_root,
        dedup=args.dedup,
        root_moved=args.root_moved,
        facts=args.facts,
        include_warn=tuple(args.include_warn),
        exclude_warn=tuple(args.exclude_warn),
        loaders=tuple(args.loader or ("pillow",)),
        split_names=args.split_names,
    )
    if url:
        return _build_bucket(args, options)
    if args.splits:
        from ..index.splitset import build_split_indexes

        return build_split_indexes(args.root, args.output, options, allow_class_mismatch=args.allow_class_mismatch)
    return build_index(args.root, args.output, options)


def _build_bucket(args: argparse.Namespace, options):
    """``dsclean index URL``: the good objects of a bucket prefix (:func:`dsclean.build_bucket_index`)."""
    from ..index.bucket import BucketIndexOptions, build_bucket_index
    from ..storage.urls import parse_storage_options

    bucket = BucketIndexOptions(storage_options=parse_storage_options(args.storage_options))
    if args.splits:
        from ..index.splitset import build_split_indexes

        return build_split_indexes(
            args.root, args.output, options, allow_class_mismatch=args.allow_class_mismatch, bucket=bucket
        )
    return build_bucket_index(args.root, args.output, options, bucket)


def _report_splits(args: argparse.Namespace, summaries: dict) -> int:
    """``--splits``: each split's summary (JSON: ``{split: summary}``), then the class list they share."""
    if args.json:
        print(json.dumps({split: s.to_json() for split, s in summaries.items()}, indent=2, default=str))
    elif not args.quiet:
        for split, s in summaries.items():
            print(f"[{split}] " + format_summary(s))
        first = next(iter(summaries.values()))
        print(f"{len(summaries)} split indexes in {args.output}, each with the same {first.classes} classes")
    return EXIT_OK


def _report(args: argparse.Namespace, summary: IndexSummary) -> int:
    if args.json:
        print(json.dumps(summary.to_json(), indent=2, default=str))
    elif not args.quiet:
        print(format_summary(summary))
    return EXIT_OK


def format_summary(s: IndexSummary) -> str:
    lines = [
        f"indexed {s.rows} files in {s.classes} classes ({s.labels} labels, {s.files} file rule) -> {s.output} "
        f"({s.format}, {_human(s.index_bytes)}; media {_human(s.media_bytes)})"
    ]
    checked = (
        f" (not covered by the scan: never scanned, changed, restored or not judged; {s.checked_from_cache} known to "
        "the scan cache)"
        if s.checked
        else ""
    )
    left_out = [
        ("excluded as bad by the scan", s.excluded_bad),
        ("checked here" + checked, s.checked),
        ("bad, found by that check and left out", s.checked_bad),
        ("not media (magic bytes, --no-check)", s.not_media),
        ("unreadable", s.unreadable),
        ("not a regular file (FIFO, socket, device): never opened", s.not_regular),
        ("skipped without a label", s.unlabeled),
        ("changed since the scan", s.changed_since_scan),
        ("checked again: the scan's verdict was about the moment (too_large, timeout, ...), not the file", s.rechecked),
        (
            "warnings left out: not judged, accepted by scan --lenient, or another kind than the extension (below)",
            s.warned,
        ),
        ("not in the scan results", s.unscanned),
        ("exact duplicates left out (--dedup; the first by path order kept)", s.duplicates),
    ]
    lines += [f"  {n:>10}  {what}" for what, n in left_out if n]
    if s.hashed:
        lines.append(f"  {s.hashed} files hashed for --dedup (no current content_hash in the scan results)")
    if s.checked_bad_reasons:
        lines.append("  left out by reason: " + ", ".join(f"{r} {n}" for r, n in s.checked_bad_reasons.items()))
        lines += [f"    bad: {p}" for p in s.bad_paths[:20]]
        if s.checked_bad > 20:
            lines.append(f"    ... and {s.checked_bad - 20} more (dsclean scan ROOT --quarantine DIR moves them aside)")
    if s.warned:
        from ..reasons import LEFT_OUT_WARNINGS

        for reason, n in sorted(s.warned_reasons.items()):
            if reason in s.exclude_warn:
                lines.append(f"  left out, warn/{reason} {n}: --exclude-warn {reason}")
                continue
            lines.append(
                f"  left out, warn/{reason} {n}: {LEFT_OUT_WARNINGS[reason]}; "
                f"--include-warn {reason} indexes them anyway"
            )
        lines += [f"    warn: {p}" for p in s.warned_paths[:20]]
        if s.warned > 20:
            lines.append(f"    ... and {s.warned - 20} more")
    lines.append(f"  scan results: {s.scan_results or 'none'}")
    return "\n".join(lines)


def cmd_info(args: argparse.Namespace) -> int:
    from ..data.shards import is_packed_set, packed_index, refuse_unfinished_pack
    from ..index.store import index_info

    # a shard folder written by dsclean pack (as IndexedDataset takes it): its packed index
    refuse_unfinished_pack(args.index)
    info = index_info(packed_index(args.index) if is_packed_set(args.index) else args.index)
    if args.json:
        print(json.dumps(info, indent=2))
    elif not args.quiet:
        print(format_info(info))
    return 0


def format_info(info: dict) -> str:
    meta = info["metadata"]
    lines = [
        f"index:     {info['index']} ({info['format']}, {_human(info['index_bytes'])})",
        f"rows:      {info['rows']}",
        f"media:     {_human(info['media_bytes'])}",
        "kinds:     " + ", ".join(f"{k} {n}" for k, n in info["kinds"].items()),
        f"root:      {meta.get('root')}",
        f"created:   {meta.get('created')} by dsclean {meta.get('dsclean_version')} "
        f"(format {meta.get('format_version')}, {meta.get('labels')} labels)",
        f"classes:   {len(info['classes'])}"
        + (f" (+ {info['unlabeled']} unlabeled rows)" if info["unlabeled"] else ""),
    ]
    for c in info["classes"][:_MAX_CLASSES_SHOWN]:
        lines.append(f"  {c['label']:>6}  {c['count']:>10}  {c['name']}")
    if len(info["classes"]) > _MAX_CLASSES_SHOWN:
        lines.append(f"  ... and {len(info['classes']) - _MAX_CLASSES_SHOWN} more (--json lists all)")
    return "\n".join(lines)


def _human(n: int) -> str:
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
