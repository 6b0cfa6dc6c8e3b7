"""The scan: discover -> check (parallel) -> verdicts -> quarantine, streamed end to end.

Discovery yields paths lazily; they are cut into chunks (sized to the mean file
size seen so far) and handed to worker processes a few chunks ahead of the
workers, verdicts come back as one Arrow batch per chunk (built by the worker) in
completion order, and each is written and (if bad) quarantined as it arrives. Nothing holds a per-file object beyond the chunks in flight and one
results row group, so memory stays flat for 10 million files.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import signal
import time
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator

from .. import locations
from .. import reasons as R
from ..argtypes import memory_floor_problem
from ..atomic import atomic_output
from ..errors import UserError
from ..interrupts import StopRequest, stop_on_signals
from ..quality.flags import FLAGS, FlagOptions
from ..splits import SPLIT_NAMES, split_counts, split_folders
from . import facts as facts_of
from .cache import ScanCache, options_key, row_to_verdict
from .check import CheckOptions
from .cores import usable_cores
from .discover import DiscoverStats, iter_media_lists, symlink_mode
from .executors import check_backend, run_checks
from .fastfork import WorkersUnavailable
from .related import RelatedCache, open_related
from .results import SCHEMA, ResultsWriter
from .reuse import PreviousResults
from .schema import Chunk, call_function
from .verdict import _FS_ENCODING, FIELDS, Verdict, encode_path, verdict_of_row
from .worker import default_ceiling_override

if TYPE_CHECKING:
    import pyarrow as pa

    from .quarantine.moves import Quarantine


@dataclass(frozen=True)
class ScanOptions:
    """Everything ``dsclean scan`` can be told. The defaults are the CLI's."""

    jobs: int = 0  # 0 = all usable cores (affinity and cgroup quota aware)
    check: CheckOptions = CheckOptions()
    quarantine: str | None = None
    report_dir: str | None = None  # default: the quarantine folder, else the root's state folder
    dry_run: bool = False  # decide and report, move nothing
    include_hidden: bool = False
    follow_symlinks: bool = False  # the older spelling of symlinks="inside"
    symlinks: str | None = None  # "none" (default), "inside" (links staying in ROOT) or "all"
    state_dir: str | None = None  # base of the per-root state folders (default: $DSCLEAN_STATE_DIR, else per user)
    allow_inside_root: bool = False  # accept a quarantine or report folder inside ROOT (ImageFolder sees a class)
    chunk_size: int = 4096  # files per task sent to a worker, at most (tiny files: a task costs ~1 ms of bookkeeping)
    chunk_bytes: int = 4 << 20  # bytes per task, about (files per task follow the mean size checked so far)
    backend: str = "processes"  # "processes" (local, default), "loky" (joblib's), "threads", or "dask" (see scheduler)
    scheduler: str | None = None  # Dask scheduler address (tcp://host:port) or scheduler file, for backend="dask"
    shard: tuple[int, int] | None = None  # (i, n): check only files whose path hashes to i mod n
    use_cache: bool = True  # reuse verdicts of unchanged files from earlier scans of this root
    rescan: bool = False  # check every file again (the cache is still updated)
    progress: bool | None = None  # None = only when stderr is a terminal
    command: tuple[str, ...] = ()  # the command line that started the scan, recorded in the summary
    flags: FlagOptions = FlagOptions()  # quality flag thresholds (flags need check.facts)
    quarantine_flags: tuple[str, ...] = ()  # quality flags whose files are quarantined too (reason `flagged`)
    keep_workers: bool = True  # keep local worker processes for a next scan; False: they end with the last check
    # share of a class folder under which a mode, sample rate, ... is warned about as outside the set's inferred
    # norm (`--minority`; dsclean.scanning.norm); 0: no inferred norm (distributions are still shown)
    minority: float = 0.01
    from_logs: tuple[str, ...] = ()  # training failure logs: their files under ROOT are checked again (not cached)
    split_names: tuple[str, ...] = SPLIT_NAMES  # what a split folder is called (--split-names; dsclean.splits)


@dataclass
class ScanSummary:
    """Counts and locations of one scan; what the CLI prints at the end."""

    root: str
    files: int = 0
    bytes: int = 0
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> status -> n
    bad_reasons: dict[str, int] = field(default_factory=dict)
    warn_reasons: dict[str, int] = field(default_factory=dict)
    cached: int = 0  # verdicts reused from the scan cache (file unchanged since it was checked)
    flags: dict[str, int] = field(default_factory=dict)  # quality flag -> files carrying it (facts on)
    flag_quarantined: int = 0  # files moved for a flag of --quarantine-flags (also counted in quarantined)
    checked_bytes: int = 0  # bytes of the files decoded by this run (not from the cache)
    quarantined: int = 0
    would_quarantine: int = 0
    move_failures: int = 0  # moves that failed: the scan is incomplete (exit 3)
    move_failure_reasons: dict[str, int] = field(default_factory=dict)  # error -> count
    move_errors: list[str] = field(default_factory=list)  # the first MAX_LISTED messages; all are in problems
    recovered: dict[str, int] = field(default_factory=dict)
    discovery: DiscoverStats = field(default_factory=DiscoverStats)
    elapsed: float = 0.0
    jobs: int = 1
    results_path: str = ""
    problems_path: str = ""
    state_dir: str = ""  # the root's state folder (scan cache, last-scan pointer)
    quarantine: str | None = None
    quarantine_state: dict | None = None  # what the quarantine holds now, by its journal (all runs)
    dry_run: bool = False
    shard: tuple[int, int] | None = None
    interrupted: bool = False
    signal: int = 0  # the signal that stopped the scan (SIGINT / SIGTERM), 0 if none
    stopped: str = ""  # why the scan stopped early without a signal (no worker could start): exit 3
    notes: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)  # the command line, when the scan came from one
    #: folders directly under ROOT this scan's moves left without any media file: torchvision's ImageFolder
    #: refuses such a class ("Found no valid file for the classes ..."), so the scan says so
    emptied_folders: list[str] = field(default_factory=list)
    #: the set's distributions (modes, sizes, aspect ratios, sample rates, channels, durations: value -> files)
    #: and the files the inferred norm warned about (reason -> n), dsclean.scanning.norm
    distributions: dict = field(default_factory=dict)
    norm_flagged: dict[str, int] = field(default_factory=dict)
    #: files that failed in training (quarantine --from-log's record, scan --from-log) checked again, and the bad ones
    training_rechecked: int = 0
    training_bad: int = 0
    #: a split root's splits (dsclean.splits): split -> {"files", "bad", "warn"} as in the results; {} otherwise
    splits: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def bad(self) -> int:
        return sum(self.bad_reasons.values())

    @property
    def incomplete(self) -> bool:
        """Some moves failed (every failure is in the problems file), or the scan stopped early (``stopped``):
        the state is consistent, the results hold what was decided."""
        return self.move_failures > 0 or bool(self.stopped)

    @property
    def files_per_s(self) -> float:
        return self.files / self.elapsed if self.elapsed > 0 else 0.0

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(bad=self.bad, files_per_s=round(self.files_per_s, 1))
        return d


