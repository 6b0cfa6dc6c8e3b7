"""``scan_shard_set`` and ``verify_shard_set``: every sample of another tool's shards, checked and named.

The shards are read by the workers, a shard (or a part of a tar) a task (:func:`check_tars`,
:mod:`.tartasks`): the worker opens it (a local file; an object streamed from the store; an MDS shard or
litdata chunk with the library's reader, from a temp copy), walks it with its format's reader (which
yields :mod:`.events`) and checks its samples' bytes in the scan's isolated pool: the same checker, time
limit, memory ceiling and crash isolation as files on disk. This process reads only an MDS or litdata
``index.json`` (the shard list). ``backend="dask"`` (``scheduler``): each task runs on a Dask worker,
which reads the shard from the store (or the shared folder) itself. A scan writes the results table
and problems list (outside the shards: the state folder, or ``--report``) and appends the bad samples
to the deny-list beside the shards (never rewriting a shard); a verify writes nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait
from dataclasses import dataclass, field
from typing import Iterator

from .. import denylist, locations
from .. import reasons as R
from ..atomic import atomic_output
from ..errors import UserError
from ..inflight import InFlight
from ..interrupts import stop_on_signals
from ..quality.flags import FlagOptions
from ..scanning.check import CHECKER_VERSION, CheckOptions
from ..scanning.executors import run_checks
from ..scanning.verdict import Verdict
from ..scanning.worker import SampleBytes
from .detect import ShardSet, detect
from .dupkeys import KeyTracker
from .events import Problem, Sample, ShardDone
from .tartasks import Checked

log = logging.getLogger("dsclean.shardsets.run")

#: samples per check task at most, and the bytes after which a task is sent anyway: many small samples per
#: task keep the per-task cost (futures, pipes, wake-ups) off each sample, as the scan's tasks do
CHUNK = 1024
CHUNK_BYTES = 4 << 20
#: the options key a shard-set scan of a bucket prefix records (never a bucket scan's: no reuse across them)
SHARD_SET_RECORD = "shard-set"
#: problems kept per shard in a verify report (the count says how many more)
MAX_PROBLEMS = 50
#: problems kept in a scan summary (all are in problems.jsonl)
MAX_LISTED = 20


@dataclass
class ShardScanOptions:
    """What a shard-set scan or verify can be told (``as_kind``: ``--as``; ``column``: ``--column``)."""

    check: CheckOptions = CheckOptions()
    jobs: int = 0
    backend: str = "processes"
    scheduler: str | None = None  # backend "dask": the scheduler's tcp://HOST:PORT or a scheduler file
    as_kind: str | None = None
    column: str | None = None
    denylist: str | None = None  # default: denylist.jsonl beside the shards
    report_dir: str | None = None
    state_dir: str | None = None
    dry_run: bool = False  # no deny-list entries written
    flags: FlagOptions = FlagOptions()  # quality flag thresholds (flags need check.facts)
    storage_options: dict = field(default_factory=dict, repr=False)  # a set in a bucket: fsspec options (secrets)
    command: tuple[str, ...] = ()  # the command line, secrets redacted: recorded in the scan's summary
    part: tuple[int, int] | None = None  # --shard I/N: only the shards whose name hashes to I (a job array's part)


@dataclass
class ShardScanSummary:
    """Counts and locations of one shard-set scan or verify."""

    kind: str
    folder: str
    shards: int = 0
    samples: int = 0  # samples (keys, rows) the shards hold
    checked: int = 0  # media members / values checked
    counts: dict[str, int] = field(default_factory=dict)  # status -> checked
    bad_reasons: dict[str, int] = field(default_factory=dict)
    warn_reasons: dict[str, int] = field(default_factory=dict)
    problems: dict[str, int] = field(default_factory=dict)  # structure problem reason -> n
    flags: dict[str, int] = field(default_factory=dict)  # quality flag -> samples carrying it (scan, facts on)
    listed: list[dict] = field(default_factory=list)  # the first problems and bad/warn samples
    per_shard: dict[str, dict] = field(default_factory=dict)  # verify: shard -> {samples, problems, more}
    denylist_path: str = ""
    denied_added: int = 0
    denied_already: int = 0
    denied_bad: int = 0  # verify: bad samples (or cut members) the deny-list already names: handled, not a failure
    denylist_report: dict | None = None
    results_path: str = ""
    problems_path: str = ""
    elapsed: float = 0.0
    signal: int = 0
    notes: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)  # the command line, secrets redacted

    @property
    def bad(self) -> int:
        return sum(self.bad_reasons.values())

    @property
    def ok(self) -> bool:
        unhandled = sum(self.problems.values()) + self.bad - self.denied_bad
        return unhandled == 0 and not self.signal

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "bad": self.bad, "ok": self.ok}


def check_backend(options: ShardScanOptions) -> None:
    """Refuse a backend this machine does not know, ``dask`` without a scheduler, a scheduler without ``dask``."""
    from ..scanning.executors import check_backend as check

    check(options.backend, options.scheduler)


def _resolve(specs: list[str], options: ShardScanOptions) -> ShardSet:
    from ..storage.urls import is_url

    check_backend(options)
    if len(specs) == 1 and "{" not in specs[0] and not is_url(specs[0]) and not os.path.lexists(specs[0]):
        raise UserError(f"{specs[0]}: no such file or folder")
    ss = detect(specs, options.as_kind, options.storage_options)
    if ss is None and is_url(specs[0]):
        raise UserError(f"{specs[0]}: no shards under this prefix (a prefix of media objects: dsclean scan URL)")
    if ss is None:
        raise UserError(f"{specs[0]}: not a shard set (give --as webdataset|mds|litdata|parquet to say which)")
    return ss


def in_part(ss: ShardSet, part: tuple[int, int] | None) -> ShardSet:
    """The shards of ``ss`` part ``(i, n)`` of a job array checks: whole shards, by the file scan's stable hash of
    each shard's name (:func:`dsclean.scanning.scanner.in_part`), so a shard's duplicate keys are still found."""
    from ..scanning.scanner import in_part as name_in_part
    from ..scanning.scanner import valid_part

    part = valid_part(part)
    if part is None:
        return ss
    if ss.index is not None:  # its tasks come from the index.json, not from a list of shard names
        raise UserError(
            f"{ss.folder}: --shard I/N splits a set of tars or Parquet files; an {ss.kind} set is spread over "
            "machines by a Dask cluster (--backend dask --scheduler ADDRESS)"
        )
    return dataclasses.replace(
        ss,
        names=[n for n in ss.names if name_in_part(n, part)],
        missing=[n for n in ss.missing if name_in_part(n, part)],
    )


def iter_events(ss: ShardSet, column: str | None = None) -> Iterator[Sample | Problem | ShardDone]:
    """Every event of every shard of ``ss``, shard by shard (a missing shard is a problem)."""
    for name in ss.missing:
        yield Problem(name, None, None, None, R.MISSING_SHARD, f"{name}: named by the set but not there")
    if ss.kind in ("mds", "litdata"):
        if ss.kind == "mds":
            from .mds import plan_set, shard_events
        else:
            from .litdata import plan_set, shard_events  # type: ignore[assignment]
        for item in plan_set(ss, column):  # the index's problems, then each shard's events
            if isinstance(item, Problem):
                yield item
            else:
                yield from shard_events(ss, *item, column)
        return
    if ss.kind == "webdataset":
        from .webdataset import read_shard
    else:
        from .parquet import read_shard as read_parquet

    for name in ss.names:
        try:
            f = ss.open(name)
        except OSError as exc:
            reason = getattr(exc, "reason", R.BROKEN_SHARD)  # a bucket's 403 / 404: unreadable / vanished
            yield Problem(name, None, None, None, reason, f"cannot open: {exc.strerror or exc}")
            yield ShardDone(name, 0)
            continue
        with f:
            if ss.kind == "webdataset":
                yield from read_shard(f, name)
            else:
                yield from read_parquet(f, name, column)


def cluster_error(exc: BaseException) -> bool:
    """Whether ``exc`` is Dask's word that the cluster dropped the scan (its tasks cancelled, the scheduler's
    connection closed or timed out: an error of ``distributed``'s or raised inside it), not a task's own
    error re-raised here nor this machine's own I/O error (e.g. writing the deny-list)."""
    import asyncio

    if isinstance(exc, (CancelledError, asyncio.CancelledError)):
        return True
    if any(c.__module__.split(".")[0] == "distributed" for c in type(exc).__mro__):
        return True  # CommClosedError, RPCClosed, ClosedClientError...
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename if tb is not None else ""
    return f"{os.sep}distributed{os.sep}" in where  # e.g. "Timed out trying to connect" (a plain OSError)


