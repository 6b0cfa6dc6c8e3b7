"""``write_report``: a scan's results -> one self-contained HTML file.

Steps: find the scan (:mod:`.source`; a storage URL's last scan: :mod:`.remote`), read its results once
(:mod:`.collect`), add duplicate groups (:mod:`.duplicates`), make thumbnails in isolated workers
(:mod:`.thumbs`; a bucket scan's objects read from the store by :mod:`.remote`), render (:mod:`.render`),
write to a temp file and rename.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from ..atomic import atomic_output
from ..dups.quarantines import recorded_quarantines
from ..errors import UserError
from ..scanning.quarantine.status import quarantine_state
from ..storage.urls import is_url
from .collect import Caps, collect
from .duplicates import exact_duplicates, moved_by_dups, read_groups
from .remote import BucketObjects, last_bucket_results, merged_options
from .render import render
from .safe import Scrubber, display
from .shardsamples import ShardSamples, attach, shown_members
from .source import check_output, locate, open_source, quarantined_locations
from .thumbs import ThumbLimits, make_thumbnails

DEFAULT_OUTPUT = "report.html"


@dataclass(frozen=True)
class ReportOptions:
    """What ``dsclean report`` can be told. The defaults are the CLI's."""

    dups: str | None = None  # a `dsclean dups` groups file (JSONL); else exact duplicates from the scan's hashes
    thumbnails: bool = True  # False: no picture of any file in the report (privacy)
    absolute_paths: bool = False  # keep absolute paths of this machine in the report
    jobs: int = 0  # thumbnail worker processes; 0 = usable cores
    caps: Caps = Caps()
    limits: ThumbLimits | None = None  # None: defaults, with the scan's own pixel limit
    command: tuple[str, ...] = ()  # the command line that made the report, shown in it
    state_dir: str | None = None  # where a root's last scan is recorded (default: $DSCLEAN_STATE_DIR, per user)
    failures: tuple[str, ...] = ()  # training failure logs (dsclean.guard's) for the "Failed in training" section
    #: a bucket scan's: fsspec options to read its objects with, over the non-secret ones the scan recorded
    storage_options: dict = field(default_factory=dict, repr=False)


@dataclass
class ReportSummary:
    """What :func:`write_report` wrote."""

    output: str
    bytes: int = 0
    files: int = 0
    problems: int = 0
    thumbnails: int = 0
    placeholders: int = 0
    failed: int = 0  # thumbnails whose decoder crashed or overran (placeholders instead)
    elapsed: float = 0.0
    results_source: str = ""  # where the scan results came from (dsclean.locations.find_scan)
    notes: list[str] = field(default_factory=list)
    incomplete: str | None = None  # only some parts of a job array: which files the report leaves out


def write_report(target: str, output: str = DEFAULT_OUTPUT, options: ReportOptions = ReportOptions()) -> ReportSummary:
    """Write the HTML report of the scan behind ``target`` (a root, a results folder or file, or a scanned
    storage URL: its last scan) to ``output`` (a local file)."""
    start = time.perf_counter()
    given = target
    if is_url(target):
        target = last_bucket_results(target, options.state_dir)
    src = open_source(target, options.state_dir)
    bucket = is_url(src.root)  # a bucket scan's results (given by URL or as a results file)
    if options.storage_options and not bucket:
        raise UserError(f"--storage-option: only for a bucket scan's report (s3://...), and {given} is local")
    out = check_output(output, None if bucket else src.root)
    named = {src.root: "ROOT", src.results_dir: "RESULTS"}
    if src.quarantine:
        named[src.quarantine] = "QUARANTINE"
    scrub = Scrubber(named, keep=options.absolute_paths)
    data = collect(src.results_paths, src.columns, scrub, options.caps, src.prefix)
    _describe(data, src, scrub, options)
    from .training import collect_training

    data.training = collect_training(tuple(options.failures), src.root, options.state_dir, scrub)
    dups_bins = recorded_quarantines(src.root, options.state_dir) if src.root else []  # dsclean dups' moves
    if options.dups:
        data.duplicates = read_groups(options.dups, scrub, state_dir=options.state_dir)
    elif "content_hash" in src.columns:
        data.duplicates = exact_duplicates(
            src.results_paths, data.files, scrub, moved=moved_by_dups(dups_bins, src.root), prefix=src.prefix
        )
    stats = {"made": 0, "placeholders": 0, "failed": 0}
    shard_kind = src.meta.get("shard_set")
    if options.thumbnails and isinstance(shard_kind, str):  # samples inside shards: their member bytes
        items = list(data.items())
        limits = _limits(src, options)
        storage = merged_options(src.meta.get("storage_options"), options.storage_options)
        samples = ShardSamples(shard_kind, src.root, storage, limits.max_bytes)
        shown = shown_members(src.results_paths, {i.rel for i in items if i.rel and i.source is None}, src.prefix)
        attach(items, samples.locate(shown))
        stats = make_thumbnails(items, limits, _jobs(options.jobs), scrub, samples.fetch)
    elif options.thumbnails and bucket:
        items = list(data.items())
        limits = _limits(src, options)
        summary = src.summary or {}
        objects = BucketObjects(
            src.root,
            merged_options(src.meta.get("storage_options"), options.storage_options),
            summary.get("quarantine") if isinstance(summary.get("quarantine"), str) else None,
            options.state_dir,
            limits.max_bytes,
        )
        found = objects.locate({i.rel for i in items if i.rel and i.source is None})
        for i in items:
            if i.rel and i.source is None:
                i.source = found.get(i.rel)
        stats = make_thumbnails(items, limits, _jobs(options.jobs), scrub, objects.fetch)
    elif options.thumbnails:
        items = list(data.items())
        found = locate(src, {i.rel for i in items if i.rel and i.source is None})
        for folder in dups_bins:  # a copy dsclean dups moved: its thumbnail from there
            missing = {i.rel for i in items if i.rel and i.source is None} - found.keys()
            for variant in {os.path.abspath(src.root), os.path.realpath(src.root)} if missing else ():
                found.update(quarantined_locations(folder, variant, missing))
        for i in items:
            if i.rel and i.source is None:
                i.source = found.get(i.rel)
        stats = make_thumbnails(items, _limits(src, options), _jobs(options.jobs), scrub)
    else:
        data.thumbnails = "off"
    html = render(data)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with atomic_output(out) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(html)
        _readable_as_umask_allows(tmp)
    return ReportSummary(
        output=out,
        bytes=os.path.getsize(out),
        files=data.files,
        problems=data.problems_total,
        thumbnails=stats["made"],
        placeholders=stats["placeholders"],
        failed=stats["failed"],
        elapsed=time.perf_counter() - start,
        results_source=src.results_source,
        incomplete=src.incomplete,
    )