def _batches(lists: Iterable[list[str]], size: int) -> Iterator[list[str]]:
    """Discovery's lists (a folder's files each) joined into batches of about ``size``: small folders
    together, a large one (at most :data:`~dsclean.scanning.discover.LIST_MAX`) whole."""
    batch: list[str] = []
    for rels in lists:
        batch += rels
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def validate_root(root: str) -> str:
    """The root as an absolute path, or a :class:`UserError` saying what is wrong with it."""
    if not os.path.lexists(root):
        raise UserError(f"scan root {root} does not exist")
    if not os.path.isdir(root):
        raise UserError(
            f"scan root {root} is a file, not a folder"
            if os.path.exists(root)
            else f"scan root {root} is a broken symlink"
        )
    if not os.access(root, os.R_OK | os.X_OK):
        raise UserError(f"scan root {root} cannot be listed: permission denied")
    return os.path.abspath(root)


def scan(root: str, options: ScanOptions = ScanOptions()) -> ScanSummary:
    """Check every media file under ``root``; write results; quarantine bad files unless dry-run.

    Nothing is written inside ``root`` except moving bad files out: results go to the
    report folder (default: the quarantine, else the root's state folder), the scan
    cache and the last-scan pointer to the root's state folder (:mod:`dsclean.locations`).
    """
    root = validate_root(root)
    jobs = options.jobs or usable_cores()
    check_backend(options.backend, options.scheduler)
    if memory_floor_problem(options.check.max_memory):
        raise UserError(memory_floor_problem(options.check.max_memory))
    if options.check.max_memory == 0:
        default_ceiling_override()  # a bad $DSCLEAN_DEFAULT_MAX_MEMORY: refused here, not in every worker
    if not options.check.facts and options.flags != FlagOptions():
        raise UserError("the --flag-* thresholds need the facts the flags come from: drop --facts none")
    symlinks = symlink_mode(options.symlinks, options.follow_symlinks)
    quarantine_flags = check_quarantine_flags(options.quarantine_flags, options.check.facts)
    quarantine_dir = os.path.abspath(options.quarantine) if options.quarantine else None
    state = locations.root_state_dir(root, options.state_dir)
    report_dir = os.path.abspath(
        options.report_dir
        or locations.default_report_dir(root, None if options.dry_run else quarantine_dir, options.state_dir)
    )
    moving = quarantine_dir is not None and not options.dry_run
    _check_folders(root, quarantine_dir if moving else None, report_dir, state, options.allow_inside_root)
    if moving:
        # where a --dry-run's results would go: a dry run moves nothing, so never into the quarantine
        _refuse_read_only(
            root, os.path.abspath(options.report_dir or locations.default_report_dir(root, None, options.state_dir))
        )
    summary = ScanSummary(
        root=root,
        jobs=jobs,
        quarantine=quarantine_dir,
        dry_run=options.dry_run,
        shard=options.shard,
        state_dir=state,
        command=list(options.command),
    )
    tag = locations.part_tag(valid_part(options.shard))
    from .training import paths_to_recheck

    force = paths_to_recheck(root, options.state_dir, tuple(options.from_logs))
    with contextlib.ExitStack() as stack:
        stack.push(lambda exc_type, exc, tb: _raise_write_failure(exc, summary) if isinstance(exc, OSError) else None)
        note = stack.enter_context(locations.scan_lock(root, options.shard, options.state_dir))
        summary.notes += [note] if note else []
        quarantine = None
        if moving:
            # a scan that moves nothing never loads the quarantine's code
            from .quarantine.moves import Quarantine
            from .quarantine.status import quarantine_state, quarantined_records

            quarantine = stack.enter_context(Quarantine(quarantine_dir, root, tag))
            rec = quarantine.recovery
            summary.recovered = {"completed": rec.completed, "reverted": rec.reverted}
            summary.notes += rec.refused + rec.bad_lines
        flag_meta = asdict(options.flags) if options.check.facts else None  # thresholds of the flags column
        # the previous results, opened before this run's writer replaces them (reused for unchanged files)
        previous = (
            PreviousResults.open(root, options.state_dir, options_key(options.check), flag_meta)
            if options.use_cache and not options.rescan
            else None
        )
        writer = _open_writer(
            report_dir,
            tag,
            {"root": root, "shard": options.shard, "options": options_key(options.check), "flags": flag_meta},
        )
        # Publish whatever was decided on success or a clean stop (signals are handled below);
        # an error leaves the previous results in place. The problems file also lists every file
        # the quarantine held before this run (the journal is the source of truth).
        earlier = (
            (lambda: quarantined_records(quarantine_dir, root, [tag] if tag else None, quarantine.moved_ids))
            if quarantine is not None
            else (lambda: ())
        )
        stack.push(lambda exc_type, exc, tb: writer.discard() if exc_type else writer.close(earlier()))
        cache = _open_cache(root, report_dir, options, summary, tag)
        if cache is not None:
            stack.callback(lambda: (cache.close(), summary.notes.extend(cache.notes)))
        else:
            previous = None  # the cache could not open: the note says every file is checked again
        if previous is not None:
            stack.callback(lambda: (previous.close(), summary.notes.extend(previous.notes)))
        # after its own cache: a scanned parent's verdicts, a split's (dsclean.scanning.related)
        related = (
            open_related(root, options.state_dir, options.check, options.split_names)
            if cache is not None and not options.rescan
            else []
        )
        stack.callback(lambda: summary.notes.extend(r.note() for r in related if r.hits))
        sink = _Sink(
            summary,
            writer,
            quarantine,
            cache,
            _progress_bar(options),
            options.flags if options.check.facts else None,
            quarantine_flags,
            force=force,
        )
        identities = sink.identities if moving else None
        stack.callback(sink.close_progress)
        stack.callback(sink.flush_fresh)  # before the cache closes and the writer publishes
        start = time.perf_counter()
        stack.callback(lambda: setattr(summary, "elapsed", time.perf_counter() - start))
        listed = iter_media_lists(
            root,
            exclude=[d for d in (quarantine_dir, report_dir) if d],
            include_hidden=options.include_hidden,
            symlinks=symlinks,
            stats=summary.discovery,
        )
        media = (rels for rels, _ in listed)
        if options.shard is not None:
            media = ([rel for rel in rels if in_part(rel, options.shard)] for rels in media)
        try:
            # SIGINT/SIGTERM finish the verdict chunk in hand (its moves and its rows), then stop
            with stop_on_signals() as stop:
                to_check = _skip_cached(
                    root,
                    media,
                    None if options.rescan else cache,
                    sink,
                    options.chunk_size,
                    stop,
                    options.chunk_bytes,
                    identities,
                    previous,
                    force,
                    related,
                )
                checks = run_checks(
                    root,
                    to_check,
                    options.check,
                    jobs,
                    options.backend,
                    options.scheduler,
                    batches=True,
                    release=not options.keep_workers,
                )
                for chunk in checks:
                    sink.handle_chunk(chunk)
                    if stop.signum:
                        checks.close()  # cancel queued chunks; workers finish or are dropped
                        break
            summary.signal = stop.signum
        except KeyboardInterrupt:
            summary.signal = signal.SIGINT  # a second Ctrl-C: stop now, still keep what was decided
        except WorkersUnavailable as exc:  # the forkserver died twice: keep what was decided, say why (exit 3)
            summary.stopped = f"stopped early: {exc}; the results hold the files checked so far, scan again to go on"
        summary.interrupted = bool(summary.signal)
    if force and not summary.interrupted and options.shard is None:
        from .. import rechecked

        rechecked.mark_scanned(root, options.state_dir)  # done: the next scan trusts its cache for them again
    summary.results_path, summary.problems_path = writer.results_path, writer.problems_path
    _apply_norm(summary, options)
    _count_splits(summary, root, options)
    if moving:
        summary.quarantine_state = quarantine_state(quarantine_dir, [tag] if tag else None).to_json()
    summary.emptied_folders = _emptied(root, sink.moved_from) if moving else []
    if summary.emptied_folders:
        shown = ", ".join(summary.emptied_folders[:20]) + (", ..." if len(summary.emptied_folders) > 20 else "")
        summary.notes.append(
            f"{len(summary.emptied_folders)} folder(s) of ROOT hold no media file any more, every one moved out as "
            f"bad: {shown}. torchvision's ImageFolder refuses a class without a valid file (\"Found no valid file "
            'for the classes ..."): remove that folder, or restore and repair its files (dsclean restore); '
            "IndexedDataset.from_folder and dsclean index simply have one class fewer"
        )
    summary_path = _write_summary(report_dir, summary, tag)
    note = locations.write_pointer(
        root,
        [summary.results_path],
        problems=[summary.problems_path],
        summary=[summary_path],
        quarantine=quarantine_dir if moving else None,
        options=options_key(options.check),
        part=options.shard,
        state_dir=options.state_dir,
    )
    summary.notes += [note] if note else []
    summary.notes += _link_notes(summary.discovery)
    return summary


