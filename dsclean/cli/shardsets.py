"""``dsclean scan SHARDS`` / ``dsclean verify SHARDS`` for shard sets written by other tools: routing and output.

Their options (``--as``, ``--column``, ``--denylist``) are :func:`dsclean.cli.parser.add_shard_set_options`;
:func:`route_scan` and :func:`route_verify` send a shard set to :mod:`dsclean.shardsets` (None: not a
shard set, the command goes on as before).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import locations
from ..errors import UserError
from .exit_codes import EXIT_FOUND_BAD, EXIT_OK


def _options(args: argparse.Namespace, check):
    from ..shardsets.run import ShardScanOptions
    from ..storage.urls import redact_argv

    return ShardScanOptions(
        check=check,
        jobs=getattr(args, "jobs", 0) or 0,
        backend=getattr(args, "backend", None) or "processes",
        scheduler=getattr(args, "scheduler", None),  # --backend dask: each worker reads its shards from the store
        as_kind=args.as_kind,
        column=args.column,
        denylist=args.denylist or None,  # scan's bare --denylist: the default beside the shards
        report_dir=getattr(args, "report", None),
        state_dir=getattr(args, "state_dir", None),
        dry_run=getattr(args, "dry_run", False),
        storage_options=_storage_options(args),
        command=tuple(redact_argv(["dsclean", *getattr(args, "argv", ())])),
    )


def _storage_options(args: argparse.Namespace) -> dict:
    from ..storage.urls import parse_storage_options

    return parse_storage_options(getattr(args, "storage_options", None) or [])


def route_scan(args: argparse.Namespace, check_options, flag_options) -> int:
    """Scan the shard set ``args.root`` names; the exit code (``check_options``, ``flag_options``: cli.scan's,
    passed in: this module does not import it back)."""
    specs = list(args.root)
    for option, given in (
        ("--quarantine", args.quarantine),
        ("--from-log", args.from_logs),
        ("--manifest", getattr(args, "manifest", None)),
    ):
        if given:
            raise UserError(
                f"{option} is for folders of files; a shard set's bad samples go to its deny-list (--denylist)"
            )
    from ..shardsets.run import scan_shard_set

    if args.html:
        from ..report.source import check_output
        from ..shardsets.detect import detect

        shard_set = detect(specs, args.as_kind, _storage_options(args))
        local = shard_set is not None and shard_set.store is None
        check_output(args.html, shard_set.folder if local else None)  # a local file, never among the shards
    options = _options(args, check_options(args))
    options.flags = flag_options(args)
    options.part = args.shard  # --shard I/N: whole shards by their name's hash; `dsclean merge` combines the parts
    summary = scan_shard_set(specs, options)
    if args.backend == "processes":
        from ..scanning.executors import stop_local_workers

        stop_local_workers()
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    elif not args.quiet:
        print(format_scan(summary))
    if args.html:
        from ..report.build import ReportOptions, write_report
        from ..storage.urls import redact_argv
        from .report import format_report_summary

        command = tuple(redact_argv(["dsclean", *getattr(args, "argv", ())]))
        report_options = ReportOptions(jobs=args.jobs, command=command, storage_options=_storage_options(args))
        report = write_report(summary.results_path, args.html, report_options)
        if not (args.quiet or args.json):
            print(format_report_summary(report))
    if summary.signal:
        print("dsclean scan: interrupted; results so far were saved", file=sys.stderr)
        return 128 + summary.signal
    return EXIT_FOUND_BAD if args.check and not summary.ok else EXIT_OK


def _lines(summary) -> list[str]:
    out = []
    for p in summary.listed:
        where = p["member"] or (f"row {p['row']}" if p["row"] is not None else p["key"]) or ""
        out.append(f"  {p['shard']}{': ' + where if where else ''}: {p['reason']}: {p['detail']}")
    return out


def format_scan(s) -> str:
    c = s.counts
    lines = [
        f"{s.kind} shard set {s.folder}: {s.shards} shards, {s.samples:,} samples, {s.checked:,} media checked: "
        f"{c.get('ok', 0):,} ok, {c.get('warn', 0):,} warn, {c.get('bad', 0):,} bad ({s.elapsed:.1f} s)"
    ]
    if s.flags:
        lines.append("  quality flags: " + ", ".join(f"{k} {v}" for k, v in sorted(s.flags.items())))
    if s.problems:
        lines.append("  structure problems: " + ", ".join(f"{k} {v}" for k, v in sorted(s.problems.items())))
    lines += _lines(s)
    if s.denied_added or s.denied_already:
        lines.append(
            f"Deny-list: {s.denylist_path}: {s.denied_added} samples added"
            + (f", {s.denied_already} already there" if s.denied_already else "")
        )
    if s.results_path:
        lines.append(f"Results: {s.results_path}\nProblems (bad, warn, structure): {s.problems_path}")
    return "\n".join(lines)


def is_dsclean_pack(specs: list[str]) -> bool:
    """One folder written by ``dsclean pack``: its packed index or shard list is there, or its ``pack.json`` (an
    unfinished pack, which verify names as such instead of reading its tars as another tool's)."""
    if len(specs) != 1 or not os.path.isdir(specs[0]):
        return False
    names = (locations.PACKED_INDEX_FILE, locations.SHARD_LIST_FILE, locations.PACK_STATE_FILE)
    return any(os.path.lexists(os.path.join(specs[0], n)) for n in names)


def is_dsclean_pack_url(specs: list[str], options: dict) -> bool:
    """One storage URL whose prefix holds a ``pack.json``: a pack written by ``dsclean pack`` to a bucket."""
    from ..storage.urls import is_url

    if len(specs) != 1 or not is_url(specs[0]):
        return False
    from ..storage.fs import Store
    from ..storage.reads import ReadPolicy, classify, retried

    store = Store(specs[0].rstrip("/"), options)
    try:
        return bool(retried(lambda: store.fs.exists(store.path(locations.PACK_STATE_FILE)), specs[0], ReadPolicy()))
    except Exception as exc:
        raise UserError(f"{store.url}: {classify(store.url, exc).detail}") from None


def route_verify(args: argparse.Namespace) -> int | None:
    """Verify a shard set written by another tool (an exit code), or None: a dsclean pack, verified as before."""
    specs = list(args.folder)
    if args.as_kind is None and is_dsclean_pack_url(specs, _storage_options(args)):
        args.folder = specs[0]
        return None  # a dsclean pack in a bucket (pack.json): the pack verifier's
    if args.as_kind is None and is_dsclean_pack(specs) and not (args.column or args.denylist):
        args.folder = specs[0]
        return None
    if args.as_kind == "files":
        raise UserError("verify --as files: verify checks shard sets; scan checks a folder of files")
    from ..scanning.check import CheckOptions
    from ..shardsets.run import verify_shard_set

    summary = verify_shard_set(specs, _options(args, CheckOptions(facts=False)))
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    elif not args.quiet:
        print(format_verify(summary))
    if summary.signal:
        return 128 + summary.signal
    return EXIT_OK if summary.ok else EXIT_FOUND_BAD


def format_verify(s) -> str:
    bad = sum(1 for e in s.per_shard.values() if e["problems"] or e["more_problems"])
    lines = [
        f"{'ok' if s.ok else 'PROBLEMS'}: {s.kind} shard set {s.folder}: {s.shards - bad} of {s.shards} shards "
        f"pass, {s.samples:,} samples, {s.checked:,} media checked ({s.counts.get('bad', 0):,} bad)"
    ]
    lines += _lines(s)
    d = s.denylist_report
    if d:
        lines.append(
            f"  deny-list {d['path']}: {d['samples']} samples denied ({s.denied_bad} bad samples of this run among them)"
        )
        lines += [f"  deny-list entry not in this shard set: {e['shard']} key {e['key']}" for e in d["not_in_set"]]
    return "\n".join(lines)


def route_pack(args: argparse.Namespace, shard_sink=None) -> int:
    """``dsclean pack --from SHARDS -o OUT``: a clean copy of another tool's tars; the exit code. ``shard_sink``:
    to a bucket, each finished shard uploaded as it is written (``OUT`` is then the local staging folder)."""
    if args.index is not None and args.from_shards:
        raise UserError(f"{args.index}: give INDEX or --from SHARDS, not both")
    if not args.from_shards:
        raise UserError("dsclean pack: give the INDEX to pack, or --from SHARDS (another tool's WebDataset tars)")
    for option, given in (
        ("--shard-size", args.shard_size),
        ("--samples-per-shard", args.samples_per_shard),
        ("--shuffle", args.shuffle is not None),
        ("--name", args.name),
        ("--part", args.part),
        ("--finish", args.finish),
        ("--skip-changed", args.skip_changed),
        ("--rehash", args.rehash),
    ):
        if given:
            raise UserError(f"{option} is for packing an index; --from copies each shard as it is, without the denied")
    from ..shardsets.repack import repack_shard_set

    s = repack_shard_set(
        list(args.from_shards), args.output, args.denylist, None, _storage_options(args), shard_sink=shard_sink
    )
    if args.json:
        print(json.dumps(s.to_json(), indent=2))
    elif not args.quiet:
        print(
            f"copied {s.shards} shards, {s.members:,} members -> {s.output}; left out {s.left_out:,} members of "
            f"{s.denied_samples:,} denied samples ({s.denylist or 'no deny-list'})"
            + (f"; {s.reused} shards were already in the bucket (a killed copy's)" if s.reused else "")
        )
        for note in s.notes[:20]:
            print(f"  note: {note}")
    return EXIT_OK
