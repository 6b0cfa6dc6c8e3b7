"""``dsclean scan``, ``restore``, ``recover``, ``status``, ``merge`` and ``reasons``: argparse wiring and output.

:func:`add_parsers` registers the commands; each handler calls the scanning API
(:mod:`dsclean.scanning`), prints, and returns an exit code (:mod:`dsclean.cli.exit_codes`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from .. import argtypes
from .. import reasons as R
from ..errors import UserError
from .bucket import add_storage_option
from .exit_codes import EXIT_FOUND_BAD, EXIT_INCOMPLETE, EXIT_OK
from .parser import add_output_options, add_shard_set_options, print_json
from .scanend import scan_exit


def add_parsers(sub: argparse._SubParsersAction) -> None:
    add_scan_parser(sub)
    add_restore_parser(sub)
    add_status_parser(sub)
    add_merge_parser(sub)
    add_reasons_parser(sub)


def add_location_options(p: argparse._ActionsContainer) -> None:
    """``--state-dir`` and ``--allow-inside-root``, shared by the commands that work on a root."""
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where dsclean keeps what it knows about each root (default: $DSCLEAN_STATE_DIR, "
        "else $XDG_CACHE_HOME/dsclean); a shared path lets job arrays and teammates find results",
    )
    p.add_argument(
        "--allow-inside-root",
        action="store_true",
        help="accept an output folder inside ROOT (ImageFolder would see it as a class)",
    )


def split_names_arg(text: str) -> tuple[str, ...]:
    """``--split-names train,val,holdout`` (argparse type; :func:`dsclean.splits.parse_split_names`)."""
    from ..errors import UserError
    from ..splits import parse_split_names

    try:
        return parse_split_names(text)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_split_names_option(p: argparse._ActionsContainer) -> None:
    """``--split-names``, shared by the commands that tell a split root (``DATA/train``, ``DATA/val``) apart."""
    from ..splits import SPLIT_NAMES

    p.add_argument(
        "--split-names",
        type=split_names_arg,
        default=SPLIT_NAMES,
        metavar="NAME[,NAME]",
        help=f"what split folders are called (default {','.join(SPLIT_NAMES)}): a root whose folders all have "
        "such names is a split root (docs/guides/splits.md)",
    )


def add_symlink_options(p: argparse._ActionsContainer) -> None:
    """``--symlinks none|inside|all`` and its older spelling ``--follow-symlinks`` (= inside)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--symlinks",
        choices=("none", "inside", "all"),
        help="symlinks to follow: none (default), inside (targets inside ROOT), all (e.g. a symlink farm); "
        "a loop is detected and skipped",
    )
    g.add_argument(
        "--follow-symlinks", action="store_const", const="inside", dest="symlinks", help="the same as --symlinks inside"
    )


def add_scan_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scan", help="check every image/audio file under ROOT; quarantine the broken ones")
    add_scan_arguments(p)
    p.set_defaults(func=cmd_scan)


