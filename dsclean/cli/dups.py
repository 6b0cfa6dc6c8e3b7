"""``dsclean dups``: argparse wiring and human output over :mod:`dsclean.dups`."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import argtypes
from .bucket import BUCKET_ONLY, add_bucket_arguments
from .exit_codes import EXIT_FOUND_BAD, EXIT_INCOMPLETE, EXIT_OK
from .scan import add_split_names_option

_SHOWN = 10  # groups spanning splits printed in the summary


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not -1.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be from -1 to 1")
    return value


def add_parsers(sub) -> None:
    from ..dups import DEFAULT_NEAR
    from ..quality import DEFAULT_MIN_CORRELATION

    p = sub.add_parser(
        "dups",
        help="find exact and near-duplicate files, and duplicates leaking across splits",
        description="Group exact duplicates (same bytes) and near duplicates (the same picture resized, "
        "recompressed, slightly cropped, brightened or re-encoded) over one or more roots; "
        "each root is a split (train/ val/ test/): groups that span splits are leakage and come first.",
    )
    p.add_argument(
        "roots",
        nargs="+",
        metavar="ROOT",
        help="folders to compare; each one is a split (one split root, DATA with DATA/train and DATA/val: its splits); "
        "or storage URLs, s3://BUCKET/PREFIX (docs/guides/buckets.md)",
    )
    p.add_argument(
        "--no-splits",
        action="store_true",
        help="compare a split root as one root (default: a single ROOT whose folders are all named like splits "
        "is its splits, compared for leakage)",
    )
    add_split_names_option(p)
    p.add_argument("-o", "--output", metavar="FILE", help="write the groups as JSON lines (groups.jsonl)")
    p.add_argument(
        "--near",
        type=argtypes.count,
        default=DEFAULT_NEAR,
        metavar="K",
        help=f"near duplicates: hashes at most K bits apart, then the fine check (default {DEFAULT_NEAR}; 0 = exact only)",
    )
    p.add_argument(
        "--min-similarity",
        type=_fraction,
        default=DEFAULT_MIN_CORRELATION,
        metavar="C",
        help=f"the fine check's correlation threshold for near candidates (default {DEFAULT_MIN_CORRELATION})",
    )
    p.add_argument("--no-verify", action="store_true", help="skip the fine check: the hash distance alone decides")
    p.add_argument("--check", action="store_true", help="exit 1 if any group spans two or more roots (leakage, for CI)")
    p.add_argument(
        "--quarantine",
        metavar="DIR",
        help="move the extra copies to DIR/<root name>/<path> (journaled; restore with dsclean restore DIR/<root name>); "
        "for URL roots DIR is a URL in the same bucket storage: copy, verify, delete",
    )
    p.add_argument(
        "--keep",
        choices=("first", "largest", "most-pixels"),
        default="first",
        help="with --quarantine: which copy each root keeps (default first; ties go to the first)",
    )
    p.add_argument(
        "--drop-from", metavar="SPLIT", help="with --quarantine: in groups spanning splits, move this root's copies too"
    )
    p.add_argument("--dry-run", action="store_true", help="with --quarantine: say what would move, move nothing")
    p.add_argument("--no-results", action="store_true", help="ignore scan results: compute every file's facts here")
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where the roots' last scans are recorded (default: $DSCLEAN_STATE_DIR, else the per-user state folder)",
    )
    p.add_argument(
        "--jobs", "-j", type=argtypes.count, default=0, metavar="N", help="worker processes (default: all usable cores)"
    )
    p.add_argument(
        "--timeout",
        type=argtypes.timeout,
        default=60.0,
        metavar="SECONDS",
        help="a file whose decode takes longer is left out of near search (default 60; 0 = none)",
    )
    p.add_argument(
        "--max-memory",
        type=argtypes.memory_ceiling,
        default=0,
        metavar="SIZE",
        help="memory one file's decode may add in a worker, e.g. 2G, at least 16M (default and none/0: no limit)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_bucket_arguments(p)  # --storage-option, --manifest, --read-threads, --max-in-memory, --retries
    p.set_defaults(func=cmd_dups)


def cmd_dups(args: argparse.Namespace) -> int:
    from ..dups.finder import DupsOptions, check_groups_output, find_duplicates, write_groups
    from ..dups.moves import check_quarantine, quarantine_duplicates, resolve_split
    from ..errors import UserError
    from ..storage.reads import DEFAULT_READ_THREADS, ReadPolicy
    from ..storage.urls import is_url, parse_storage_options

    if (args.drop_from or args.keep != "first" or args.dry_run) and not args.quarantine:
        raise UserError("--keep, --drop-from and --dry-run go with --quarantine DIR")
    given_bucket = [k for k, default in BUCKET_ONLY.items() if getattr(args, k, default) not in (default, None, [])]
    if given_bucket and not any(is_url(r) for r in args.roots):
        names = ", ".join(
            "--" + k.replace("_", "-").removesuffix("s" if k == "storage_options" else "") for k in given_bucket
        )
        raise UserError(f"{names}: only for a storage URL (s3://...), and {' '.join(args.roots)} is local")
    storage_options = parse_storage_options(args.storage_options)
    defaults = ReadPolicy()
    policy = ReadPolicy(
        retries=defaults.retries if args.retries is None else args.retries,
        max_in_memory=args.max_in_memory or defaults.max_in_memory,
    )
    given = list(args.roots)
    args.roots = _split_roots(args, storage_options)
    if args.drop_from:
        resolve_split(list(args.roots), args.drop_from)  # a typo fails before any work
    # The outputs are checked before the work (which takes hours at scale), not after it.
    if args.output:
        check_groups_output(args.output, list(args.roots))
    if args.quarantine:
        check_quarantine(args.quarantine, list(args.roots), dry_run=args.dry_run)
        if args.roots != given:  # nor inside the split root given (a new DATA/q would not be one of its splits)
            check_quarantine(args.quarantine, given, dry_run=True)
    options = DupsOptions(
        near=args.near,
        min_similarity=args.min_similarity,
        verify=not args.no_verify,
        jobs=args.jobs,
        timeout=args.timeout,
        max_memory=args.max_memory,
        use_results=not args.no_results,
        state_dir=args.state_dir,
        storage_options=storage_options,
        manifest=args.manifest,
        read_threads=args.read_threads or DEFAULT_READ_THREADS,
        read_policy=policy,
    )
    bar = None if args.quiet or args.json else _progress_bar()
    try:
        result = find_duplicates(
            args.roots, options, quarantine=args.quarantine, progress=bar.update if bar is not None else None
        )
    finally:
        if bar is not None:
            bar.close()
    s = result.summary
    if args.output:
        write_groups(result, args.output)
    report = None
    if args.quarantine:
        report = quarantine_duplicates(
            result, args.quarantine, args.keep, args.drop_from, dry_run=args.dry_run, state_dir=args.state_dir
        )
        s.notes += report.notes
        s.planned, s.moved, s.move_errors = report.planned, report.moved, report.errors
        s.kept_across_splits = report.left_across_splits
        if report.changed:
            s.notes.append(f"{report.changed} files changed since their facts were taken: left in place")
    if args.json:
        print(json.dumps(s.to_json(), indent=2))
    elif not args.quiet:
        print(format_summary(result, report, dry_run=args.dry_run))
    if s.move_errors:
        for e in s.move_errors:
            print(f"dsclean dups: could not move {e}", file=sys.stderr)
        return EXIT_INCOMPLETE
    if args.check and s.leaking_groups:
        return EXIT_FOUND_BAD
    return EXIT_OK


def _split_roots(args: argparse.Namespace, storage_options: dict) -> list[str]:
    """One split root (``DATA`` with ``DATA/train``, ``DATA/val``, or such a bucket prefix): its splits, so that
    leakage across them is found (said on stderr); otherwise the roots as given."""
    from ..dups.bucket import split_prefixes
    from ..splits import split_roots
    from ..storage.urls import is_url

    if args.no_splits or len(args.roots) != 1:
        roots = list(args.roots)
    elif is_url(args.roots[0]):
        roots = split_prefixes(args.roots[0], storage_options, args.split_names)
    else:
        roots = split_roots(list(args.roots), args.split_names)
    if roots != list(args.roots) and not (args.quiet or args.json):
        print(
            f"dsclean dups: {args.roots[0]} is a split root: comparing its splits "
            f"{', '.join(os.path.basename(r) for r in roots)} (groups spanning them are leakage; --no-splits "
            "compares it as one root)",
            file=sys.stderr,
        )
    return roots


def _progress_bar():
    """A tqdm bar on stderr (shown on a terminal) counting the files whose facts dups computes itself."""
    from tqdm import tqdm

    return tqdm(
        unit=" files",
        desc="facts not in scan results",
        file=sys.stderr,
        disable=None,
        mininterval=0.5,
        dynamic_ncols=True,
    )


def format_summary(result, report=None, dry_run: bool = False) -> str:
    s, inv = result.summary, result.inventory
    ns = s.near_stats
    lines = [
        f"{s.files} files ({s.images} images) in {len(s.roots)} root(s): "
        f"{s.exact_groups} exact and {s.near_groups} near-duplicate groups, "
        f"{s.duplicate_files} extra copies; {s.leaking_groups} groups span splits ({s.elapsed:.1f} s)"
    ]
    if s.near:
        lines.append(
            f"  near search (K={s.near}): {ns['searched']} pictures, {ns['candidates']} candidate pairs, "
            f"{ns['confirmed']} confirmed, {ns['rejected']} rejected by the fine check"
            + (f", {ns['unverifiable']} could not be decoded again" if ns["unverifiable"] else "")
        )
        if ns["low_information"]:
            lines.append(f"  {ns['low_information']} near-constant pictures (low_information) left out of near search")
        if ns.get("unstable"):
            lines.append(
                f"  second signal: {ns['unstable']} textures (unstable hash) searched again on anti-aliased hashes, "
                f"{ns['second_candidates']} more candidate pairs"
            )
    for root, source in zip(s.roots, s.results_sources):
        lines.append(f"  scan results of {root}: {source}")
    lines.append(
        f"  facts: {s.from_results} from scan results, {s.computed} computed here"
        + (f"; {s.excluded_bad} files the scan marked bad left out" if s.excluded_bad else "")
        + (f"; {s.undecodable} images could not be decoded (exact duplicates only)" if s.undecodable else "")
    )
    for f in s.failed[:5]:
        lines.append(f"  left out: {f}")
    if len(s.failed) > 5:
        lines.append(f"  ... and {len(s.failed) - 5} more files left out")
    for f in s.same_file[:5]:
        lines.append(f"  one file, two names: {f}")
    if len(s.same_file) > 5:
        lines.append(f"  ... and {len(s.same_file) - 5} more names of files already listed (not compared)")
    records = result.records()
    shown = 0
    for rec, g in zip(records, result.groups):
        if len(g.splits(inv)) < 2 or shown >= _SHOWN:
            break
        shown += 1
        members = ", ".join(os.path.join(m["root"], m["path"]) for m in rec["members"][:4])
        more = f" (+{len(rec['members']) - 4})" if len(rec["members"]) > 4 else ""
        lines.append(f"  leak {rec['kind']}: {members}{more}")
    if s.leaking_groups > shown:
        lines.append(
            f"  ... {s.leaking_groups - shown} more groups span splits" + ("" if s.output else " (-o FILE lists all)")
        )
    if s.output:
        lines.append(f"  groups: {s.output}")
    if report is not None:
        verb = "would move" if dry_run else "moved"
        count = report.planned if dry_run else report.moved
        lines.append(f"  {verb} {count} extra copies to " + ", ".join(sorted(set(report.destinations.values()))))
        if report.left_across_splits:
            lines.append(
                f"  {report.left_across_splits} copies in other splits left in place (--drop-from SPLIT moves them)"
            )
    for note in s.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