def _count_splits(summary: ScanSummary, root: str, options: ScanOptions) -> None:
    """A split root's files per split (one pass over two columns of the written results; other roots: nothing)."""
    splits = split_folders(root, options.split_names)
    if splits and os.path.exists(summary.results_path):
        summary.splits = split_counts([summary.results_path], splits)


def _apply_norm(summary: ScanSummary, options: ScanOptions) -> None:
    """The pass over the written results that infers the set's norm (dsclean.scanning.norm): not for an
    interrupted scan (half a set has no norm) nor one part of a job array (each part sees a sample)."""
    if summary.interrupted or options.shard is not None or not os.path.exists(summary.results_path):
        return
    from .norm import apply_norm

    result = apply_norm(summary.results_path, summary.problems_path, options.minority)
    summary.distributions, summary.norm_flagged = result.distributions, result.flagged
    for kind, changes in result.count_changes.items():
        counts = summary.counts.setdefault(kind, {})
        for status, n in changes.items():
            counts[status] = counts.get(status, 0) + n
    # warnings of an earlier pass reused with their rows are taken back before judging again
    for code, n in result.reset_reasons.items():
        summary.warn_reasons[code] = summary.warn_reasons.get(code, 0) - n
        if summary.warn_reasons[code] <= 0:
            del summary.warn_reasons[code]
    for code, n in result.flagged.items():
        summary.warn_reasons[code] = summary.warn_reasons.get(code, 0) + n
    if result.flagged:
        summary.notes.append(
            "outside the set's inferred norm (warn; --minority 0 turns it off): "
            + ", ".join(
                f"{code} {n} (e.g. {', '.join(result.examples[code][:3])})"
                for code, n in sorted(result.flagged.items())
            )
        )


#: how many move failures are kept in memory for the screen; all of them are in the problems file
MAX_LISTED = 1000
#: where the flags' inputs sit in a results row (cached rows are tuples in FIELDS order)
_FLAG_INPUTS = operator.itemgetter(*(FIELDS.index(name) for name in facts_of.FLAG_INPUTS))


def check_quarantine_flags(codes: Iterable[str], facts: bool) -> frozenset[str]:
    """The flag codes of ``--quarantine-flags``, validated against :data:`dsclean.quality.flags.FLAGS`."""
    codes = [c for c in codes if c]
    unknown = [c for c in codes if c not in FLAGS]
    if unknown:
        raise UserError(
            f"--quarantine-flags: unknown flag {', '.join(repr(c) for c in unknown)}; the flags are {', '.join(FLAGS)}"
        )
    if codes and not facts:
        raise UserError("--quarantine-flags needs the facts the flags come from: drop --facts none")
    return frozenset(codes)


def _raise_write_failure(exc: OSError, summary: ScanSummary) -> None:
    """A failed write (a full disk) as the user sees it: nothing moved -> UserError (exit 2), else OSError (exit 3)."""
    from ..atomic import describe_write_error

    what = describe_write_error(exc)
    done = summary.quarantined + sum(summary.recovered.values())
    if not done:
        raise UserError(
            f"could not finish the scan of {summary.root}: {what}; nothing was moved (results "
            "of an earlier scan, if any, are as they were)"
        ) from exc
    raise OSError(
        None,
        f"{what}; {summary.quarantined:,} files had been quarantined into "
        f"{summary.quarantine} (journaled; dsclean restore {summary.quarantine} puts them back), "
        "no results were written: free space and scan again (already moved files stay moved)",
    ) from exc


