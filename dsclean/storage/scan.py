"""``dsclean scan s3://bucket/prefix``: the scan of a bucket prefix, streamed end to end.

The listing (or ``--manifest``) streams objects; they are cut into chunks; each chunk is checked by a
worker (a process per job, ``--jobs 1``: this process) that reads its objects on a bounded thread pool
(:mod:`.workers`); verdicts are written to the results and problems files (local: the prefix's state
folder, or ``--report``) as chunks finish, and bad objects are quarantined in the bucket
(:mod:`.quarantine`) or listed in a deny-list. At most ``jobs * 2`` chunks are in flight: memory is
flat in the number of objects. Objects are named by key relative to the prefix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator

from .. import locations
from .. import reasons as R
from ..atomic import atomic_output
from ..errors import UserError
from ..inflight import InFlight
from ..interrupts import stop_on_signals
from ..quality.flags import FlagOptions
from ..scanning.cache import options_key
from ..scanning.check import CheckOptions
from ..scanning.cores import usable_cores
from ..scanning.results import ResultsWriter
from ..scanning.scanner import ScanSummary, check_quarantine_flags, in_part
from ..scanning.verdict import Verdict
from .fs import Store
from .listing import ListingStats, NoSuchBucket, Obj, iter_objects, probe
from .manifest import ManifestStats, iter_manifest
from .quarantine import BucketQuarantine, MoveError
from .reads import DEFAULT_READ_THREADS, ReadPolicy, classify, describe, quiet_store_retries, retried
from .reuse import IdsWriter, Previous, identity, write_record
from .urls import is_url, public_options, scrub
from .workers import ChunkResult, check_alone, check_objects, init_worker, run_chunk, run_chunk_isolated, settle

log = logging.getLogger("dsclean.storage.scan")

CHUNK_OBJECTS = 64  # objects per task: a task's bytes are at most this many objects in flight
#: bad verdicts of objects whose bytes were never seen (gone when read; 403, or throttling and 5xx past the
#: retries): listed as problems, never moved or deny-listed (a throttled healthy object must not be)
NOT_READ = frozenset({R.VANISHED, R.UNREADABLE})


@dataclass(frozen=True)
class BucketScanOptions:
    """What a bucket scan can be told beyond :class:`~dsclean.scanning.check.CheckOptions`."""

    storage_options: dict = field(default_factory=dict, repr=False)  # may hold secrets: never shown
    check: CheckOptions = CheckOptions()
    jobs: int = 0  # worker processes (0: all usable cores; 1: in this process)
    read_threads: int = DEFAULT_READ_THREADS  # reads in flight per worker
    policy: ReadPolicy = ReadPolicy()
    manifest: str | None = None
    quarantine: str | None = None  # a URL (same storage)
    denylist: bool = False  # list bad objects in a deny-list instead of moving them
    denylist_file: str | None = None  # that deny-list (default: <report>/denylist.jsonl)
    dry_run: bool = False
    report_dir: str | None = None
    state_dir: str | None = None
    include_hidden: bool = False
    chunk_objects: int = CHUNK_OBJECTS
    backend: str = "processes"  # "processes" (local worker processes) or "dask" (a cluster's workers read the store)
    scheduler: str | None = None  # Dask scheduler address or scheduler file, for backend="dask"
    use_cache: bool = True  # reuse ok verdicts of objects unchanged since the last scan (ETag, size, time)
    rescan: bool = False  # check every object again
    command: tuple[str, ...] = ()  # already redacted (urls.redact_argv)
    shard: tuple[int, int] | None = None  # (i, n): part i of n (a job array's task): the keys hashing to i mod n
    quarantine_flags: tuple[str, ...] = ()  # quality flags whose objects are moved (deny-listed) too: reason `flagged`
    flags: FlagOptions = FlagOptions()  # the flags' thresholds (used with quarantine_flags)


@dataclass
class BucketStats:
    """What the bucket scan adds to the summary (in ``ScanSummary.discovery``'s place)."""

    listed: int = 0
    skipped_other: int = 0
    skipped_hidden: int = 0
    other_parts: int = 0  # listed media objects of the other parts of a job array (--shard I/N): not checked here
    outside_prefix: int = 0
    bad_manifest_rows: int = 0
    not_read: int = 0  # bad verdicts of objects that could not be read (NOT_READ): not moved
    unsafe_keys: int = 0  # keys that are no safe path below the prefix ('..', control characters): not read
    unsafe_examples: list[str] = field(default_factory=list)  # the first few of them (ascii reprs)
    pages: int = 0
    retries: int = 0
    read_bytes: int = 0


def scan_bucket(url: str, options: BucketScanOptions = BucketScanOptions()) -> ScanSummary:
    """Check every media object under the prefix ``url``; write results locally; quarantine bad objects."""
    store = Store(url, dict(options.storage_options))
    if options.quarantine and not is_url(options.quarantine):
        raise UserError(f"--quarantine {options.quarantine}: a bucket scan quarantines in the bucket: give a URL")
    if options.quarantine and options.denylist:
        raise UserError("--quarantine and --denylist are two answers to the same question: give one")
    qstore = Store(options.quarantine, store.options) if options.quarantine else None
    if qstore is not None and (qstore.url == store.url or store.url.startswith(qstore.url + "/")):
        raise UserError(f"--quarantine {qstore.url} holds the scanned prefix {store.url}: choose another prefix")
    exclude = (qstore.url[len(store.url) + 1 :],) if qstore and qstore.url.startswith(store.url + "/") else ()
    jobs = options.jobs or usable_cores()
    if options.backend not in ("processes", "dask"):
        raise UserError(f"--backend {options.backend}: a bucket scan runs on processes (default) or dask")
    if (options.backend == "dask") != bool(options.scheduler):
        raise UserError("--backend dask goes with --scheduler tcp://HOST:PORT or a scheduler file (and only it)")
    check_quarantine_flags(options.quarantine_flags, options.check.facts)  # known flags, facts on: else a UserError
    if options.shard is not None and not (options.shard[1] >= 1 and 0 <= options.shard[0] < options.shard[1]):
        raise UserError(f"--shard {options.shard[0]}/{options.shard[1]}: need 0 <= I < N")
    state = locations.url_state_dir(store.url, options.state_dir)
    if options.report_dir and is_url(options.report_dir):
        raise UserError("--report is a local folder (results are never written into the bucket)")
    report_dir = os.path.abspath(options.report_dir or state)
    probe_prefix(store, options.policy)
    os.makedirs(state, exist_ok=True)
    locks = lock_prefix(state, store.url, options.shard)
    try:
        return _scan_locked(store, qstore, options, state, report_dir, jobs, exclude)
    finally:
        for fd in locks:
            os.close(fd)


def lock_prefix(state: str, url: str, part: tuple[int, int] | None = None) -> list[int]:
    """One scan of a prefix at a time (they would share the state folder's identities and record); the parts
    of one job array (``--shard I/N``, each I once) side by side: the prefix's lock shared, the part's own
    exclusive (as :func:`dsclean.locations.scan_lock` does for a folder)."""
    import fcntl

    names = [locations.LOCK_FILE] + ([locations.tagged(locations.LOCK_FILE, locations.part_tag(part))] if part else [])
    modes = [fcntl.LOCK_EX] if part is None else [fcntl.LOCK_SH, fcntl.LOCK_EX]
    fds: list[int] = []
    for name, mode in zip(names, modes):
        fd = os.open(os.path.join(state, name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            for held in [*fds, fd]:
                os.close(held)
            what = "scanning" if part is None or name != names[-1] else f"running part {part[0]}/{part[1]} of"
            raise UserError(
                f"another dsclean process (pid {holder or 'unknown'}) is {what} {url}; wait for it to finish"
                + (" (the parts of one job array, --shard I/N with different I, may run together)" if part else "")
            ) from None
        if mode == fcntl.LOCK_EX:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        fds.append(fd)
    return fds


def _scan_locked(
    store: Store,
    qstore: Store | None,
    options: BucketScanOptions,
    state: str,
    report_dir: str,
    jobs: int,
    exclude: tuple[str, ...],
) -> ScanSummary:
    """:func:`scan_bucket` once its lock is held."""
    summary = ScanSummary(root=store.url, jobs=jobs, quarantine=qstore.url if qstore else None, state_dir=state)
    summary.dry_run = options.dry_run
    summary.command = list(options.command)
    summary.shard = options.shard
    tag = locations.part_tag(options.shard)
    stats = BucketStats()
    key = options_key(options.check)
    # a reused row carries no flags of today's thresholds: with --quarantine-flags every object is checked again
    reuse = options.use_cache and not options.rescan and not options.quarantine_flags
    previous = Previous.open(state, key, store.url) if reuse else None
    flag_meta = asdict(options.flags) if options.quarantine_flags else None  # thresholds of the flags column
    meta = {"root": store.url, "shard": options.shard, "options": key, "storage": True, "flags": flag_meta}
    # the storage options minus every secret: what `dsclean report URL` reads the objects with again (secrets come
    # from the environment or --storage-option each time)
    writer = ResultsWriter(report_dir, tag=tag, meta={**meta, "storage_options": public_options(store.options)})
    ids = IdsWriter(state, tag)
    start = time.perf_counter()
    deny = (
        os.path.abspath(options.denylist_file or os.path.join(report_dir, locations.DENYLIST_FILE))
        if options.denylist
        else None
    )
    with contextlib.ExitStack() as stack:
        quarantine: BucketQuarantine | None = None
        stack.push(_finish(writer, ids, state, store, key, lambda: _earlier(quarantine, store), whole=not tag))
        if qstore is not None and not options.dry_run:
            quarantine = stack.enter_context(BucketQuarantine(store, qstore, options.state_dir, options.policy, tag))
            summary.quarantine = qstore.url
            summary.recovered = {"completed": quarantine.recovery.completed, "reverted": quarantine.recovery.reverted}
            summary.notes += quarantine.recovery.refused
        objects = _in_part(_objects(store, options, stats, exclude), options.shard, stats)
        chunks = _chunks(objects, options.chunk_objects)
        if previous is not None:
            chunks = (fresh for chunk in chunks if (fresh := previous.unchanged(chunk)[0]))
        with stop_on_signals() as stop:
            for result in _run(store, chunks, options, jobs, stop):
                _take(result, summary, stats, writer, ids, quarantine, options, deny)
                if stop.signum:
                    break
        summary.signal = stop.signum
        summary.interrupted = bool(stop.signum)
        if previous is not None:
            _add_reused(previous, summary, writer, ids)
    summary.elapsed = time.perf_counter() - start
    summary.results_path, summary.problems_path = writer.results_path, writer.problems_path
    summary.notes += _notes(stats, options)
    if quarantine is not None:  # what the bucket quarantine holds now, by its journal (all runs)
        from ..scanning.quarantine.status import quarantine_state

        summary.quarantine_state = {
            **quarantine_state(quarantine.dir, [tag] if tag else None).to_json(),
            "quarantine": quarantine.q.url,
        }
    _write_summary(report_dir, summary, stats, tag)
    return summary


def _earlier(quarantine: BucketQuarantine | None, store: Store) -> Iterable[dict]:
    """Problems-file lines of the objects of this prefix that earlier runs moved to the quarantine."""
    if quarantine is None:
        return ()
    from ..scanning.quarantine.status import quarantined_records

    tags = [quarantine.tag] if quarantine.tag else None  # a part lists its own moves; a whole scan every part's
    return quarantined_records(quarantine.dir, store.url, tags, quarantine.moved_ids)


def _finish(writer: ResultsWriter, ids: IdsWriter, state: str, store: Store, key: str, earlier, whole: bool = True):
    """The exit callback: on an error drop the temp files (the previous results stay), else publish the
    results, then the identities of their rows, then the record naming both (a re-scan's reuse). A part
    (``whole`` False) records nothing: ``dsclean merge`` records the merged results of all parts."""

    def finish(exc_type, exc, tb) -> None:  # returns None: the error (if any) goes on
        if exc_type is not None:
            writer.discard()
            ids.discard()
            return
        writer.close(earlier())
        ids.close()
        if whole:
            write_record(state, store.url, writer.results_path, key)

    return finish


def _add_reused(previous: Previous, summary: ScanSummary, writer: ResultsWriter, ids: IdsWriter) -> None:
    """The rows of the objects found unchanged, from the previous results (ok rows, in Arrow)."""
    import pyarrow.compute as pc

    for batch, idents in previous.reused_rows():
        writer.add_table(batch)
        ids.add_array(idents)
        summary.files += batch.num_rows
        summary.cached += batch.num_rows
        summary.bytes += int(pc.sum(batch.column("size")).as_py() or 0)
        for kind, n in zip(*pc.value_counts(batch.column("kind")).flatten()):
            counts = summary.counts.setdefault(kind.as_py(), {})
            counts[R.OK] = counts.get(R.OK, 0) + n.as_py()


def probe_prefix(store: Store, policy: ReadPolicy) -> None:
    """The prefix can be listed: else a clear error naming it (403, no such bucket, bad endpoint)."""
    quiet_store_retries(store.fs, store.scheme)
    try:
        retried(lambda: probe(store), store.url, policy)
    except FileNotFoundError as exc:
        if store.scheme in ("s3", "s3a") or isinstance(exc, NoSuchBucket):
            raise UserError(f"cannot list {store.url}: no such bucket") from None
        if store.scheme == "file":
            raise UserError(f"scan root {store.url} does not exist") from None
        return  # a prefix without objects: the scan finds 0 objects
    except Exception as exc:
        err = classify(store.url, exc)
        raise UserError(f"cannot list {store.url}: {scrub(err.detail, store.options)}") from None
    if store.scheme == "file" and not os.path.exists(store.root):
        raise UserError(f"scan root {store.url} does not exist")
    if store.scheme == "file" and not os.path.isdir(store.root):
        raise UserError(f"scan root {store.url} is not a folder")


def _objects(store: Store, options: BucketScanOptions, stats: BucketStats, exclude: tuple[str, ...]) -> Iterator[Obj]:
    if options.manifest:
        mstats = ManifestStats()
        yield from iter_manifest(options.manifest, store, include_hidden=options.include_hidden, stats=mstats)
        stats.outside_prefix, stats.bad_manifest_rows = mstats.outside, mstats.bad_rows
        ls: ListingStats = mstats
    else:
        ls = ListingStats()
        try:
            yield from iter_objects(store, include_hidden=options.include_hidden, stats=ls, exclude=exclude)
        except Exception as exc:
            if isinstance(exc, UserError):
                raise
            raise UserError(f"listing {store.url} failed: {scrub(describe(exc), store.options)}") from None
    stats.listed, stats.skipped_other, stats.skipped_hidden, stats.pages = (
        ls.objects,
        ls.skipped_other,
        ls.skipped_hidden,
        ls.pages,
    )
    stats.unsafe_keys, stats.unsafe_examples = ls.unsafe, ls.unsafe_examples


def _in_part(objects: Iterable[Obj], part: tuple[int, int] | None, stats: BucketStats) -> Iterator[Obj]:
    """The objects of part ``part`` (the local scan's stable hash of the key: :func:`in_part`); all without one."""
    if part is None:
        yield from objects
        return
    for obj in objects:
        if in_part(obj.rel, part):
            yield obj
        else:
            stats.other_parts += 1


def _chunks(objects: Iterable[Obj], size: int) -> Iterator[list[Obj]]:
    chunk: list[Obj] = []
    for obj in objects:
        chunk.append(obj)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _run(
    store: Store, chunks: Iterator[list[Obj]], options: BucketScanOptions, jobs: int, stop
) -> Iterator[ChunkResult]:
    """Chunk results in completion order; ``jobs`` 1: in this process, else a process pool (or the Dask
    cluster's workers), a bounded few ahead."""
    if options.backend == "dask":
        yield from _run_dask(store, chunks, options, stop)
        return
    if jobs == 1:
        for chunk in chunks:
            yield check_objects(store, chunk, options.check, options.policy, options.read_threads)
            if stop.signum:
                return
        return
    from ..scanning.worker import handed_env  # credentials and the fault switch as this process has them now

    ctx = multiprocessing.get_context("forkserver")
    env = handed_env()
    flight: InFlight[list[Obj]] = InFlight(chunks)
    pool = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=init_worker, initargs=(env, options.check.facts))

    def submit(chunk: list[Obj]) -> Future:
        return pool.submit(run_chunk_isolated, (store, chunk, options.check, options.policy, options.read_threads))

    def broken(exc: BaseException) -> bool:
        return isinstance(exc, BrokenProcessPool)

    try:
        while True:
            dead = flight.fill(submit, jobs * 2, stop=lambda: stop.signum, broken=broken)
            if not flight.futures and dead is None:
                return
            lost: list[list[Obj]] = []
            for chunk, result, was_lost in flight.completed(broken):
                if was_lost:
                    lost.append(chunk)
                else:  # a too_large made beside reads in flight: checked again alone first
                    yield settle(result, chunk, store, options.check, options.policy, env)
            if dead is not None or lost:  # a worker died (a decoder crashed it, or a check overran): a new pool
                pool.shutdown(wait=False, cancel_futures=True)
                lost += flight.drop()
                pool = ProcessPoolExecutor(
                    jobs, mp_context=ctx, initializer=init_worker, initargs=(env, options.check.facts)
                )
                # every object of the lost tasks again, alone and one at a time: one that ends its process is certain
                for obj in (obj for chunk in lost for obj in chunk):
                    try:
                        yield settle(submit([obj]).result(), [obj], store, options.check, options.policy, env)
                    except BrokenProcessPool:  # the culprit: once more in a process of its own, which says how
                        pool.shutdown(wait=False, cancel_futures=True)  # it ends (a crash, a timeout, memory)
                        pool = ProcessPoolExecutor(
                            jobs, mp_context=ctx, initializer=init_worker, initargs=(env, options.check.facts)
                        )
                        yield check_alone(store, obj, options.check, options.policy, env)
            if stop.signum:
                return
    finally:
        flight.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def check_chunks(
    store: Store, chunks: Iterator[list[Obj]], options: BucketScanOptions, jobs: int
) -> Iterator[ChunkResult]:
    """Verdicts of chunks of objects as the bucket scan checks them (``jobs`` worker processes, each check
    isolated: a decoder crash costs its object only; 1: this process), in completion order; stops between
    chunks on SIGINT/SIGTERM. What ``dsclean index URL`` checks the objects its scan did not cover with."""
    with stop_on_signals() as stop:
        yield from _run(store, chunks, options, jobs, stop)
        if stop.signum:
            raise UserError(f"interrupted (signal {stop.signum}) while checking objects of {store.url}")


def _run_dask(store: Store, chunks: Iterator[list[Obj]], options: BucketScanOptions, stop) -> Iterator[ChunkResult]:
    """Chunks on a Dask cluster: each task's worker opens the store itself and reads its objects directly
    (nothing passes through this process but keys and verdicts); ``2 x`` the cluster's threads in flight."""
    from ..scanning.executors import connect_dask

    client, slots = connect_dask(options.scheduler)
    executor = client.get_executor(pure=False)
    flight: InFlight[list[Obj]] = InFlight(chunks)

    def submit(chunk: list[Obj]) -> Future:
        return executor.submit(run_chunk, (store, chunk, options.check, options.policy, options.read_threads))

    try:
        while True:
            flight.fill(submit, slots * 2, stop=lambda: stop.signum)
            if not flight.futures:
                return
            for _chunk, result, _lost in flight.completed(lambda exc: False):
                yield result
            if stop.signum:
                return
    finally:
        flight.cancel()
        client.close()


def _take(
    result: ChunkResult,
    summary: ScanSummary,
    stats: BucketStats,
    writer: ResultsWriter,
    ids: IdsWriter,
    quarantine: BucketQuarantine | None,
    options: BucketScanOptions,
    deny: str | None,
) -> None:
    stats.retries += result.retries
    stats.read_bytes += result.read_bytes
    denied: list[dict] = []
    for v, etag in zip(result.verdicts, result.etags):
        summary.files += 1
        summary.bytes += v.size or 0
        summary.checked_bytes += v.size or 0
        counts = summary.counts.setdefault(v.kind, {})
        counts[v.status] = counts.get(v.status, 0) + 1
        extra: dict | None = None
        if v.status == R.BAD:
            summary.bad_reasons[v.reason or "?"] = summary.bad_reasons.get(v.reason or "?", 0) + 1
            unread = v.reason in NOT_READ
            stats.not_read += unread
            if quarantine is not None and not unread and v.path in quarantine.moved_keys:
                extra = {"quarantined_to": quarantine.q.url_of(v.path)}  # named twice (a manifest): moved once
            elif quarantine is not None and not unread:
                try:
                    moved = quarantine.move(v.path, v.size, etag, kind=v.kind, reason=v.reason, detail=v.detail[:500])
                    extra = {"quarantined_to": moved}
                    summary.quarantined += 1
                except MoveError as exc:
                    extra = _move_failed(summary, exc)
            elif (options.quarantine or deny) and not unread:
                summary.would_quarantine += 1
            if deny is not None and not unread:
                denied.append({"path": v.path, "reason": v.reason, "source": "scan", "detail": v.detail})
        elif v.status == R.WARN:
            summary.warn_reasons[v.reason or "?"] = summary.warn_reasons.get(v.reason or "?", 0) + 1
        if options.quarantine_flags and v.status != R.BAD:
            extra = _flagged(v, etag, summary, quarantine, options, denied if deny is not None else None) or extra
        writer.add(v, extra)
        ids.add(identity(Obj(v.path, v.size, etag, v.mtime_ns)) if v.status == R.OK else 0)
    if denied and deny is not None:
        from ..denylist import append

        append(deny, denied)


def _move_failed(summary: ScanSummary, exc: MoveError) -> dict:
    """A move that did not happen, counted (by why) in the summary; its problems-file field."""
    summary.move_failures += 1
    why = str(exc).rsplit(": ", 1)[-1]
    summary.move_failure_reasons[why] = summary.move_failure_reasons.get(why, 0) + 1
    if len(summary.move_errors) < 1000:
        summary.move_errors.append(str(exc))
    return {"move_error": str(exc)}


def _flagged(
    v: Verdict,
    etag: str | None,
    summary: ScanSummary,
    quarantine: BucketQuarantine | None,
    options: BucketScanOptions,
    denied: list[dict] | None,
) -> dict | None:
    """A whole object's quality flags (``v.flags``, counted); one of ``--quarantine-flags`` moves it (reason
    ``flagged``) as the local scan moves a flagged file, or deny-lists it; a dry run says it would."""
    from ..scanning.facts import flags_of

    v.flags = flags_of(v, options.flags)
    for flag in v.flags or ():
        summary.flags[flag] = summary.flags.get(flag, 0) + 1
    hit = next((f for f in v.flags or () if f in options.quarantine_flags), None)
    if hit is None:
        return None
    detail = f"quality flag {hit} (--quarantine-flags)"
    if denied is not None:
        denied.append({"path": v.path, "reason": R.FLAGGED, "source": "scan", "detail": detail})
        summary.flag_quarantined += 1
        return {"denied": R.FLAGGED, "flag": hit}
    if quarantine is None:  # a dry run, or no --quarantine: listed in the problems file
        summary.flag_quarantined += 1
        return {"would_quarantine": R.FLAGGED, "flag": hit}
    if v.path in quarantine.moved_keys:
        return {"quarantined_to": quarantine.q.url_of(v.path), "flag": hit}
    try:
        moved = quarantine.move(v.path, v.size, etag, kind=v.kind, reason=R.FLAGGED, detail=detail)
    except MoveError as exc:
        return {**_move_failed(summary, exc), "flag": hit}
    summary.quarantined += 1
    summary.flag_quarantined += 1
    return {"quarantined_to": moved, "flag": hit}


def _notes(stats: BucketStats, options: BucketScanOptions) -> list[str]:
    notes = []
    if stats.retries:
        notes.append(f"{stats.retries:,} reads were retried after throttling or a server error (backoff)")
    if stats.outside_prefix:
        notes.append(f"{stats.outside_prefix:,} manifest keys are not under the scanned prefix: not checked")
    if stats.bad_manifest_rows:
        notes.append(f"{stats.bad_manifest_rows:,} manifest rows hold no usable key (empty or over 2,048 bytes)")
    if stats.unsafe_keys:
        notes.append(
            f"{stats.unsafe_keys:,} keys are no safe path below the prefix (an empty, '.' or '..' part, absolute, "
            f"a control character, over 1,024 bytes): not read, not checked (e.g. {', '.join(stats.unsafe_examples)})"
        )
    if stats.not_read and (options.quarantine or options.denylist):
        notes.append(
            f"{stats.not_read:,} objects could not be read (vanished, access denied, or still failing after "
            "the retries): listed as problems, not moved or deny-listed; scan again to judge them"
        )
    if stats.other_parts:
        notes.append(
            f"{stats.other_parts:,} media objects belong to the other parts of the job array: not checked here"
        )
    if stats.skipped_other:
        notes.append(f"{stats.skipped_other:,} objects are not media by their name's extension: not checked")
    return notes


def _write_summary(report_dir: str, summary: ScanSummary, stats: BucketStats, tag: str = "") -> str:
    path = os.path.join(report_dir, locations.tagged(locations.SUMMARY_FILE, tag))
    data = summary.to_json()
    data["discovery"] = asdict(stats)
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    return path