def add_scan_arguments(p: argparse.ArgumentParser) -> None:
    """Every argument and option of ``dsclean scan``, in groups by what they are for (``--help``, the reference page)."""
    from ..scanning.check import DEFAULT_MAX_FRAMES, DEFAULT_MAX_PIXELS, DEFAULT_TIMEOUT

    p.add_argument(
        "root",
        metavar="ROOT",
        nargs="+",
        help="folder to scan; or a storage URL (s3://BUCKET/PREFIX, docs/guides/buckets.md); or a shard set written "
        "by another tool: a folder of WebDataset tars, MDS or litdata shards (index.json) or Parquet files, shard "
        "paths, a brace pattern (shards-{000..009}.tar)",
    )
    q = p.add_argument_group("Quarantine", "what happens to the bad files")
    q.add_argument("--quarantine", metavar="DIR", help="move bad files to DIR/<path relative to ROOT> (journaled)")
    q.add_argument("--dry-run", action="store_true", help="decide and report, move nothing")
    sel = p.add_argument_group("Selection", "which files under ROOT are checked")
    sel.add_argument(
        "--shard",
        type=argtypes.shard,
        metavar="I/N",
        help="check only part I of N (0 <= I < N; a stable hash of each path; a shard set's whole shards by "
        "name), for job arrays; combine the parts' results with dsclean merge",
    )
    sel.add_argument(
        "--rescan", action="store_true", help="check every file again, ignoring the scan cache of unchanged files"
    )
    sel.add_argument(
        "--from-log",
        dest="from_logs",
        nargs="+",
        default=[],
        metavar="LOG",
        help="training failure logs (dsclean.guard's): the files they name under ROOT are checked again "
        "even if unchanged (what quarantine --from-log recorded is always checked again)",
    )
    sel.add_argument("--include-hidden", action="store_true", help="also scan dot-named files and folders")
    add_symlink_options(sel)
    c = p.add_argument_group("Checking", "how each file is judged")
    c.add_argument(
        "--timeout",
        type=argtypes.timeout,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"a file whose check takes longer is bad/timeout; its worker is replaced (default {DEFAULT_TIMEOUT:g}; 0 = none)",
    )
    c.add_argument(
        "--max-memory",
        type=argtypes.memory_ceiling,
        default=0,
        metavar="SIZE",
        help="memory a single check may use, e.g. 2G or 512M; past it the file is bad/too_large "
        "(default: a share of RAM per core, past which the file is only warn/too_large; none = no ceiling)",
    )
    c.add_argument(
        "--max-pixels",
        type=argtypes.count,
        default=DEFAULT_MAX_PIXELS,
        metavar="N",
        help=f"images with more pixels are decompression bombs (default {DEFAULT_MAX_PIXELS:,}, Pillow's; 0 = no limit)",
    )
    c.add_argument(
        "--max-frames",
        type=argtypes.count,
        default=DEFAULT_MAX_FRAMES,
        metavar="N",
        help=f"decode at most N frames of an animated image (default {DEFAULT_MAX_FRAMES})",
    )
    c.add_argument(
        "--lenient",
        action="store_true",
        help="recoverable decoder warnings (e.g. 'Corrupt JPEG data') are warn, not bad",
    )
    c.add_argument(
        "--flac-md5",
        action="store_true",
        help="also check each FLAC's STREAMINFO MD5 against its decoded samples: catches whole frames in the "
        "wrong order or from another file, which every frame CRC passes (costs ~20%% of a FLAC check)",
    )
    add_loader_option(c)
    c.add_argument(
        "--exif",
        choices=("ignore", "apply"),
        default="ignore",
        help="ignore (default, torchvision's loader): images load as stored; apply: the index's default "
        "loader turns each image as its EXIF orientation says (ImageOps.exif_transpose)",
    )
    e = p.add_argument_group("Expectations", "what the files should be, and the norm of their folder")
    e.add_argument(
        "--expect",
        metavar="KEY=VALUE,...",
        default="",
        help="what every file should be: mode=RGB,min-side=224,max-aspect=4,sample-rate=16000,channels=1,"
        "min-duration=1.0 (every key optional); files outside it are warn (mode_mismatch, too_small, "
        "...; docs/guides/consistency.md)",
    )
    e.add_argument(
        "--strict-expect",
        action="store_true",
        help="files outside --expect are bad (quarantined like any bad file), not warn",
    )
    e.add_argument(
        "--minority",
        type=_share,
        default=0.01,
        metavar="SHARE",
        help="without --expect: warn about files whose mode, sample rate or channel count is under this "
        "share of their class folder (default 0.01 = 1%%; 0 turns the inferred norm off)",
    )
    # -- shard sets written by other tools (dsclean.shardsets) --
    add_shard_set_options(p.add_argument_group("Shard sets", "another tool's shards: how they are read"), scan=True)
    # --
    add_facts_options(
        p.add_argument_group("Facts and quality flags", "what is recorded of each file besides its verdict")
    )
    out = p.add_argument_group("Results and output", "where the results go, what is printed, the exit code")
    add_split_names_option(out)
    out.add_argument(
        "--report",
        metavar="DIR",
        help="where to write results (default: the quarantine folder, else the root's state folder; never inside ROOT)",
    )
    add_location_options(out)
    out.add_argument(
        "--html",
        metavar="FILE",
        help="also write a self-contained HTML report of the scan to FILE (see dsclean report)",
    )
    out.add_argument("--json", action="store_true", help="print the summary as JSON")
    out.add_argument("--quiet", "-q", action="store_true", help="no progress bar, no summary (errors still print)")
    out.add_argument("--check", action="store_true", help="exit 1 if any bad file is found (for CI)")
    perf = p.add_argument_group("Performance", "where and on how many workers the checks run")
    perf.add_argument(
        "--jobs", "-j", type=argtypes.count, default=0, metavar="N", help="worker processes (default: all usable cores)"
    )
    perf.add_argument(
        "--backend",
        choices=("processes", "loky", "threads", "dask"),
        default="processes",
        help="processes: worker processes here, with crash/timeout/memory isolation (default); "
        "loky: the same isolation in joblib's pool; threads: in-process; "
        "dask: a Dask distributed cluster (see --scheduler)",
    )
    perf.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --backend dask: the scheduler's tcp://HOST:PORT, or a scheduler file",
    )
    from .bucket import add_bucket_arguments  # object storage (ROOT a URL): dsclean.storage

    add_bucket_arguments(p)