def check_tars(ss: ShardSet, options: ShardScanOptions, stop=None) -> Iterator[Checked | Problem | ShardDone]:
    """A WebDataset or Parquet set checked a shard (or a part of a tar) a task: the workers read the shards
    themselves (:mod:`.tartasks`); each task's structure problems, then its :class:`~.tartasks.Checked`.

    ``backend="dask"``: each task runs on a Dask worker, which opens the shard itself (a bucket: its own
    filesystem from the set's :class:`~dsclean.storage.fs.Store`; a local folder: the path, which the
    cluster must share) and checks its samples with :func:`~dsclean.scanning.executors.check_chunk_on_dask_worker`
    (in a process pool beside the worker, isolated there: a crashing decoder never takes the worker down).
    A task Dask gave up on (its workers kept dying: ``KilledWorker``) is walked again here, its samples in
    fresh processes; a cluster that drops the scan's tasks (scheduler gone, tasks cancelled) is a UserError.
    """
    from ..scanning.cores import usable_cores
    from ..scanning.executors import LOCAL_PROCESSES, lost_worker, make_pool
    from .tartasks import TarTask, check_tar_part, first_formats, isolated_checker, plan

    for name in ss.missing:
        yield Problem(name, None, None, None, R.MISSING_SHARD, f"{name}: named by the set but not there")
    if not ss.names and ss.index is None:
        return
    jobs = options.jobs or usable_cores()
    backend, scheduler = options.backend, options.scheduler
    # the checkers the local workers preload (a Dask cluster's workers read every shard: nothing read here)
    formats = first_formats(ss) if backend in LOCAL_PROCESSES else None
    pool = make_pool(backend, jobs, scheduler, formats, options.check.facts)
    side: collections.deque = collections.deque()  # an index's broken entries, met while planning

    def tasks() -> Iterator[TarTask]:
        for item in plan(ss, pool.slots, options.column):
            if isinstance(item, Problem):
                side.append(item)
            else:
                yield item

    flight: InFlight = InFlight(tasks())

    def submit(task) -> Future:
        return pool.executor.submit(check_tar_part, ss.folder, ss.store, task, options.check, options.flags, pool.task)

    def results(checked: Checked) -> Iterator[Checked | Problem | ShardDone]:
        yield from checked.events
        yield checked

    try:
        while True:
            try:
                refused = flight.fill(submit, 2 * pool.slots, stop=lambda: bool(stop), broken=lost_worker)
                if refused is not None and not flight:
                    pool.close()
                    pool = make_pool(backend, jobs, scheduler)
                    continue
                while side:
                    yield side.popleft()
                if not flight or (backend == "dask" and _stopped_waiting(flight, stop)):
                    return  # interrupted on a cluster: what is in flight is cancelled (finally), not waited for
                lost = []
                for task, result, died in flight.completed(lost_worker):
                    if died:
                        lost.append(task)
                    else:
                        yield from results(result)
            except (CancelledError, OSError, TimeoutError) as exc:
                if backend != "dask" or not cluster_error(exc):
                    raise  # a task's own I/O error, or this machine's: not the cluster's
                raise UserError(
                    f"the Dask cluster at {scheduler} dropped the scan's tasks ({type(exc).__name__}: {exc}); "
                    "no results were written: run it again once the cluster is back"
                ) from exc
            if lost:
                if backend in LOCAL_PROCESSES:  # the whole pool went, with every task in flight
                    lost += flight.drop()
                for task in lost:  # walked again here, its samples checked in fresh processes: the culprit named
                    if backend == "dask":
                        log.warning("%s: its Dask workers kept dying; checking it again on this machine", task.shard)
                    yield from results(
                        check_tar_part(ss.folder, ss.store, task, options.check, options.flags, isolated_checker(jobs))
                    )
                if backend in LOCAL_PROCESSES:
                    pool = make_pool(backend, jobs)
    finally:
        flight.cancel()
        pool.close()