def _check_folders(root: str, quarantine: str | None, report: str, state: str, allow_inside: bool) -> None:
    """Refuse dsclean folders inside ROOT (unless allowed) and a quarantine or report that is a file."""
    for what, folder in (("quarantine folder", quarantine), ("report folder", report)):
        if folder and os.path.exists(folder) and not os.path.isdir(folder):
            raise UserError(f"{what} {folder} is a file, not a folder")
    # the state folder first: the default report folder is inside it, and the user chose the state folder
    for what, folder, flag in (
        ("state folder", state, "--state-dir / DSCLEAN_STATE_DIR"),
        ("quarantine folder", quarantine, "--quarantine"),
        ("report folder", report, "--report"),
    ):
        if folder and not allow_inside and locations.is_inside(folder, root):
            raise UserError(
                f"the {what} {folder} is inside the dataset root {root}: torchvision's ImageFolder (and anything "
                f"else that lists the tree) would see it as one more class and shift the labels after it. "
                f"Choose a {flag} outside ROOT, or pass --allow-inside-root to accept that folder in ROOT"
            )
        if (
            what == "quarantine folder"
            and folder
            and allow_inside
            and locations.is_inside(folder, root)
            and os.sep in os.path.relpath(os.path.abspath(folder), os.path.abspath(root))
        ):
            top = os.path.relpath(os.path.abspath(folder), os.path.abspath(root)).split(os.sep)[0]
            raise UserError(
                f"the quarantine folder {folder} is inside {top}/ of ROOT: torchvision's ImageFolder (and dsclean's "
                f"folder labels) would load every bad file moved there, from every class, as a sample of {top}. "
                "With --allow-inside-root the quarantine may only sit directly under ROOT (where it is one more "
                "class folder); better, choose a --quarantine outside ROOT"
            )
        if folder and (what == "quarantine folder" or what == "report folder" and locations.is_inside(folder, root)):
            # never one of a dataset's own folders; a quarantine not even outside ROOT (e.g. the val/ split next to
            # train/): dsclean marks it and leaves it out of every scan, so the media already there would never be checked
            media = _media_in(folder)
            if media:
                raise UserError(
                    f"the {what} {folder} already holds media files (e.g. {media}) and is not a folder dsclean "
                    f"made: dsclean marks its own folders and leaves them out of every scan (of ROOT, or of a tree "
                    f"holding that folder), so those files would never be checked again. Choose a new {flag} folder"
                )


def _media_in(folder: str) -> str | None:
    """The first media file under ``folder`` unless it is a quarantine dsclean made (its marker), else None."""
    from ..formats import format_of_name
    from .discover import QUARANTINE_MARKER

    if not os.path.isdir(folder) or os.path.lexists(os.path.join(folder, QUARANTINE_MARKER)):
        return None
    for path, _, files in os.walk(folder):
        for name in files:
            if format_of_name(name):
                return os.path.join(path, name)
    return None


def _refuse_read_only(root: str, report_dir: str) -> None:
    """A quarantining scan of a read-only root could move nothing: say so before checking a single file."""
    try:
        read_only = bool(os.statvfs(root).f_flag & os.ST_RDONLY)
    except OSError:
        return
    if read_only:
        raise UserError(
            f"{root} is on a read-only file system: bad files cannot be moved out of it. Run "
            f"dsclean scan --dry-run to check and report only (results go to {report_dir}), "
            "or remount it read-write to quarantine"
        )


#: at most this many folders under ROOT are remembered for the emptied-class check (one per class)
MAX_FOLDERS_TRACKED = 10_000


def _emptied(root: str, folders: set[str]) -> list[str]:
    """The ``folders`` (directly under ``root``) that hold no media file now; each walk stops at its first one."""
    from ..formats import format_of_name

    emptied = []
    for folder in sorted(folders):
        path = os.path.join(root, folder)
        if not os.path.isdir(path):
            continue
        if not any(format_of_name(name) for _, _, files in os.walk(path) for name in files):
            emptied.append(folder)
    return emptied


def _link_notes(d: DiscoverStats) -> list[str]:
    notes = []
    if d.outside_links:
        notes.append(
            f"{d.outside_links:,} symlinks lead outside ROOT and were not followed "
            "(--symlinks all follows them, e.g. a symlink farm)"
        )
    if d.loops:
        notes.append(f"{d.loops:,} linked folders were already visited (a loop or a second link) and were skipped")
    if d.excluded_dirs:
        notes.append(
            f"{d.excluded_dirs:,} folders inside ROOT were left out of the scan: dsclean's own (quarantine, "
            "reports, a .dsclean state folder of an older version)"
        )
    return notes


def in_part(rel: str, part: tuple[int, int]) -> bool:
    """Whether part ``(i, n)`` checks ``rel``: a stable hash of the path's bytes, mod n.

    The same on every machine and run, independent of listing order, so the
    tasks of a job array need no coordination.
    """
    i, n = part
    return zlib.crc32(encode_path(rel)) % n == i


def valid_part(part: tuple[int, int] | None) -> tuple[int, int] | None:
    if part is not None and not (part[1] >= 1 and 0 <= part[0] < part[1]):
        raise UserError(f"--shard {part[0]}/{part[1]}: need 0 <= I < N")
    return part


def _stat_if_cached(
    root: str,
    rels: list[str],
    rows: dict[str, tuple],
    identities: dict[bytes, tuple[int, int]] | None = None,
    stats: dict[str, tuple[int, int, int, int]] | None = None,
) -> dict[str, tuple]:
    """The cached rows whose file still has the recorded size and mtime: one ``stat`` per file the cache
    knows, none for the others (a first scan stats nothing here: the worker's ``fstat`` gives size and mtime).

    ``identities`` (quarantining scans): every file is stat'ed, and its ``(inode, device)`` kept until
    its verdict is handled, so a file replaced between its check and its move is recognised
    (bounded: the files in flight). ``stats``: ``rel -> (size, mtime_ns, inode, device)`` of files
    already stat'ed in this batch (not stat'ed again).
    """
    prefix = root.rstrip(os.sep) + os.sep
    hits = {}
    for rel in rels if identities is not None else rows:
        st = stats.get(rel) if stats else None
        if st is None:
            try:
                s = os.stat(prefix + rel)
            except OSError:
                continue  # vanished since listing: checked (-> vanished)
            st = (s.st_size, s.st_mtime_ns, s.st_ino, s.st_dev)
            if stats is not None:
                stats[rel] = st  # a later lookup in this batch (a related cache) does not stat it again
        if identities is not None:
            identities[encode_path(rel)] = st[2:]
        row = rows.get(rel)
        if row is not None and row[_SIZE] == st[0] and row[_MTIME] == st[1]:
            hits[rel] = row
    return hits


