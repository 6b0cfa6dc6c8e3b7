"""``dsclean pack`` and ``dsclean verify``: argparse wiring and human output.

:func:`add_parsers` registers the commands; each handler calls :mod:`dsclean.pack`
and returns an exit code (:mod:`dsclean.cli.exit_codes`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import argtypes
from ..errors import UserError
from ..pack.extnames import POLICIES
from ..pack.options import RANDOM
from .bucket import add_storage_option
from .exit_codes import EXIT_FOUND_BAD, EXIT_INCOMPLETE, EXIT_OK

_MAX_LISTED = 20


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pack",
        help="pack an index's samples into WebDataset tar shards (with a packed index)",
        description="Write the samples of INDEX (written by dsclean index) into WebDataset tar shards in DIR, "
        "with a packed index (index.arrow) and a wids shard list (shardindex.json). DIR must be empty, or hold "
        "a pack of the same index with the same options: then it resumes.",
    )
    p.add_argument(
        "index",
        metavar="INDEX",
        nargs="?",
        help="the index to pack (Arrow file or npy folder), or a bucket prefix (s3://BUCKET/PREFIX: its media "
        "objects, less those its last dsclean scan found bad); or --from SHARDS",
    )
    # -- a clean copy of another tool's shards (dsclean.shardsets) --
    p.add_argument(
        "--from",
        dest="from_shards",
        nargs="+",
        metavar="SHARDS",
        help="instead of INDEX: copy these WebDataset tars (a folder, paths, a brace pattern) into DIR, "
        "leaving out the samples of the deny-list (--denylist, default denylist.jsonl beside them)",
    )
    # --
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="DIR",
        help="the shard folder (empty, new, or a pack to resume), or a bucket prefix (s3://BUCKET/SHARDS: built "
        "in the local state folder, uploaded shard by shard, pack.json last; the same command resumes it)",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--shard-size",
        type=argtypes.size,
        metavar="SIZE",
        help="the largest shard file, e.g. 512M or 1G (default 1G); a tar is whole 10,240-byte records, so a "
        "shard is at most the largest multiple of 10,240 not above SIZE (one sample per shard below "
        "that; a single sample bigger than SIZE gets a shard of its own)",
    )
    size.add_argument("--samples-per-shard", type=argtypes.positive, metavar="N", help="N samples per shard")
    order = p.add_mutually_exclusive_group()
    order.add_argument(
        "--shuffle",
        type=argtypes.count,
        metavar="SEED",
        help="the seed of the samples' order (a deterministic permutation); by default the samples are "
        "shuffled with a seed chosen at random, recorded in pack.json and printed (a resumed pack, a later "
        "--part and --finish keep the recorded one): streaming readers shuffle only within a buffer, so "
        "shards in index order (one class after another) train badly",
    )
    order.add_argument(
        "--no-shuffle",
        action="store_true",
        help="write the samples in index order (e.g. to compare with the index row by row)",
    )
    p.add_argument(
        "--ext-policy",
        choices=POLICIES,
        default=None,
        help="how each sample's media member is named: by-kind (default) every image <key>.jpg and every "
        "sound <key>.flac whatever the real format, the bytes unchanged (webdataset decodes by content, so "
        'decode("pil").to_tuple("jpg", "cls") reads every sample); keep: the real format\'s extension (a PNG '
        "named .jpg is .png), which needs every extension in the reader's keys (the recipe printed says "
        "which). A resumed pack keeps the policy its pack.json records",
    )
    p.add_argument("--name", metavar="FORMAT", help="shard file name format (default data-{:06d}.tar)")
    p.add_argument(
        "--jobs", "-j", type=argtypes.positive, default=1, metavar="N", help="shards written at once (default 1)"
    )
    p.add_argument(
        "--backend",
        choices=("loky", "dask"),
        default="loky",
        help="loky: processes on this machine (default); dask: a Dask cluster, one task per shard",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --backend dask: tcp://HOST:PORT or a scheduler file (refused without --backend dask)",
    )
    p.add_argument(
        "--part",
        type=argtypes.shard,
        metavar="I/N",
        help="write only the shards whose number is I mod N (a job array's task); then run --finish once",
    )
    p.add_argument(
        "--finish",
        action="store_true",
        help="after every --part has finished: check them and write the packed index and shard list",
    )
    p.add_argument(
        "--skip-changed",
        action="store_true",
        help="leave out (and report) files that changed or vanished since indexing, instead of stopping",
    )
    p.add_argument(
        "--rehash",
        action="store_true",
        help="hash every file's bytes, instead of reusing the scan's content_hash of files whose size "
        "and mtime are unchanged since the scan",
    )
    p.add_argument(
        "--no-fsync",
        dest="fsync",
        action="store_false",
        help="do not fsync the shards and the files beside them (faster; after a power loss or an OS "
        "crash they may be incomplete: run sync, or dsclean verify, before relying on them)",
    )
    p.add_argument(
        "--denylist",
        metavar="FILE",
        help="leave out the samples of this deny-list (e.g. an older pack's denylist.jsonl, written by "
        "dsclean quarantine --from-log)",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="with a bucket source or output: where its local state lives (default $DSCLEAN_STATE_DIR, per user)",
    )
    add_storage_option(p)
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_pack)

    p = sub.add_parser(
        "verify",
        help="check a shard set like fsck: tar structure, checksums, counts, keys",
        description="Check the shard set in DIR (written by dsclean pack) against its packed index "
        "and shard list. Reads only.",
    )
    p.add_argument(
        "folder",
        metavar="DIR",
        nargs="+",
        help="the shard folder; or a shard set written by another tool: a folder of WebDataset tars, MDS or "
        "litdata shards, Parquet files, shard paths, a brace pattern (every sample is then checked)",
    )
    p.add_argument(
        "--jobs", "-j", type=argtypes.positive, default=1, metavar="N", help="shards checked at once (default 1)"
    )
    p.add_argument(
        "--decode",
        action="store_true",
        help="also run the scan's checks on every sample's bytes, in the scan's isolated worker pool",
    )
    # -- shard sets written by other tools (dsclean.shardsets) --
    from .parser import add_shard_set_options

    add_shard_set_options(p, scan=False)
    # --
    add_storage_option(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON (per shard: shard, ok, problems)")
    p.add_argument(
        "--quiet", "-q", action="store_true", help="print nothing: the exit code says whether the set is whole"
    )
    p.set_defaults(func=cmd_verify)


def cmd_pack(args: argparse.Namespace) -> int:
    from ..pack.packer import PackOptions, finish_pack, pack_shards
    from ..storage.urls import is_url, parse_storage_options

    storage = parse_storage_options(args.storage_options)
    to_bucket = is_url(args.output) and not args.output.startswith("file://")
    if (to_bucket or is_url(args.index or "")) and (args.part or args.finish):
        raise UserError(
            "--part and --finish write a pack in a shared folder from a local index: a pack from or to a bucket "
            "is one command"
        )
    # -- a clean copy of another tool's shards (dsclean.shardsets) --
    if args.from_shards or args.index is None:
        from .shardsets import route_pack

        if not to_bucket:
            return route_pack(args)
        from ..pack.remote import pack_to_bucket

        url, args.output = args.output, "(staging)"

        def repack(staging: str, sink) -> int:  # each shard uploaded as soon as it is written
            args.output = staging
            return route_pack(args, shard_sink=sink)

        code = pack_to_bucket(_Code.of(repack), url, storage, args.state_dir).code
        if not (args.quiet or args.json):
            print(f"  uploaded to {url} (pack.json last)")
        return code
    # --
    options = PackOptions(
        shard_size=args.shard_size,
        samples_per_shard=args.samples_per_shard,
        shuffle=None if args.no_shuffle else RANDOM if args.shuffle is None else args.shuffle,
        ext_policy=args.ext_policy,
        name=args.name,
        jobs=args.jobs,
        backend=args.backend,
        scheduler=args.scheduler,
        part=args.part,
        skip_changed=args.skip_changed,
        rehash=args.rehash,
        fsync=args.fsync,
        denylist=args.denylist,
        progress=not (args.quiet or args.json) and sys.stderr.isatty(),
        storage_options=storage,
        state_dir=args.state_dir,
    )
    try:
        summary = (finish_pack if args.finish else pack_shards)(args.index, args.output, options)
    finally:
        if args.backend == "loky" and args.jobs > 1:  # one pack per command: no worker outlives it
            from ..pack.runner import release_workers

            release_workers()
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    elif not args.quiet:
        print(format_pack(summary))
    for warning in summary.warnings:
        print(f"dsclean pack: warning: {warning}", file=sys.stderr)
    for failure in summary.failures:
        print(f"dsclean pack: error: {failure}", file=sys.stderr)
    if summary.signal:
        print(
            "dsclean pack: interrupted; the shards written so far are complete: run the same command to resume",
            file=sys.stderr,
        )
        return 128 + summary.signal
    return EXIT_INCOMPLETE if summary.failures else EXIT_OK


class _Code:
    """An exit code as the summary :func:`dsclean.pack.remote.pack_to_bucket` expects (complete when 0)."""

    def __init__(self, code: int) -> None:
        self.code, self.complete, self.output = code, code == EXIT_OK, ""

    @classmethod
    def of(cls, run):
        return lambda staging, sink: cls(run(staging, sink))


def format_pack(s) -> str:
    if s.part is not None:
        head = f"part {s.part[0]}/{s.part[1]}: wrote {s.written} shards, {s.reused} were already there -> {s.output}"
    elif s.complete:
        head = (
            f"packed {s.samples:,} samples into {s.shards} shards -> {s.output} "
            f"(wrote {s.written}, reused {s.reused}; {s.bytes_written / 2**20:.1f} MiB in {s.elapsed:.1f} s)"
        )
    else:
        why = "interrupted" if s.signal else "fix the errors below and"
        head = (
            f"incomplete: wrote {s.written} of {s.shards} shards ({s.reused} already there) -> {s.output}; "
            f"{why} run the same command to resume"
        )
    lines = [head]
    if s.written:
        lines.append(
            f"  checksums: {s.hashed:,} files hashed, the others' content_hash reused from the scan "
            f"results ({s.scan_results})"
            if s.scan_hashes
            else f"  checksums: {s.hashed:,} files hashed (no current content_hash in scan results: {s.scan_results})"
        )
    if s.skipped:
        lines.append(f"  {len(s.skipped)} samples left out (--skip-changed):")
        lines += [f"    {x['path']}: {x['why']}" for x in s.skipped[:_MAX_LISTED]]
        if len(s.skipped) > _MAX_LISTED:
            lines.append(f"    ... and {len(s.skipped) - _MAX_LISTED} more (--json lists all)")
    lines += [f"  note: {n}" for n in s.notes]
    if s.complete or s.part is not None:
        lines.append(
            f"  order: shuffled, seed {s.shuffle} (recorded in pack.json; --shuffle {s.shuffle} repeats it)"
            if s.shuffle is not None
            else "  order: index order (--no-shuffle; streaming readers shuffle only within a buffer)"
        )
    if s.recipe:
        lines += format_recipe(s.recipe, s.output)
    return "\n".join(lines)


def format_recipe(recipe: dict, folder: str) -> list[str]:
    """The lines that show how to read the set with webdataset (the recipe pack.json records)."""
    urls = (
        os.path.join(folder, recipe["urls"]) if recipe.get("urls") else f"<the shards {folder}/shardindex.json lists>"
    )
    return [
        f"  read it with webdataset (media members named by --ext-policy; keys {', '.join(recipe['keys'])}):",
        f"    import {', '.join(recipe['imports'])}",
        f"    urls = {json.dumps(urls)}",
        f"    dataset = {recipe['python']}",
    ]


def cmd_verify(args: argparse.Namespace) -> int:
    from ..storage.urls import is_url, parse_storage_options

    # -- a dsclean pack in a bucket (dsclean.pack.remote): its pack.json, packed index or shard list there --
    url = args.folder[0] if len(args.folder) == 1 else ""
    if is_url(url) and not url.startswith("file://") and args.as_kind is None:
        from ..pack.remote import has_pack

        storage = parse_storage_options(args.storage_options)
        if has_pack(url, storage):
            args.folder = url
            return _verify(args, storage)
    # --

    # -- shard sets written by other tools (dsclean.shardsets); else args.folder becomes the one folder --
    from .shardsets import route_verify

    code = route_verify(args)
    if code is not None:
        return code
    # --

    return _verify(args, {})


def _verify(args: argparse.Namespace, storage: dict) -> int:
    from ..pack.verify import verify_shards

    if args.backend != "processes" or args.scheduler:
        raise UserError(
            f"{args.folder}: a dsclean pack is verified on this machine (--jobs); --backend and --scheduler are for "
            "shard sets written by other tools"
        )

    # --decode: judged with the check options the packed index recorded (verdicts only)
    report = verify_shards(args.folder, jobs=args.jobs, decode=True if args.decode else None, storage_options=storage)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif not args.quiet:
        print(format_verify(report))
    return EXIT_OK if report.ok else EXIT_FOUND_BAD


def format_verify(r) -> str:
    bad = [s for s in r.shards if not s.ok]
    lines = [
        f"{'ok' if r.ok else 'PROBLEMS'}: {r.folder}: {len(r.shards) - len(bad)} of {len(r.shards)} shards pass, "
        f"{r.samples:,} samples, {r.bytes / 2**20:.1f} MiB"
    ]
    lines += [f"  problem: {p}" for p in r.problems]
    for s in bad[:_MAX_LISTED]:
        for p in s.problems:
            where = " ".join(x for x in (p["member"] or p["key"],) if x)
            lines.append(f"  {s.shard}: {where + ': ' if where else ''}{p['problem']}")
        if s.more_problems:
            lines.append(f"  {s.shard}: ... and {s.more_problems} more problems")
    if len(bad) > _MAX_LISTED:
        lines.append(f"  ... and {len(bad) - _MAX_LISTED} more shards with problems (--json lists all)")
    lines += [f"  note: {n}" for n in r.notes]
    lines += [f"  warning: {w}" for w in r.warnings]
    return "\n".join(lines)