def _stopped_waiting(flight: InFlight, stop) -> bool:
    """Wait until a task of ``flight`` has finished (False: take it) or ``stop`` is set and none has (True),
    looking at ``stop`` each second.

    A Dask cluster may take its time (a task waits for a worker, one that may never come): an interrupted
    scan takes the tasks that finished and does not wait for the others.
    """
    while True:
        if wait(list(flight.futures), timeout=0 if stop else 1.0, return_when=FIRST_COMPLETED).done:
            return False
        if stop:
            return True


def check_events(
    ss: ShardSet, options: ShardScanOptions, stop=None
) -> Iterator[tuple[Sample, Verdict] | Checked | Problem | ShardDone]:
    """The events of :func:`iter_events`, each Sample replaced by ``(sample without its bytes, verdict)``;
    every set's by :func:`check_tars` (its samples come as :class:`~.tartasks.Checked` tasks, a shard each)."""
    if ss.kind in ("webdataset", "parquet", "mds", "litdata"):
        yield from check_tars(ss, options, stop)
        return
    yield from check_samples(ss, options, stop)


def check_samples(
    ss: ShardSet, options: ShardScanOptions, stop=None
) -> Iterator[tuple[Sample, Verdict] | Problem | ShardDone]:
    """Every sample read here and sent with its bytes to the pool (any set: the reference the workers' own reading
    of each shard, :func:`check_tars`, is tested against; ``backend="dask"``: bounded chunks of bytes to the cluster)."""
    side: collections.deque = collections.deque()  # problems and shard ends met while filling chunks
    pending: dict[str, collections.deque] = {}  # a chunk's sample names -> the samples (bytes dropped)

    def chunks() -> Iterator[list[tuple[str, bytes]]]:
        chunk: list[tuple[str, bytes]] = []
        held = 0
        for event in iter_events(ss, options.column):
            if stop:
                break
            if isinstance(event, Sample):
                pending.setdefault(event.name, collections.deque()).append(event._replace(data=b""))
                chunk.append((event.name, event.data))
                held += len(event.data)
                if len(chunk) >= CHUNK or held >= CHUNK_BYTES:
                    yield chunk
                    chunk, held = [], 0
            else:
                side.append(event)
        if chunk:
            yield chunk

    from ..scanning.cores import usable_cores  # affinity and cgroup quota aware, as the scan counts them

    jobs = options.jobs or usable_cores()
    checked = run_checks(SampleBytes(ss.folder), chunks(), options.check, jobs, options.backend, options.scheduler)
    for verdicts in checked:
        while side:
            yield side.popleft()
        for v in verdicts:
            queue = pending[v.path]
            sample = queue.popleft()
            if not queue:
                del pending[v.path]
            yield sample, v
    while side:
        yield side.popleft()