def _skip_cached(
    root: str,
    media: Iterator[list[str]],
    cache: ScanCache | None,
    sink: "_Sink",
    chunk_size: int,
    stop: StopRequest,
    chunk_bytes: int = 0,
    identities: dict[bytes, tuple[int, int]] | None = None,
    previous: PreviousResults | None = None,
    force: frozenset[str] = frozenset(),
    related: list[RelatedCache] | None = None,
) -> Iterator[list[str]]:
    """Chunks of files to check: verdicts still valid are handled right here instead.

    First the ``ok`` rows of the previous results (``previous``, matched in Arrow), then the scan
    cache for the rest (bad and warn verdicts, files the previous results lack), then the ``related``
    caches (a scanned parent's, a split's: :mod:`.related`) for what is still left.
    Stops at a signal too: a long run of cached files yields no chunk to check.
    """
    prefix = root.rstrip(os.sep) + os.sep
    chunk: list[str] = []
    for batch in _batches(media, 2000):
        if stop.signum:
            return
        stats: dict[str, tuple[int, int, int, int]] = {}
        forced = [rel for rel in batch if rel in force] if force else []
        if forced:  # failed in training: checked again, whatever the cache and the previous results say
            sink.summary.training_rechecked += len(forced)
            batch = [rel for rel in batch if rel not in force]
        rest = batch  # files the previous results cannot vouch for
        if previous is not None:
            keys = [rel.encode(_FS_ENCODING, "surrogateescape") for rel in batch]  # encode_path, inlined
            table, at, seen = previous.match(prefix, batch, keys, stats)
            if at:
                if identities is not None:  # a row moved for a quality flag is moved only if still that file
                    identities.update((keys[i], (st.st_ino, st.st_dev)) for i, st in zip(at, seen))
                sink.handle_reused(table, previous.flags_same)
                if identities:
                    for i in at:
                        identities.pop(keys[i], None)
                if cache is not None:
                    cache.hits += len(at)
                done = frozenset(at)
                rest = [rel for i, rel in enumerate(batch) if i not in done] if len(done) < len(batch) else []
        cached = cache.rows_of(rest) if cache is not None and rest else {}
        hits = _stat_if_cached(root, rest, cached, identities, stats) if cached or identities is not None else {}
        if cache is not None:
            cache.hits += len(hits)
        sink.handle_cached(hits)
        todo = [rel for rel in rest if rel not in hits] if hits else rest
        for other in related or ():
            found = other.rows_of(todo) if todo else {}
            more = _stat_if_cached(root, todo, found, None, stats) if found else {}
            if more:
                other.hits += len(more)
                sink.handle_cached(more)
                todo = [rel for rel in todo if rel not in more]
        if forced:
            todo = forced + todo
        at = 0
        while at < len(todo):  # chunks of the size wanted when each one starts
            want = sink.chunk_files(chunk_size, chunk_bytes)
            take = max(0, want - len(chunk))
            chunk += todo[at : at + take]
            at += take
            if len(chunk) >= want:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _open_cache(root: str, report_dir: str, options: ScanOptions, summary: ScanSummary, tag: str) -> ScanCache | None:
    """The root's scan cache (in its state folder), else one in the report folder, else none (with a note).

    Each part has its own cache folder: a part's segments are compacted by that part's
    runs alone (parts may run on different machines over a network file system).
    """
    if not options.use_cache:
        return None
    reasons = []
    try:
        folders = [locations.make_root_state_dir(root, options.state_dir), report_dir]
    except OSError as exc:
        reasons.append(f"{exc.filename or summary.state_dir}: {exc.strerror or exc}")
        folders = [report_dir]
    for folder in folders:
        try:
            os.makedirs(folder, exist_ok=True)
            return ScanCache(os.path.join(folder, locations.tagged(locations.CACHE_FILE, tag)), options.check)
        except OSError as exc:
            reasons.append(f"{folder}: {getattr(exc, 'strerror', None) or exc}")
    summary.notes.append(f"scan cache disabled ({'; '.join(reasons)}); the next scan will check every file again")
    return None


def _open_writer(report_dir: str, tag: str, meta: dict) -> ResultsWriter:
    try:
        return ResultsWriter(report_dir, tag=tag, meta=meta)
    except OSError as exc:
        raise UserError(f"report folder {report_dir} is not writable: {exc.strerror or exc}") from exc


def _with_rows(batch: "pa.RecordBatch", rows: dict[int, Verdict]) -> "pa.RecordBatch":
    """The batch with the fields of those rows replaced by their verdicts' (all but the path)."""
    import pyarrow as pa

    cols = [col.to_pylist() for col in batch.columns]
    for i, v in rows.items():
        for col, value in zip(cols[1:], tuple(vars(v).values())[1:]):
            col[i] = value
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, SCHEMA)], schema=SCHEMA)


_KIND, _STATUS, _SIZE, _MTIME, _FLAGS = (FIELDS.index(f) for f in ("kind", "status", "size", "mtime_ns", "flags"))
#: fresh verdicts are buffered as the workers' batches and become one Arrow table (results + scan cache) every
#: this many verdicts or seconds: the scan cache's commit interval
FRESH_ROWS, FRESH_SECONDS = 5000, 2.0