#: flag threshold option -> (FlagOptions field, type, what it means)
FLAG_OPTIONS = {
    "--flag-dark": ("dark", float, "image: mean luma (0..1) below this is dark"),
    "--flag-bright": ("bright", float, "image: mean luma (0..1) above this is bright"),
    "--flag-min-contrast": ("min_contrast", float, "image: luma std (0..1) below this is low_information"),
    "--flag-blurry": ("blurry", float, "image: Laplacian variance below this times the luma variance is blurry"),
    "--flag-tiny": ("tiny", int, "image: shorter side (pixels) below this is tiny"),
    "--flag-odd-aspect": ("odd_aspect", float, "image: longer side more than this times the shorter is odd_aspect"),
    "--flag-silence": ("silence", float, "audio: RMS (0..1) below this is silent"),
    "--flag-clipped": ("clipped", float, "audio: clipped-sample fraction above this is clipped"),
    "--flag-dc-offset": ("dc_offset", float, "audio: |mean sample| above this on a channel is dc_offset"),
    "--flag-too-short": ("too_short", float, "audio: seconds below this is too_short"),
}


def _non_negative(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
        return value

    return parse


def add_loader_option(p: argparse._ActionsContainer) -> None:
    """``--loader NAME`` (repeatable, comma-separated too): the loader profiles training will use."""
    p.add_argument(
        "--loader",
        action="append",
        default=[],
        metavar="NAME",
        help="also open each whole file exactly as this training loader does; it fails: warn/loader_fails, "
        "it decodes otherwise than the reference: warn/loader_differs (repeatable): pillow (default, "
        "what the check judges), torchvision, torchvision-exif, opencv, soundfile, torchaudio, pyav",
    )


def loader_profiles(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``--loader`` names, known and importable (a missing library: UserError naming the extra, exit 2)."""
    from ..loaders.profiles import normalize, require

    names = normalize(args.loader or ["pillow"])
    require(names)
    return names


def check_loaders_of(names: tuple[str, ...]) -> tuple[str, ...]:
    """The profiles the check must run itself: the reference ones (pillow, soundfile) are the check's own judgement."""
    from ..loaders.profiles import PROFILES

    return tuple(n for n in names if not PROFILES[n].reference)


def add_facts_options(p: argparse._ActionsContainer) -> None:
    """``--facts``, ``--quarantine-flags`` and one ``--flag-*`` threshold per quality flag."""
    from ..quality.flags import FLAGS, FlagOptions

    p.add_argument(
        "--facts",
        choices=("all", "none"),
        default="all",
        help="all: record the facts (content hash, perceptual hash, brightness, audio levels, ...) and "
        "quality flags from the check's own read and decode (default); none: verdicts only, every "
        "fact column null, content_hash included (dups, pack and index --dedup then hash the "
        "files themselves; report shows no duplicates)",
    )
    p.add_argument(
        "--quarantine-flags",
        type=argtypes.comma_list,
        default=(),
        metavar="FLAG,...",
        help="also quarantine whole files carrying any of these quality flags (comma-separated; "
        f"reason flagged): {', '.join(FLAGS)}",
    )
    defaults = FlagOptions()
    for option, (field, kind, meaning) in FLAG_OPTIONS.items():
        p.add_argument(
            option,
            type=_non_negative(kind),
            default=getattr(defaults, field),
            metavar="X",
            dest=f"flag_{field}",
            help=f"{meaning} (default {getattr(defaults, field):g})",
        )


def flag_options(args: argparse.Namespace):
    """The FlagOptions of the ``--flag-*`` options."""
    from ..quality.flags import FlagOptions

    return FlagOptions(**{field: getattr(args, f"flag_{field}") for field, _, _ in FLAG_OPTIONS.values()})


def _share(text: str) -> float:
    """A share between 0 and 1 (``--minority``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r} (e.g. 0.01 for 1%)") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a share from 0 (off) to below 1, e.g. 0.01 for 1%")
    return value


def _expect(args: argparse.Namespace) -> str:
    """``--expect`` in its canonical spelling (a UserError for an unknown key or a bad value)."""
    if args.strict_expect and not args.expect:
        raise UserError("--strict-expect needs --expect KEY=VALUE,... (what the files must be)")
    if not args.expect:
        return ""  # nothing expected (what canonical_expect says of it, without loading the traits' code here)
    from ..scanning.traits import canonical_expect

    return canonical_expect(args.expect)


def check_options(args: argparse.Namespace):
    """The CheckOptions of ``dsclean scan``'s checking options (a folder's, a bucket's or a shard set's scan)."""
    from ..scanning.check import CheckOptions

    return CheckOptions(
        lenient=args.lenient,
        max_pixels=args.max_pixels,
        max_frames=max(1, args.max_frames),
        timeout=args.timeout,
        max_memory=args.max_memory,
        facts=args.facts == "all",
        flac_md5=args.flac_md5,
        expect=_expect(args),
        strict_expect=args.strict_expect,
        exif=args.exif,
        # no --loader: the default profile (pillow) is the check's own judgement, nothing more to run or load
        loaders=check_loaders_of(loader_profiles(args)) if args.loader else (),
    )


def _names_shard_set(args: argparse.Namespace) -> bool:
    """True when ``dsclean scan``'s ROOT arguments name a shard set; else ``args.root`` becomes the one folder.

    Imports no other ``dsclean.cli`` module (a scan of files builds and imports only its own parser).
    """
    from ..shardsets.detect import detect

    specs = list(args.root)
    if detect(specs, args.as_kind) is not None:
        return True
    if len(specs) > 1:
        raise UserError(f"{specs[1]}: give one folder to scan files (several paths are a shard set's shards)")
    if args.column or args.denylist is not None:
        raise UserError(f"{specs[0]}: --column and --denylist are for shard sets; this is a folder of files")
    args.root = specs[0]
    return False


def _any_url(roots: list[str]) -> bool:
    from ..storage.urls import is_url  # only for a root that looks like one: a folder's scan never loads it

    return any(is_url(r) for r in roots)


def cmd_scan(args: argparse.Namespace) -> int:
    # the workers' forkserver, when the scan needs one, was started by dsclean.cli.main (parse_early)
    from ..scanning.scanner import ScanOptions, format_summary, scan
    from .bucket import cmd_scan_bucket, refuse_bucket_options

    if any("://" in r for r in args.root) and _any_url(args.root):  # object storage: dsclean.storage
        from ..shardsets.detect import detect
        from ..storage.urls import parse_storage_options

        manifest = getattr(args, "manifest", None)  # the objects a manifest lists: a bucket scan, no listing
        if not manifest and detect(list(args.root), args.as_kind, parse_storage_options(args.storage_options)):
            from .shardsets import route_scan  # a shard set in a bucket: its samples checked, read from the store

            return route_scan(args, check_options, flag_options)
        if len(args.root) > 1 or args.as_kind not in (None, "files") or args.column:
            raise UserError(
                f"{args.root[0]}: a prefix of media objects is scanned one prefix at a time (several URLs, --as "
                "and --column are for shard sets: tars, an MDS or litdata index.json, Parquet files)"
            )
        args.root = args.root[0]
        return cmd_scan_bucket(args, check_options(args), _write_html, flag_options(args))
    refuse_bucket_options(args)
    # -- shard sets written by other tools (dsclean.shardsets); else args.root becomes the one folder --
    if _names_shard_set(args):
        from .shardsets import route_scan

        return route_scan(args, check_options, flag_options)
    # --
    if args.html:
        from ..report.source import check_output

        check_output(args.html, args.root)  # refuse a report inside the dataset before anything changes
    options = ScanOptions(
        jobs=args.jobs,
        check=check_options(args),
        minority=args.minority,
        flags=flag_options(args),
        quarantine_flags=tuple(args.quarantine_flags),
        backend=args.backend,
        scheduler=args.scheduler,
        shard=args.shard,
        rescan=args.rescan,
        from_logs=tuple(args.from_logs),
        split_names=args.split_names,
        quarantine=args.quarantine,
        report_dir=args.report,
        dry_run=args.dry_run,
        include_hidden=args.include_hidden,
        symlinks=args.symlinks,
        state_dir=args.state_dir,
        allow_inside_root=args.allow_inside_root,
        progress=False if (args.quiet or args.json) else None,
        command=("dsclean", *getattr(args, "argv", ())),
        keep_workers=False,  # one scan per command: the workers end while the results are written
    )
    summary = scan(args.root, options)
    if args.backend == "processes":  # one scan per command: stop its workers now, not at exit (see cli.exit_now)
        from ..scanning.executors import stop_local_workers

        stop_local_workers()
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    elif not args.quiet:
        print(format_summary(summary))
    for msg in summary.move_errors[:20] if args.quiet else ():
        print(f"dsclean: {msg}", file=sys.stderr)
    if args.html:
        _write_html(args, summary)
    return scan_exit(args, summary)


class _NotNow(Exception):
    """The early parse met help or a usage error: the real parser prints it, and no worker starts."""


class _QuietParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _NotNow(message)

    def exit(self, status: int = 0, message: str | None = None):
        raise _NotNow(message)

    def print_help(self, file=None) -> None:
        raise _NotNow("help")


def parse_early(argv: list[str]) -> argparse.Namespace | None:
    """``dsclean scan ARGV`` parsed alone, its workers' forkserver started now if the scan will need one.

    What :func:`dsclean.cli.main` does first for a scan: the forkserver's imports then run beside this
    process's (importing the scan), on two cores at once instead of one after the other, and the other
    commands' parsers are never built (docs/benchmarks-history.md "The scan pipeline"). The options are the real ``scan``
    parser's; help or a usage error returns None and starts nothing (the full parser then prints it).
    """
    parser = _QuietParser(prog="dsclean scan")
    add_scan_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except _NotNow:
        return None
    args.command, args.func = "scan", cmd_scan  # as the full parser's `scan` sub-command sets them
    _start_workers_early(args)
    return args


def _start_workers_early(args: argparse.Namespace) -> None:
    """A scan that will check files starts its workers' forkserver before this process imports the scan.

    This process imports numpy and pyarrow first (both need them; the fork inherits them), then the forkserver
    imports the checkers' decoders (Pillow, simplejpeg, ...) while this process imports the rest of the scan
    (the results, the cache), and a thread of this process has the pool's first worker started meanwhile
    (:func:`~dsclean.scanning.executors.prestart_local_worker`): on two cores they overlap (BENCHMARKS.md, issue
    29). Only for a first scan or
    ``--rescan``: a re-scan of a tree with earlier results may check nothing, and then starts
    no process at all (the scan starts the workers itself when a file needs checking).
    """
    roots = args.root if isinstance(args.root, list) else [args.root]
    if args.backend != "processes" or len(roots) != 1 or not os.path.isdir(roots[0]):
        return  # no workers to start, or a root the scan will refuse at once (without waiting for a forkserver)
    root = roots[0]
    if not args.rescan:
        from ..locations import LAST_SCAN_FILE, root_state_dir

        if os.path.exists(os.path.join(root_state_dir(root, args.state_dir), LAST_SCAN_FILE)):
            return
    from ..scanning.cores import usable_cores
    from ..scanning.discover import peek_formats
    from ..scanning.executors import prestart_local_worker, start_local_workers

    # numpy and pyarrow first, in this process: the scan imports them anyway, and the forkserver (a fork) then
    # inherits them rather than importing them again (~0.15 CPU-s of every scan's start). Only while the process stays
    # single-threaded: one BLAS thread, and pyarrow's allocator without its background thread (cli.main's defaults).
    from . import ARROW_MALLOC_ENV, NO_ALLOCATOR_THREAD, pandas_refused

    if os.environ.get("OPENBLAS_NUM_THREADS") == "1":
        import numpy  # noqa: F401

        if os.environ.get(ARROW_MALLOC_ENV) == NO_ALLOCATOR_THREAD:
            from ..scanning import schema  # pyarrow: the workers' Arrow batches, the results

            if pandas_refused():  # else the first conversion would import pandas (~0.35 s) into every process
                schema.warm_conversions()

    # preload the checkers of the formats the tree seems to hold; the forkserver and the resource tracker are
    # forks of this process, still small and single-threaded here (no fresh interpreters to start)
    formats = peek_formats(root)
    if formats is None:  # no media file among the first entries: another tool's shards? (then their members')
        from ..shardsets.tartasks import expected_formats

        formats = expected_formats(root, args.as_kind)
    start_local_workers(formats, getattr(args, "facts", "all") == "all", fork_here=True)
    prestart_local_worker(args.jobs or usable_cores())  # the pool the scan takes: --jobs 0 counts as it does


def _write_html(args: argparse.Namespace, summary, storage_options: dict | None = None) -> None:
    """``--html FILE``: the report of the scan just done (``storage_options``: a bucket scan's, to read its
    objects for the thumbnails)."""
    from ..report.build import ReportOptions, write_report
    from ..storage.urls import redact_argv
    from .report import format_report_summary

    command = tuple(redact_argv(["dsclean", *getattr(args, "argv", ())]))
    options = ReportOptions(jobs=args.jobs, command=command)
    if storage_options is not None:
        options = dataclasses.replace(options, state_dir=args.state_dir, storage_options=storage_options)
    report = write_report(summary.results_path, args.html, options)
    if not (args.quiet or args.json):
        print(format_report_summary(report))


def add_restore_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("restore", help="move quarantined files back to where they came from")
    p.add_argument(
        "quarantine", metavar="DIR", help="a quarantine folder written by dsclean scan, or its URL (s3://...)"
    )
    p.add_argument(
        "--root",
        metavar="NEW",
        help="the dataset's new location, when it moved since the scan (default: the recorded root; "
        "refused if it no longer exists)",
    )
    p.add_argument("--state-dir", metavar="DIR", help="state folder base, to update the last scan's records")
    add_storage_option(p)
    add_output_options(p, quiet="print nothing but refusals and failures")
    p.set_defaults(func=cmd_restore)
    p = sub.add_parser("recover", help="finish or revert moves left half-done by a killed scan (scan does this too)")
    p.add_argument("quarantine", metavar="DIR", help="a quarantine folder written by dsclean scan, or its URL")
    p.add_argument("--state-dir", metavar="DIR", help="state folder base holding a bucket quarantine's journal")
    add_storage_option(p)
    add_output_options(p, quiet="print nothing but refusals and failures")
    p.set_defaults(func=cmd_recover)


def _print_report(report, verb: str, args: argparse.Namespace) -> int:
    failed = f", {len(report.failed)} FAILED" if report.failed else ""
    if getattr(args, "json", False):
        print_json(dataclasses.asdict(report))
    elif not getattr(args, "quiet", False):
        print(
            f"{verb}: {report.restored} restored, {report.completed} half-done moves completed, "
            f"{report.reverted} reverted{failed}"
        )
    for msg in report.failed:
        print(f"failed: {msg}", file=sys.stderr)
    for msg in report.refused:
        print(f"refused: {msg}", file=sys.stderr)
    for msg in report.bad_lines:
        print(f"skipped unreadable manifest line: {msg}", file=sys.stderr)
    if report.failed:
        return EXIT_INCOMPLETE
    return EXIT_FOUND_BAD if report.refused else EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    from ..scanning.quarantine.restore import restore
    from ..storage.urls import is_url

    if is_url(args.quarantine):
        from .bucket import bucket_report

        return _print_report(bucket_report(args, "restore"), "restore", args)

    return _print_report(restore(args.quarantine, args.root, args.state_dir), "restore", args)


def cmd_recover(args: argparse.Namespace) -> int:
    from ..scanning.quarantine.recovery import recover
    from ..storage.urls import is_url

    if is_url(args.quarantine):
        from .bucket import bucket_report

        return _print_report(bucket_report(args, "recover"), "recover", args)

    return _print_report(recover(args.quarantine), "recover", args)


def add_status_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status", help="what a quarantine holds (moved, restored, failed, by reason), or a root's last scan"
    )
    p.add_argument(
        "path", metavar="DIR|ROOT", help="a quarantine folder (or a bucket quarantine's URL), or a dataset root"
    )
    add_output_options(p, quiet="print nothing (the exit code still says it ran)", json_help="print the status as JSON")
    p.add_argument("--state-dir", metavar="DIR", help="state folder base to look in for a root's last scan")
    p.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    from ..scanning.quarantine.status import format_status, status
    from ..storage.urls import is_url

    if is_url(args.path):  # a bucket quarantine (dsclean.storage): its journal is local
        from ..storage.quarantine import status as bucket_status

        st = bucket_status(args.path, args.state_dir)
    else:
        st = status(args.path, args.state_dir)
    if args.json:
        print(json.dumps(st.to_json(), indent=2))
    elif not args.quiet:
        print(format_status(st))
    return EXIT_OK


def add_merge_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="combine the results of a job array's parts (scan --shard I/N) into one")
    p.add_argument("results", metavar="RESULTS", nargs="+", help="every part's scan_results.part-*.parquet")
    p.add_argument(
        "-o", "--output", metavar="DIR", help="where to write the merged results (default: the first part's folder)"
    )
    p.add_argument("--state-dir", metavar="DIR", help="state folder base where the merged results are recorded")
    add_output_options(p, json_help="print the summary as JSON")
    p.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    from ..scanning.merge import check_parts
    from ..storage.parts import merge_parts  # a folder's parts, or a bucket scan's (recorded for its prefix)

    if check_parts(args.results)[2].get("shard_set"):  # another tool's shards (scan SHARDS --shard I/N)
        from ..shardsets.parts import merge_shard_parts

        s = merge_shard_parts(args.results, args.output, args.state_dir)
    else:
        s = merge_parts(args.results, args.output, args.state_dir)
    if args.json:
        print_json(dataclasses.asdict(s))
    elif not args.quiet:
        print(f"merged {s.parts} parts of {s.root}: {s.rows:,} files, {s.bad:,} bad")
        print(f"Results: {s.results_path}\nProblems (bad and warn): {s.problems_path}")
    for note in s.notes if not args.quiet else ():
        print(f"note: {note}", file=sys.stderr)
    return EXIT_OK


def add_reasons_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reasons", help="list the reason codes a verdict can carry")
    add_output_options(p, quiet="print nothing", json_help="print the codes and their meanings as a JSON object")
    p.set_defaults(func=cmd_reasons)


def cmd_reasons(args: argparse.Namespace) -> int:
    if args.json:
        print_json(dict(R.REASONS))
    elif not args.quiet:
        print("\n".join(f"{k:<20} {v}" for k, v in R.REASONS.items()))
    return EXIT_OK