def _count(summary: ShardScanSummary, v: Verdict) -> None:
    summary.checked += 1
    summary.counts[v.status] = summary.counts.get(v.status, 0) + 1
    if v.status == R.BAD and v.reason:
        summary.bad_reasons[v.reason] = summary.bad_reasons.get(v.reason, 0) + 1
    elif v.status == R.WARN and v.reason:
        summary.warn_reasons[v.reason] = summary.warn_reasons.get(v.reason, 0) + 1


def _merge(summary: ShardScanSummary, checked: Checked, keys: KeyTracker | None) -> None:
    """A task's counts (and its key hashes) into the summary: nothing per sample."""
    for into, counts in (
        (summary.counts, checked.counts),
        (summary.bad_reasons, checked.bad_reasons),
        (summary.warn_reasons, checked.warn_reasons),
        (summary.flags, checked.flags),
    ):
        for k, n in counts.items():
            into[k] = into.get(k, 0) + n
    summary.checked += sum(checked.counts.values())
    if keys is not None:
        keys.add_hashes(checked.task.number, checked.hashes)


def _listed(summary: ShardScanSummary, shard: str, key, member, row, reason, detail: str) -> None:
    if len(summary.listed) < MAX_LISTED:
        summary.listed.append(
            {"shard": shard, "key": key, "member": member, "row": row, "reason": reason, "detail": detail[:500]}
        )