def _describe(data, src, scrub: Scrubber, options: ReportOptions) -> None:
    """The page's title and the scan's own facts: where, how, how long (from scan_summary.json)."""
    from .. import __version__

    root = src.root.rstrip(os.sep)
    data.title = display(root if options.absolute_paths else os.path.basename(root) or root)
    data.root = display(root) if options.absolute_paths else data.title
    data.results = display(scrub(src.results_path)) + (
        f" (+{len(src.results_paths) - 1} more parts)" if len(src.results_paths) > 1 else ""
    )
    data.generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if src.incomplete:
        data.incomplete = display(scrub(src.incomplete))
    data.version = __version__
    data.report_command = display(scrub.command(list(options.command)))
    summary = src.summary or {}
    if isinstance(summary.get("command"), list):
        data.scan_command = display(scrub.command([str(a) for a in summary["command"]]))
    if src.prefix:  # a split (or other folder) of a scanned parent: the parent's whole-set figures are not its own
        under = display(scrub(src.scanned_root or ""))
        data.notes.append(
            f"This report covers {data.title} only: the rows under {display(os.fsdecode(src.prefix))} of the scan "
            f"of {under} (its counts, problems, thumbnails and distributions); the scan's own figures for the "
            "whole set (its norm, per-split counts, quarantine totals) are left out."
        )
        summary = {k: v for k, v in summary.items() if k not in ("distributions", "splits", "quarantine")}
    if isinstance(summary.get("distributions"), dict):  # the set's norm (scan; dsclean.scanning.norm)
        data.distributions = summary["distributions"]
        data.norm_flagged = summary.get("norm_flagged") or {}
    if isinstance(summary.get("elapsed"), (int, float)):
        data.elapsed = float(summary["elapsed"])
    if src.quarantine and not src.prefix and (summary.get("quarantine") or not summary):
        # The journal, not the scan's summary: a later `dsclean restore` puts files back (as `status` counts).
        state = quarantine_state(src.quarantine)
        data.quarantined, data.restored = state.moved, state.restored
    if summary.get("interrupted"):
        data.notes.append("The scan was interrupted: these results cover only the files checked before it stopped.")
    splits = summary.get("splits")
    if isinstance(splits, dict) and splits:  # a split root's files per split (dsclean.splits), from the scan's summary
        data.notes.append(
            "A split root: "
            + "; ".join(
                f"{display(str(name))} {c.get('files', 0):,} files ({c.get('bad', 0):,} bad, {c.get('warn', 0):,} warn)"
                for name, c in splits.items()
                if isinstance(c, dict)
            )
            + "."
        )
    raw = src.meta.get("options")
    try:
        opts = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        opts = None
    if isinstance(opts, dict):
        data.scan_options = {k: v for k, v in opts.items() if k != "dsclean"}
        if opts.get("facts") is False:
            data.notes.append(
                "The scan ran with --facts none: no quality facts were recorded (no quality section)."
                if options.dups
                else "The scan ran with --facts none: no content hashes and no quality facts were recorded, so this "
                "report shows no duplicates and no quality section. Scan again with facts on (the default, "
                "--facts all), or pass --dups with the groups file of dsclean dups (which hashes the files itself)."
            )
    if data.problems_total > len(data.problems):
        data.notes.append(f"The problems table holds the first {len(data.problems):,} of {data.problems_total:,}.")


def _readable_as_umask_allows(path: str) -> None:
    """A report is for sharing: give it the mode a plain new file gets (temp files start private)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def _limits(src, options: ReportOptions) -> ThumbLimits:
    if options.limits is not None:
        return options.limits
    raw = src.meta.get("options")
    try:
        opts = json.loads(raw) if isinstance(raw, str) else (raw or {})
    except ValueError:
        opts = {}
    pixels = opts.get("max_pixels") if isinstance(opts, dict) else None
    # The scan's own limit; a scan without one (0) still gets Pillow's default: thumbnails always have a limit.
    return ThumbLimits(max_pixels=pixels) if isinstance(pixels, int) and pixels > 0 else ThumbLimits()


def _jobs(jobs: int) -> int:
    if jobs:
        return jobs
    from ..scanning.cores import usable_cores  # the scan's count: affinity and cgroup quota aware

    return usable_cores()
