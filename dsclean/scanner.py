"""The scan: discover -> check (parallel) -> verdicts -> quarantine, streamed end to end.

Discovery yields paths lazily; they are cut into chunks and handed to joblib
(loky processes) a few chunks ahead of the workers, results come back in
completion order, and each verdict is written and (if bad) quarantined as it
arrives. Nothing holds a per-file object beyond the chunks in flight and one
results row group, so memory stays flat for 10 million files.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator

from . import locations
from . import reasons as R
from .atomic import atomic_output
from .check import CheckOptions
from .executors import run_checks
from .discover import DiscoverStats, iter_media
from .errors import UserError
from .quarantine import Quarantine
from .results import ResultsWriter
from .verdict import Verdict


@dataclass(frozen=True)
class ScanOptions:
    """Everything ``dsclean scan`` can be told. The defaults are the CLI's."""

    jobs: int = 0  # 0 = all usable cores (affinity and cgroup quota aware)
    check: CheckOptions = CheckOptions()
    quarantine: str | None = None
    report_dir: str | None = None  # default: the quarantine folder, else <root>/.dsclean
    dry_run: bool = False  # decide and report, move nothing
    include_hidden: bool = False
    follow_symlinks: bool = False
    chunk_size: int = 32  # files per task sent to a worker
    backend: str = "loky"  # "loky" (processes, crash/timeout isolation) or "threads"
    progress: bool | None = None  # None = only when stderr is a terminal


@dataclass
class ScanSummary:
    """Counts and locations of one scan; what the CLI prints at the end."""

    root: str
    files: int = 0
    bytes: int = 0
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> status -> n
    bad_reasons: dict[str, int] = field(default_factory=dict)
    warn_reasons: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0
    would_quarantine: int = 0
    move_errors: list[str] = field(default_factory=list)
    recovered: dict[str, int] = field(default_factory=dict)
    discovery: DiscoverStats = field(default_factory=DiscoverStats)
    elapsed: float = 0.0
    jobs: int = 1
    results_path: str = ""
    problems_path: str = ""
    quarantine: str | None = None
    dry_run: bool = False
    interrupted: bool = False
    signal: int = 0  # the signal that stopped the scan (SIGINT / SIGTERM), 0 if none
    notes: list[str] = field(default_factory=list)

    @property
    def bad(self) -> int:
        return sum(self.bad_reasons.values())

    @property
    def files_per_s(self) -> float:
        return self.files / self.elapsed if self.elapsed > 0 else 0.0

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(bad=self.bad, files_per_s=round(self.files_per_s, 1))
        return d


def usable_cores() -> int:
    """Cores this process may use: affinity mask and cgroup CPU quota, not just os.cpu_count()."""
    from joblib import cpu_count

    return max(1, cpu_count(only_physical_cores=False))