class _DenyWriter:
    """Appends the bad samples to the deny-list (not twice: entries already there are skipped), in batches."""

    def __init__(self, path: str, summary: ShardScanSummary) -> None:
        self.path = path
        self.summary = summary
        existing = denylist.read_denylist(path)
        if existing.refused:
            raise UserError(f"{path}: cannot read the deny-list: {existing.refused}")
        self.known = existing.keys()
        self.batch: list[dict] = []

    def add(self, shard: str, key: str, row: int | None, reason: str, detail: str) -> None:
        if (shard, key) in self.known:
            self.summary.denied_already += 1
            return
        self.known.add((shard, key))
        self.batch.append(
            {
                "shard": shard,
                "key": key,
                "row": row,
                "reason": reason,
                "detail": detail,
                "checker": CHECKER_VERSION,
                "source": "scan",
            }
        )
        if len(self.batch) >= 1000:
            self.flush()

    def flush(self) -> None:
        if self.batch:
            try:
                self.summary.denied_added += denylist.append(self.path, self.batch)
            except OSError as exc:
                raise UserError(f"{self.path}: cannot write the deny-list: {exc.strerror or exc}") from None
            self.batch = []


def denylist_object(options: ShardScanOptions):
    """The ``--denylist`` URL as a :class:`~dsclean.storage.fs.Store` (None: a local deny-list)."""
    from ..storage.urls import is_url

    if not (options.denylist and is_url(options.denylist)):
        return None
    from ..storage.fs import Store

    return Store(options.denylist, options.storage_options)


def fetch_denylist(store, local: str) -> bool:
    """The deny-list object copied to ``local`` (replacing it); False when there is none yet (404)."""
    from ..storage.reads import ReadPolicy, classify, retried

    if os.path.lexists(local):
        os.unlink(local)  # a copy left by an earlier run: the object is the deny-list
    try:
        data = retried(lambda: store.fs.cat_file(store.root), store.url, ReadPolicy())
    except Exception as exc:
        err = classify(store.url, exc)
        if err.reason == R.VANISHED:
            return False
        raise UserError(f"{store.url}: cannot read the deny-list: {err.detail}") from None
    with open(local, "wb") as f:
        f.write(data)
    return True


def put_denylist(store, local: str) -> None:
    """The whole deny-list written to its object in one request (retried)."""
    from ..storage.reads import ReadPolicy, classify, retried

    if not os.path.exists(local):
        return  # nothing denied and no deny-list before: no object written
    try:
        retried(lambda: store.fs.put_file(local, store.root), store.url, ReadPolicy())
    except Exception as exc:
        raise UserError(f"{store.url}: cannot write the deny-list: {classify(store.url, exc).detail}") from None