@dataclass
class _Sink:
    """Where each verdict goes: counts, quarantine (if bad), results, cache, progress bar."""

    summary: ScanSummary
    writer: ResultsWriter
    quarantine: Quarantine | None
    cache: ScanCache | None
    progress: object | None
    flag_options: FlagOptions | None = None  # None: the scan takes no facts, so no flags
    quarantine_flags: frozenset[str] = frozenset()
    _shown: int = 0  # files the progress bar has been told about
    #: quarantining scans: path bytes -> (inode, device) seen before the check, until the verdict is handled
    identities: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    _fresh: list = field(default_factory=list)  # record batches of fresh verdicts not yet written
    _fresh_rows: int = 0
    _moved: list[bytes] = field(default_factory=list)  # paths in _fresh moved now (never cached)
    #: the folders directly under ROOT this run moved files out of (one per class, at most MAX_FOLDERS_TRACKED)
    moved_from: set[str] = field(default_factory=set)
    _flushed: float = field(default_factory=time.monotonic)
    force: frozenset[str] = frozenset()  # files that failed in training (their bad verdicts are counted)

    def handle(self, v: Verdict, *, fresh: bool) -> None:
        s = self.summary
        ino_dev = self.identities.pop(encode_path(v.path), None) if self.identities else None
        if self.flag_options is not None:
            v.flags = facts_of.flags_of(v, self.flag_options)
            for flag in v.flags or ():
                s.flags[flag] = s.flags.get(flag, 0) + 1
        extra = self._quarantine(v, ino_dev) if v.status == R.BAD else None  # may turn it warn/changed
        if v.status != R.BAD:
            extra = self._quarantine_flagged(v, ino_dev) or extra
        s.files += 1
        s.bytes += v.size or 0
        by_status = s.counts.setdefault(v.kind, {})
        by_status[v.status] = by_status.get(v.status, 0) + 1
        moved = bool(extra and "quarantined_as" in extra)
        if moved and self.cache is not None:
            # a tombstone, fresh verdict or not: an older row of this path (same size and mtime: bit rot a
            # --rescan found) must not answer for the file if it is put back (restore, a backup)
            self.cache.forget(v.path)
        if not fresh:
            s.cached += 1
        else:
            s.checked_bytes += v.size or 0
            if self.cache is not None and not moved:
                self.cache.add(v)
        if v.status == R.BAD:
            s.bad_reasons[v.reason or "?"] = s.bad_reasons.get(v.reason or "?", 0) + 1
        elif v.status == R.WARN:
            s.warn_reasons[v.reason or "?"] = s.warn_reasons.get(v.reason or "?", 0) + 1
        self.writer.add(v, extra)
        self._tick()

    def handle_chunk(self, chunk: Chunk) -> None:
        """Fresh verdicts of a chunk, as the Arrow batch its worker built: counted and buffered in bulk;
        only the rows that need action (not ok, or moved for a quality flag) become Verdict objects."""
        s, batch = self.summary, chunk.batch
        special = chunk.not_ok
        if self.flag_options is not None:  # flags from the facts, with this scan's thresholds
            import pyarrow as pa

            inputs = zip(*(batch.column(name).to_pylist() for name in facts_of.FLAG_INPUTS))
            flags = [self._flags_of(row) for row in inputs]
            batch = batch.set_column(_FLAGS, SCHEMA.field(_FLAGS), pa.array(flags, SCHEMA.field(_FLAGS).type))
            if self.quarantine_flags:
                special = sorted(
                    {*special, *(i for i, f in enumerate(flags) if f and self.quarantine_flags.intersection(f))}
                )
        ids = [self.identities.pop(p, None) for p in batch.column(0).to_pylist()] if self.identities else None
        changed: dict[int, Verdict] = {}
        not_ok = frozenset(chunk.not_ok)
        rows = ()
        if special:  # batch.take(special), without importing pyarrow.compute (see schema.call_function)
            import pyarrow as pa

            rows = call_function("take", [batch, pa.array(special, pa.int64())]).to_pylist()
        for i, row in zip(special, rows):
            v = verdict_of_row(tuple(row.values()))
            ino_dev = ids[i] if ids else None
            extra = self._quarantine(v, ino_dev) if v.status == R.BAD else None  # may turn it warn/changed
            if v.status != R.BAD:
                extra = self._quarantine_flagged(v, ino_dev) or extra
            if v.status == R.BAD:
                s.bad_reasons[v.reason or "?"] = s.bad_reasons.get(v.reason or "?", 0) + 1
                if self.force and v.path in self.force:
                    s.training_bad += 1
            elif v.status == R.WARN:
                s.warn_reasons[v.reason or "?"] = s.warn_reasons.get(v.reason or "?", 0) + 1
            if i in not_ok or v.status != R.OK:  # the ok rows are counted by the worker (chunk.ok_kinds)...
                by_status = s.counts.setdefault(v.kind, {})
                by_status[v.status] = by_status.get(v.status, 0) + 1
                if i not in not_ok:  # ...but this one, ok for the worker, is not ok now (replaced before its move)
                    by_status[R.OK] = by_status.get(R.OK, 0) - 1
            if extra and "quarantined_as" in extra:
                self._moved.append(row["path"])  # moved now: not cached, so a file put back later is checked again
            if v.status != row["status"]:  # e.g. bad -> warn/changed: not moved, not cached
                changed[i] = v
            if v.status != R.OK or extra:
                self.writer.add_problem(v, extra)
        if changed:  # rare (a file replaced between its check and its move): the batch again, with those rows
            batch = _with_rows(batch, changed)
        for kind, n in chunk.ok_kinds.items():
            by_status = s.counts.setdefault(kind, {})
            by_status[R.OK] = by_status.get(R.OK, 0) + n
        s.files += batch.num_rows
        s.bytes += chunk.size
        s.checked_bytes += chunk.size
        self._fresh.append(batch)
        self._fresh_rows += batch.num_rows
        if self._fresh_rows >= FRESH_ROWS or time.monotonic() - self._flushed > FRESH_SECONDS:
            self.flush_fresh()
        self._tick()

    def flush_fresh(self) -> None:
        """The buffered fresh verdicts as one Arrow table, into the results and the scan cache.

        This is the cache's commit point too: every :data:`FRESH_ROWS` verdicts or
        :data:`FRESH_SECONDS`, so a kill -9 costs at most that many re-checks.
        """
        self._flushed = time.monotonic()
        if not self._fresh:
            return
        import pyarrow as pa

        # one chunk per column: Parquet and the cache's IPC write many small chunks slower than one
        table = pa.Table.from_batches(self._fresh, SCHEMA).combine_chunks()
        self._fresh, self._fresh_rows = [], 0
        self.writer.add_table(table)
        if self.cache is not None:
            self.cache.add_batch(table, skip=self._moved)
            for key in self._moved:  # tombstones: an older row of a moved path must not come back (see handle)
                self.cache.forget(os.fsdecode(key))
        self._moved = []

    def _flags_of(self, inputs: tuple) -> list[str] | None:
        """The flags of one fresh verdict (from its :data:`~dsclean.scanning.facts.FLAG_INPUTS`), counted."""
        flags = facts_of.flags_from(*inputs, self.flag_options)
        for flag in flags or ():
            self.summary.flags[flag] = self.summary.flags.get(flag, 0) + 1
        return flags

    def _quarantine_flagged(self, v: Verdict, ino_dev: tuple[int, int] | None = None) -> dict | None:
        """Move a file carrying a flag of ``--quarantine-flags`` (reason ``flagged``); None if it has none."""
        if not (self.quarantine_flags and v.flags):
            return None
        hit = next((f for f in v.flags if f in self.quarantine_flags), None)
        if hit is None:
            return None
        s = self.summary
        if self.quarantine is None:
            s.flag_quarantined += 1  # would be moved (dry run, or no --quarantine): listed in the problems file
            return {"would_quarantine": R.FLAGGED, "flag": hit}
        extra = self._quarantine(v, ino_dev, R.FLAGGED, f"quality flag {hit} (--quarantine-flags)")
        s.flag_quarantined += 1 if "quarantined_as" in (extra or {}) else 0
        return extra

    def chunk_files(self, most: int, chunk_bytes: int) -> int:
        """Files per task: about ``chunk_bytes`` of files at the mean size checked so far, 1 to ``most``.

        Many small files per task keep the per-task cost (futures, pipes, wake-ups) off each
        file; few large ones keep tasks short, so the workers stay evenly busy to the end.
        Until the first verdicts are back, 16.
        """
        s = self.summary
        fresh = s.files - s.cached
        if not chunk_bytes or not fresh:
            return min(most, 16) if chunk_bytes else most
        mean = s.checked_bytes / fresh
        return max(1, min(most, int(chunk_bytes / mean) if mean > 0 else most))

    def handle_cached(self, rows: dict[str, tuple]) -> None:
        """Verdicts from the cache: ``ok`` rows go straight to the results, the rest through :meth:`handle`."""
        s, counts = self.summary, Counter()
        for rel, row in rows.items():
            if row[2] != R.OK:
                self.handle(row_to_verdict(rel, row), fresh=False)
                continue
            if self.flag_options is not None:  # flags are derived from the cached facts, with today's thresholds
                flags = facts_of.flags_from(*_FLAG_INPUTS(row), self.flag_options)
                if flags and self.quarantine_flags.intersection(flags):
                    self.handle(row_to_verdict(rel, row), fresh=False)  # moved: the verdict's own path
                    continue
                for flag in flags or ():
                    s.flags[flag] = s.flags.get(flag, 0) + 1
                row = (*row[:-1], flags)
            if self.identities:
                self.identities.pop(row[0], None)
            counts[row[1]] += 1
            s.bytes += row[5]
            self.writer.add_row(row)
        for kind, n in counts.items():
            by_status = s.counts.setdefault(kind, {})
            by_status[R.OK] = by_status.get(R.OK, 0) + n
        n = sum(counts.values())
        s.files += n
        s.cached += n
        self._tick()

    def handle_reused(self, table: "pa.Table", flags_same: bool) -> None:
        """``ok`` rows of the previous results for unchanged files, in Arrow: counted and written in bulk.

        The flags column is kept when it was computed with today's thresholds, else recomputed
        from the facts; a row carrying a flag of ``--quarantine-flags`` goes through :meth:`handle`.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        s = self.summary
        if self.flag_options is not None:
            if not flags_same:  # thresholds changed since: the flags again, from the stored facts
                inputs = zip(*(table[name].to_pylist() for name in facts_of.FLAG_INPUTS))
                flags = [facts_of.flags_from(*row, self.flag_options) for row in inputs]
                table = table.set_column(
                    table.schema.get_field_index("flags"), "flags", pa.array(flags, table.schema.field("flags").type)
                )
            if self.quarantine_flags:
                table = table.combine_chunks()  # list_parent_indices counts per chunk
                flat = pc.list_flatten(table["flags"])
                hit = pc.is_in(flat, pa.array(sorted(self.quarantine_flags), pa.string()))
                rows = set(pc.filter(pc.list_parent_indices(table["flags"]), hit).to_pylist())
                if rows:
                    moved = pa.array([i in rows for i in range(table.num_rows)])
                    for row in table.filter(moved).to_pylist():
                        self.handle(verdict_of_row(tuple(row.values())), fresh=False)
                    table = table.filter(pc.invert(moved))
            for item in pc.value_counts(pc.list_flatten(table["flags"])).to_pylist():
                s.flags[item["values"]] = s.flags.get(item["values"], 0) + item["counts"]
        for item in pc.value_counts(table["kind"]).to_pylist():
            by_status = s.counts.setdefault(item["values"], {})
            by_status[R.OK] = by_status.get(R.OK, 0) + item["counts"]
        s.files += table.num_rows
        s.cached += table.num_rows
        s.bytes += pc.sum(table["size"]).as_py() or 0
        self.writer.add_table(table)
        self._tick()

    def _tick(self) -> None:
        """Move the progress bar every 64 files (tqdm calls are not free)."""
        if self.progress is not None and self.summary.files - self._shown >= 64:
            self.progress.set_postfix(bad=self.summary.bad, refresh=False)
            self.progress.update(self.summary.files - self._shown)
            self._shown = self.summary.files

    def _quarantine(
        self, v: Verdict, ino_dev: tuple[int, int] | None = None, reason: str | None = None, detail: str | None = None
    ) -> dict | None:
        if self.quarantine is None:
            self.summary.would_quarantine += 1
            return None
        from .quarantine.moves import ChangedError  # loaded with the quarantine (scan)

        expect = (v.size, v.mtime_ns, *(ino_dev or (None, None)))
        try:
            dst = self.quarantine.move(
                v.path, reason or v.reason, detail=detail or v.detail, kind=v.kind, expect=expect
            )
        except ChangedError as exc:  # replaced or rewritten since its check: the verdict is about other bytes
            seen = f"{v.reason}: {v.detail}" if v.detail else str(v.reason)
            v.status, v.reason, v.content_hash = R.WARN, R.CHANGED, None
            v.detail = f"{exc.strerror}; the check saw: {seen}"
            return None
        except OSError as exc:
            s = self.summary
            error = exc.strerror or str(exc)
            msg = f"{v.path}: could not quarantine: {error}"
            s.move_failures += 1
            s.move_failure_reasons[error] = s.move_failure_reasons.get(error, 0) + 1
            if len(s.move_errors) < MAX_LISTED:
                s.move_errors.append(msg)
            return {"quarantine_error": msg}
        self.summary.quarantined += 1
        top, sep, _ = v.path.partition("/")
        if sep and len(self.moved_from) < MAX_FOLDERS_TRACKED:
            self.moved_from.add(top)
        return {"quarantined_as": dst}

    def close_progress(self) -> None:
        if self.progress is not None:
            self.progress.set_postfix(bad=self.summary.bad, refresh=False)
            self.progress.update(self.summary.files - self._shown)
            self.progress.close()


def _progress_bar(options: ScanOptions):
    import sys

    show = options.progress if options.progress is not None else sys.stderr.isatty()
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(unit=" files", desc="checking", mininterval=0.5, smoothing=0.1, dynamic_ncols=True)


def _write_summary(report_dir: str, summary: ScanSummary, tag: str) -> str:
    path = os.path.join(report_dir, locations.tagged(locations.SUMMARY_FILE, tag))
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(summary.to_json(), f, indent=2)
    return path


def move_failure_line(s: ScanSummary) -> str:
    """``73 of 93 moves failed: Read-only file system`` (errors with counts when there are several)."""
    attempts = s.quarantined + s.move_failures
    reasons = s.move_failure_reasons
    why = (
        next(iter(reasons)) if len(reasons) == 1 else ", ".join(f"{n:,} {r}" for r, n in Counter(reasons).most_common())
    )
    return f"{s.move_failures:,} of {attempts:,} moves failed: {why}"


def format_summary(s: ScanSummary) -> str:
    """The human summary printed at the end of ``dsclean scan``."""
    lines = []
    mb = s.bytes / 1e6
    checked = s.files - s.cached
    if checked:  # MB/s of what was decoded: cached verdicts cost a stat, not a decode
        rate = (
            f"{s.files_per_s:,.1f} files/s, {s.checked_bytes / 1e6 / s.elapsed if s.elapsed else 0:,.1f} MB/s decoded"
        )
    else:
        rate = "every verdict from the scan cache, nothing decoded" if s.files else "nothing to check"
    head = "Scan INTERRUPTED after" if s.interrupted else "Scanned"
    if s.shard is not None:
        head += f" (part {s.shard[0]}/{s.shard[1]})"
    lines.append(f"{head} {s.files:,} files ({mb:,.1f} MB) in {s.elapsed:.1f} s ({rate}, {s.jobs} jobs)")
    for kind in sorted(s.counts):
        c = s.counts[kind]
        lines.append(f"  {kind:<6} " + ", ".join(f"{c.get(st, 0):,} {st}" for st in R.STATUSES))
    if s.splits:
        lines.append(
            "Splits: "
            + "; ".join(
                f"{name} {c['files']:,} files ({c['bad']:,} bad, {c['warn']:,} warn)" for name, c in s.splits.items()
            )
            + f" (index them with dsclean index {s.root}/{next(iter(s.splits))} or dsclean index {s.root} --splits)"
        )
    for title, table in (("Bad files by reason", s.bad_reasons), ("Warnings by reason", s.warn_reasons)):
        if table:
            lines.append(f"{title}:")
            lines += [f"  {reason:<20} {n:,}" for reason, n in Counter(table).most_common()]
    if s.distributions:
        from .norm import format_distributions

        lines.append("The set (distributions; the minority outside its norm is warned about, --minority):")
        lines += format_distributions(s.distributions, s.norm_flagged)
    if s.flags:
        lines.append(
            "Quality flags (not verdicts): " + ", ".join(f"{f} {n:,}" for f, n in Counter(s.flags).most_common())
        )
    if s.flag_quarantined:
        verb = "quarantined" if s.quarantine and not s.dry_run else "would be quarantined"
        lines.append(f"  {s.flag_quarantined:,} flagged files {verb} (--quarantine-flags; reason flagged)")
    if s.cached:
        lines.append(f"Re-used {s.cached:,} verdicts of unchanged files from the scan cache (--rescan checks all)")
    if s.training_rechecked:
        moved = "quarantined" if s.quarantine and not s.dry_run else "would be quarantined"
        lines.append(
            f"Re-checked {s.training_rechecked:,} files that failed in training: {s.training_bad:,} bad "
            f"({moved}), {s.training_rechecked - s.training_bad:,} ok"
        )
    if s.quarantine and not s.dry_run:
        lines.append(f"Quarantined {s.quarantined:,} files into {s.quarantine}")
        q = s.quarantine_state or {}
        if q.get("moved", 0) != s.quarantined:
            by = ", ".join(f"{r} {n:,}" for r, n in q.get("by_reason", {}).items())
            lines.append(
                f"The quarantine now holds {q.get('moved', 0):,} files of all runs ({by}); "
                f"all are listed in {s.problems_path}"
            )
    elif s.would_quarantine:
        lines.append(
            f"Would quarantine {s.would_quarantine:,} bad files"
            + (" (dry run: nothing moved)" if s.dry_run else " (no --quarantine given)")
        )
    if s.recovered and any(s.recovered.values()):
        lines.append(f"Recovered an interrupted earlier run: {s.recovered}")
    if s.move_failures:
        lines.append(
            f"INCOMPLETE: {move_failure_line(s)}; every failed path is in {s.problems_path} (field quarantine_error)"
        )
        lines += [f"  error: {msg}" for msg in s.move_errors[:20]]
        if s.move_failures > 20:
            lines.append(f"  ... and {s.move_failures - 20:,} more")
    d = s.discovery
    skipped = [
        (d.ignored, "non-media files"),
        (d.hidden, "hidden (--include-hidden)"),
        (d.symlinks, "symlinks not followed (--symlinks inside|all)"),
        (d.outside_links, "symlinks leading outside ROOT"),
        (d.dir_errors, "unreadable folders"),
    ]
    if any(n for n, _ in skipped):
        lines.append("Not checked: " + ", ".join(f"{n:,} {what}" for n, what in skipped if n))
    lines += [f"  unreadable folder: {e}" for e in d.first_errors]
    lines += [f"note: {n}" for n in s.notes]
    lines.append(f"Results: {s.results_path}")
    lines.append(f"Problems (bad and warn): {s.problems_path}")
    return "\n".join(lines)