def _chunks(paths: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(paths)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


class _StopRequest:
    """Signal handler that asks the scan loop to stop between chunks; a second signal stops at once."""

    def __init__(self) -> None:
        self.signum = 0

    def __call__(self, signum: int, frame: object) -> None:
        if self.signum:
            raise KeyboardInterrupt
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[_StopRequest]:
    """While scanning, SIGINT/SIGTERM finish the verdict in hand (its move and its row), then stop.

    Raising KeyboardInterrupt at an arbitrary instruction could land between a
    file's quarantine move and the write of its verdict; a flag checked by the
    loop cannot.
    """
    stop = _StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # signals are delivered to the main thread only; nothing to install
        return
    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def validate_root(root: str) -> str:
    """The root as an absolute path, or a :class:`UserError` saying what is wrong with it."""
    if not os.path.lexists(root):
        raise UserError(f"scan root {root} does not exist")
    if not os.path.isdir(root):
        raise UserError(f"scan root {root} is a file, not a folder" if os.path.exists(root) else f"scan root {root} is a broken symlink")
    if not os.access(root, os.R_OK | os.X_OK):
        raise UserError(f"scan root {root} cannot be listed: permission denied")
    return os.path.abspath(root)


def scan(root: str, options: ScanOptions = ScanOptions()) -> ScanSummary:
    """Check every media file under ``root``; write results; quarantine bad files unless dry-run."""
    root = validate_root(root)
    jobs = options.jobs or usable_cores()
    quarantine_dir = os.path.abspath(options.quarantine) if options.quarantine else None
    report_dir = os.path.abspath(
        options.report_dir or locations.default_report_dir(root, None if options.dry_run else quarantine_dir)
    )
    summary = ScanSummary(root=root, jobs=jobs, quarantine=quarantine_dir, dry_run=options.dry_run)
    quarantine = Quarantine(quarantine_dir, root) if quarantine_dir and not options.dry_run else None
    if quarantine is not None:
        rec = quarantine.recovery
        summary.recovered = {"completed": rec.completed, "reverted": rec.reverted}
        summary.notes += rec.refused + rec.bad_lines
    try:
        writer = _open_writer(report_dir)
    except BaseException:
        if quarantine is not None:
            quarantine.close()
        raise
    progress = _progress_bar(options)
    start = time.perf_counter()
    try:
        excluded = [d for d in (quarantine_dir, report_dir) if d]
        paths = (
            rel
            for rel, _ in iter_media(
                root,
                exclude=excluded,
                include_hidden=options.include_hidden,
                follow_symlinks=options.follow_symlinks,
                stats=summary.discovery,
            )
        )
        with _stop_on_signals() as stop:
            checks = run_checks(root, _chunks(paths, options.chunk_size), options.check, jobs, options.backend)
            for verdicts in checks:
                for v in verdicts:
                    _handle(v, summary, writer, quarantine)
                if progress is not None:
                    progress.update(len(verdicts))
                    progress.set_postfix(bad=summary.bad, refresh=False)
                if stop.signum:
                    checks.close()  # cancel queued chunks; workers finish or are dropped
                    break
        summary.signal = stop.signum
    except KeyboardInterrupt:
        summary.signal = signal.SIGINT  # a second Ctrl-C: stop now, still keep what was decided
    finally:
        summary.interrupted = bool(summary.signal)
        summary.elapsed = time.perf_counter() - start
        if progress is not None:
            progress.close()
        writer.close()
        if quarantine is not None:
            quarantine.close()
    summary.results_path, summary.problems_path = writer.results_path, writer.problems_path
    _write_summary(report_dir, summary)
    _point_root_at(root, report_dir, summary)
    return summary


def _open_writer(report_dir: str) -> ResultsWriter:
    try:
        return ResultsWriter(report_dir)
    except OSError as exc:
        raise UserError(f"report folder {report_dir} is not writable: {exc.strerror or exc}") from exc


def _handle(v: Verdict, summary: ScanSummary, writer: ResultsWriter, quarantine: Quarantine | None) -> None:
    """Count one verdict, quarantine it if bad, write it."""
    summary.files += 1
    summary.bytes += v.size or 0
    by_status = summary.counts.setdefault(v.kind, {})
    by_status[v.status] = by_status.get(v.status, 0) + 1
    extra = None
    if v.status == R.BAD:
        summary.bad_reasons[v.reason or "?"] = summary.bad_reasons.get(v.reason or "?", 0) + 1
        if quarantine is not None:
            try:
                extra = {"quarantined_as": quarantine.move(v.path, v.reason)}
                summary.quarantined += 1
            except OSError as exc:
                msg = f"{v.path}: could not quarantine: {exc.strerror or exc}"
                summary.move_errors.append(msg)
                extra = {"quarantine_error": msg}
        else:
            summary.would_quarantine += 1
    elif v.status == R.WARN:
        summary.warn_reasons[v.reason or "?"] = summary.warn_reasons.get(v.reason or "?", 0) + 1
    writer.add(v, extra)


def _progress_bar(options: ScanOptions):
    import sys

    show = options.progress if options.progress is not None else sys.stderr.isatty()
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(unit=" files", desc="checking", mininterval=0.5, smoothing=0.1, dynamic_ncols=True)


def _write_summary(report_dir: str, summary: ScanSummary) -> None:
    with atomic_output(os.path.join(report_dir, locations.SUMMARY_FILE)) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(summary.to_json(), f, indent=2)


def _point_root_at(root: str, report_dir: str, summary: ScanSummary) -> None:
    """Record in ``<root>/.dsclean/last_scan.json`` where this scan's results are (for ``dsclean index``)."""
    state = locations.state_dir(root)
    pointer = {
        "results": summary.results_path,
        "problems": summary.problems_path,
        "quarantine": summary.quarantine,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        os.makedirs(state, exist_ok=True)
        with atomic_output(os.path.join(state, locations.LAST_SCAN_FILE)) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(pointer, f, indent=2)
    except OSError as exc:
        summary.notes.append(f"could not record the results location in {state}: {exc.strerror or exc}")


def format_summary(s: ScanSummary) -> str:
    """The human summary printed at the end of ``dsclean scan``."""
    lines = []
    mb = s.bytes / 1e6
    rate = f"{s.files_per_s:,.1f} files/s, {mb / s.elapsed if s.elapsed else 0:,.1f} MB/s"
    head = "Scan INTERRUPTED after" if s.interrupted else "Scanned"
    lines.append(f"{head} {s.files:,} files ({mb:,.1f} MB) in {s.elapsed:.1f} s ({rate}, {s.jobs} jobs)")
    for kind in sorted(s.counts):
        c = s.counts[kind]
        lines.append(f"  {kind:<6} " + ", ".join(f"{c.get(st, 0):,} {st}" for st in R.STATUSES))
    for title, table in (("Bad files by reason", s.bad_reasons), ("Warnings by reason", s.warn_reasons)):
        if table:
            lines.append(f"{title}:")
            lines += [f"  {reason:<20} {n:,}" for reason, n in Counter(table).most_common()]
    if s.quarantine and not s.dry_run:
        lines.append(f"Quarantined {s.quarantined:,} files into {s.quarantine}")
    elif s.would_quarantine:
        lines.append(f"Would quarantine {s.would_quarantine:,} bad files" + (" (dry run: nothing moved)" if s.dry_run else " (no --quarantine given)"))
    if s.recovered and any(s.recovered.values()):
        lines.append(f"Recovered an interrupted earlier run: {s.recovered}")
    for msg in s.move_errors[:20]:
        lines.append(f"  error: {msg}")
    d = s.discovery
    lines.append(
        f"Not checked: {d.ignored:,} non-media files, {d.hidden:,} hidden, {d.symlinks:,} symlinks not followed, "
        f"{d.excluded_dirs:,} quarantine/report folders, {d.dir_errors:,} unreadable folders"
    )
    lines += [f"  unreadable folder: {e}" for e in d.first_errors]
    lines += [f"note: {n}" for n in s.notes]
    lines.append(f"Results: {s.results_path}")
    lines.append(f"Problems (bad and warn): {s.problems_path}")
    return "\n".join(lines)