def scan_shard_set(specs: list[str], options: ShardScanOptions = ShardScanOptions()) -> ShardScanSummary:
    """Check every sample of the shard set ``specs`` names; write its results; deny-list its bad samples."""
    from ..scanning.facts import flags_of
    from .results import ShardResultsWriter

    start = time.monotonic()
    ss = in_part(_resolve(specs, options), options.part)
    tag = locations.part_tag(options.part)  # a part's results, problems and summary: tagged, beside the others
    summary = ShardScanSummary(ss.kind, ss.folder, command=list(options.command))
    if ss.store is not None:  # a set in a bucket: results in its local state folder, never in the bucket
        report_dir = options.report_dir or locations.url_state_dir(ss.folder, options.state_dir)
        os.makedirs(report_dir, exist_ok=True)
    else:
        report_dir = options.report_dir or locations.make_root_state_dir(ss.folder, options.state_dir)
        if locations.is_inside(os.path.abspath(report_dir), ss.folder) and not options.report_dir:
            raise UserError(f"{report_dir}: the results would go inside the shard set {ss.folder}")
    upload = denylist_object(options) if not options.dry_run else None
    if upload is not None:  # --denylist s3://...: appended to a local copy, written back whole as one object
        summary.denylist_path = upload.url
        local = os.path.join(report_dir, "denylist.upload.jsonl")
        fetch_denylist(upload, local)
    else:
        default = os.path.join(report_dir, locations.DENYLIST_FILE) if ss.store is not None else None
        local = os.path.abspath(options.denylist or default or denylist.denylist_path(ss.folder))
        summary.denylist_path = local
    deny = None if options.dry_run else _DenyWriter(local, summary)
    # a local set by its absolute path: `dsclean report` finds its shards from any working folder
    root = ss.folder if ss.store is not None else os.path.abspath(ss.folder)
    meta = {"root": root, "shard_set": ss.kind, "shard": list(options.part) if options.part else None, "options": None}
    if options.part:  # `dsclean merge` refuses parts checked differently (their check options, column, --as)
        from ..scanning.cache import options_key

        meta["options"] = f"{options_key(options.check)}; column={options.column}; as={options.as_kind}"
    if ss.store is not None:  # its options minus every secret: what `dsclean report URL` reads the members with
        from ..storage.urls import public_options

        meta["storage_options"] = public_options(ss.store.options)
    writer = ShardResultsWriter(report_dir, meta, tag=tag)
    keys = KeyTracker(ss) if ss.kind == "webdataset" else None

    def problem(event: Problem) -> None:
        summary.problems[event.reason] = summary.problems.get(event.reason, 0) + 1
        _listed(summary, event.shard, event.key, event.member, event.row, event.reason, event.detail)
        writer.add_problem(event)
        if event.deny and deny is not None and event.key is not None:
            deny.add(event.shard, event.key, event.row, event.reason, event.detail)

    try:
        with stop_on_signals() as stop:
            for event in check_events(ss, options, stop):
                if isinstance(event, ShardDone):
                    summary.shards += 1
                    summary.samples += event.samples
                elif isinstance(event, Problem):
                    problem(event)
                elif isinstance(event, Checked):
                    _merge(summary, event, keys)
                    writer.add_checked(event)
                    for row in event.not_ok:
                        _listed(summary, row.shard, row.key, row.member, row.row, row.reason, row.detail)
                        if row.status == R.BAD and deny is not None:
                            deny.add(row.shard, row.key, row.row, row.reason or R.CORRUPT, row.detail)
                else:
                    sample, v = event
                    if keys is not None:
                        keys.add(sample)
                    if options.check.facts:  # the scan's quality flags, from the facts the check computed
                        v.flags = flags_of(v, options.flags)
                        for flag in v.flags or ():
                            summary.flags[flag] = summary.flags.get(flag, 0) + 1
                    _count(summary, v)
                    writer.add(v, sample.shard, sample.member, sample.key, sample.row)
                    if v.status != R.OK:
                        _listed(summary, sample.shard, sample.key, sample.member, sample.row, v.reason, v.detail)
                    if v.status == R.BAD and deny is not None:
                        deny.add(sample.shard, sample.key, sample.row, v.reason or R.CORRUPT, v.detail)
            if keys is not None and not stop:
                for found in keys.problems():
                    problem(found)
            summary.signal = stop.signum
    except BaseException:
        writer.discard()
        raise
    finally:
        if deny is not None:
            deny.flush()
    if upload is not None and deny is not None:
        put_denylist(upload, local)
    writer.close()
    summary.results_path, summary.problems_path = writer.results_path, writer.problems_path
    if ss.store is None:
        # `dsclean report SHARDS_FOLDER` (and the other readers of a root's last scan) find these results
        note = locations.write_pointer(
            ss.folder,
            [summary.results_path],
            problems=[summary.problems_path],
            part=options.part,
            state_dir=options.state_dir,
        )
        if note:
            summary.notes.append(note)
    elif (
        options.part is None
    ):  # a part's results are recorded for the prefix by `dsclean merge`  # `dsclean report s3://...` finds them as a bucket scan's (whose re-scan reuse they never match)
        from ..storage.reuse import write_record

        state = locations.url_state_dir(ss.folder, options.state_dir)
        os.makedirs(state, exist_ok=True)
        write_record(state, ss.folder, summary.results_path, SHARD_SET_RECORD)
    summary.elapsed = time.monotonic() - start
    _write_summary(os.path.dirname(summary.results_path), summary, tag)
    return summary


def _write_summary(report_dir: str, summary: ShardScanSummary, tag: str = "") -> None:
    """``scan_summary.json`` beside the results, as a folder scan writes it: the report shows its command and time
    (a part's tagged: ``scan_summary.part-0001-of-0003.json``)."""
    path = os.path.join(report_dir, locations.tagged(locations.SUMMARY_FILE, tag))
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump({**summary.to_json(), "interrupted": bool(summary.signal)}, f, indent=2)


def verify_shard_set(specs: list[str], options: ShardScanOptions = ShardScanOptions()) -> ShardScanSummary:
    """Check every sample and the structure of the shard set ``specs`` names; reads only, writes nothing.

    Per shard: its samples and problems (the first :data:`MAX_PROBLEMS`); and the deny-list beside the
    shards (``options.denylist``), its entries that name no shard of the set.
    """
    start = time.monotonic()
    ss = _resolve(specs, options)
    summary = ShardScanSummary(ss.kind, ss.folder)
    upload = denylist_object(options)
    if upload is not None:  # --denylist s3://...: read from a temp copy
        path = upload.url
        with tempfile.TemporaryDirectory(prefix="dsclean-denylist-") as tmp:
            local = os.path.join(tmp, locations.DENYLIST_FILE)
            dl = denylist.read_denylist(local) if fetch_denylist(upload, local) else None
    else:
        if ss.store is not None:  # a set in a bucket: its deny-list is beside its last results, locally
            default = os.path.join(locations.url_state_dir(ss.folder, options.state_dir), locations.DENYLIST_FILE)
        else:
            default = denylist.denylist_path(ss.folder)
        path = os.path.abspath(options.denylist or default)
        dl = denylist.read_denylist(path) if os.path.lexists(path) else None
    summary.denylist_path = path
    denied = dl.keys() if dl is not None else set()

    def shard_entry(shard: str) -> dict:
        return summary.per_shard.setdefault(shard, {"samples": 0, "problems": [], "more_problems": 0})

    def note(shard: str, key, member, row, reason, detail) -> None:
        entry = shard_entry(shard)
        if len(entry["problems"]) < MAX_PROBLEMS:
            entry["problems"].append({"key": key, "member": member, "row": row, "reason": reason, "problem": detail})
        else:
            entry["more_problems"] += 1
        _listed(summary, shard, key, member, row, reason, detail)

    keys = KeyTracker(ss) if ss.kind == "webdataset" else None

    def problem(event: Problem) -> None:
        summary.problems[event.reason] = summary.problems.get(event.reason, 0) + 1
        if event.deny and (event.shard, event.key) in denied:
            summary.denied_bad += 1
        else:
            note(event.shard, event.key, event.member, event.row, event.reason, event.detail)

    with stop_on_signals() as stop:
        for event in check_events(ss, options, stop):
            if isinstance(event, ShardDone):
                summary.shards += 1
                summary.samples += event.samples
                shard_entry(event.shard)["samples"] = event.samples
            elif isinstance(event, Problem):
                problem(event)
            elif isinstance(event, Checked):
                _merge(summary, event, keys)
                for row in event.not_ok:
                    if row.status == R.BAD and (row.shard, row.key) in denied:
                        summary.denied_bad += 1
                    elif row.status == R.BAD:
                        note(row.shard, row.key, row.member, row.row, row.reason, row.detail)
            else:
                sample, v = event
                if keys is not None:
                    keys.add(sample)
                _count(summary, v)
                if v.status == R.BAD and (sample.shard, sample.key) in denied:
                    summary.denied_bad += 1
                elif v.status == R.BAD:
                    note(sample.shard, sample.key, sample.member, sample.row, v.reason, v.detail)
        if keys is not None and not stop:
            for found in keys.problems():
                problem(found)
        summary.signal = stop.signum
    if dl is not None:
        names = set(ss.names) | set(summary.per_shard)
        unknown = denylist.unknown_entries(dl, names)
        summary.denylist_report = {
            "path": path,
            "samples": len(dl.keys()),
            "damaged_lines": dl.damaged_lines,
            "refused": dl.refused,
            "not_in_set": [{"shard": e["shard"], "key": e["key"]} for e in unknown[:MAX_LISTED]],
            "not_in_set_count": len(unknown),
        }
    summary.elapsed = time.monotonic() - start
    return summary
