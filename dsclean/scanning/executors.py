"""Run check chunks on a pool of workers, a few chunks ahead, and survive workers that die.

The pool is a ``concurrent.futures`` executor:

- ``processes`` (default): worker processes on this machine, forked from a
  forkserver that imported the checkers once (:func:`local_pool`), so a worker
  starts in milliseconds instead of re-importing Python, Pillow and numpy (made
  faster still with multiprocessing's internals by :mod:`dsclean.scanning.fastfork`,
  on the Python versions it was checked on);
- ``loky``: joblib's reusable process pool (each worker a fresh interpreter);
- ``threads``: a thread pool in this process (no isolation: see :mod:`dsclean.scanning.worker`);
- ``dask``: a Dask distributed cluster, through the Client's own
  ``concurrent.futures`` executor. Dask, not a home-made protocol, ships the
  chunks, and re-runs a chunk elsewhere when a worker is lost.

Chunks stream in from discovery; at most two per worker slot are in flight
(:class:`dsclean.inflight.InFlight`), so memory is bounded however long the stream is; verdicts come back in completion
order, in this process, which is also where quarantine moves happen (on the
shared file system: no file contents ever travel through a scheduler).

When a local worker dies (a decoder segfaults, aborts, or hits the per-file
timeout) every chunk in flight is lost with the pool: each is re-checked in a
fresh process of its own, which records the file it is on; a chunk that kills
that one too is split where it died and the parts re-checked in fresh processes,
until the file that kills a process of its own (:func:`isolate_chunks`,
:func:`isolate`), so the culprit is named exactly (``decoder_crash`` with the
signal, or ``timeout``) for a few processes, and its neighbours keep their normal
verdicts. On Dask, each chunk runs in a loky pool beside the
Dask worker (:func:`check_chunk_on_dask_worker`) and is isolated there the
same way, so a bad file never takes a Dask worker down.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections import deque
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from multiprocessing import forkserver
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from .. import reasons as R
from ..errors import UserError
from ..formats import FORMATS, format_of_name, kind_of
from ..inflight import InFlight
from . import fastfork
from .check import CheckOptions, checker_modules
from .verdict import Verdict
from .worker import (
    FAULT_ENV,
    FileSlices,
    SampleBytes,
    as_batch,
    check_chunk,
    check_chunk_in_thread,
    handed_env,
    item_name,
    set_fault_switch,
    start_worker,
)

if TYPE_CHECKING:
    from .schema import Chunk

log = logging.getLogger("dsclean.scanning.executors")

BACKENDS = ("processes", "loky", "threads", "dask")
#: backends whose workers are processes of this machine (one pool: a dead worker breaks it)
LOCAL_PROCESSES = ("processes", "loky")

#: extra seconds the parent grants an isolated check beyond its files' --timeout before killing it
_GRACE = 5.0


@dataclass
class Pool:
    """An executor, the task its workers run, how many chunks it works on at once, how to let it go."""

    executor: Executor
    task: Callable[[str, list[str], CheckOptions], list[Verdict]]
    slots: int
    close: Callable[[], None]


def check_backend(backend: str, scheduler: str | None) -> None:
    """Refuse a backend this machine does not know, ``dask`` without a scheduler, a scheduler without ``dask``."""
    if backend not in BACKENDS:
        raise UserError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "dask" and not scheduler:
        raise UserError("--backend dask needs --scheduler tcp://HOST:PORT or a scheduler file")
    if scheduler and backend != "dask":  # a cluster the user named would silently sit idle
        raise UserError(f"--scheduler goes with --backend dask (the backend is {backend})")


def make_pool(
    backend: str, workers: int, scheduler: str | None = None, formats: Iterable[str] | None = None, facts: bool = True
) -> Pool:
    """A fresh pool for ``backend`` (``scheduler``: a Dask address or scheduler file, for ``dask``).

    ``formats``, ``facts``: what is expected (local processes: the forkserver, if it starts now, preloads
    only those checkers, and the image facts' code if ``facts``).
    """
    if backend == "processes":
        return Pool(local_pool(workers, formats, facts), check_chunk, workers, lambda: None)
    if backend == "loky":
        from joblib.externals.loky import get_reusable_executor

        # After a worker died the old pool is broken; get_reusable_executor then builds a new one.
        return Pool(get_reusable_executor(max_workers=workers, timeout=60), check_chunk, workers, lambda: None)
    if backend == "threads":
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dsclean-check")
        return Pool(pool, check_chunk_in_thread, workers, lambda: pool.shutdown(wait=False, cancel_futures=True))
    if backend == "dask":
        return _dask_pool(scheduler)
    raise UserError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def connect_dask(scheduler: str | None):
    """A Dask ``Client`` of the cluster at ``scheduler`` (address or scheduler file) and its worker threads.

    Clear errors when Dask is missing, no scheduler is given or reachable, or it has no workers.
    Shared by every command with ``--backend dask``.
    """
    try:
        from distributed import Client
    except ImportError:
        raise UserError("--backend dask needs Dask distributed: pip install 'dsclean[dask]'") from None
    if not scheduler:
        raise UserError("--backend dask needs --scheduler tcp://HOST:PORT or a scheduler file")
    try:
        if os.path.isfile(scheduler):
            client = Client(scheduler_file=scheduler, timeout=30)
        else:
            client = Client(scheduler, timeout=30)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UserError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from exc
    slots = sum(client.nthreads().values())
    if not slots:
        client.close()
        raise UserError(f"the Dask cluster at {scheduler} has no workers")
    return client, slots


def _dask_pool(scheduler: str | None) -> Pool:
    client, slots = connect_dask(scheduler)
    return Pool(client.get_executor(pure=False), check_chunk_on_dask_worker, slots, client.close)


_local: tuple[ProcessPoolExecutor, int, tuple[tuple[str, str], ...]] | None = None
_leaving: list[ProcessPoolExecutor] = []  # pools told to end (release_local_workers), waited for by stop_local_workers


def local_pool(workers: int, formats: Iterable[str] | None = None, facts: bool = True) -> ProcessPoolExecutor:
    """The local worker pool: ``workers`` processes forked from the preloaded forkserver, kept for reuse.

    A pool broken by a dead worker, or of another size, is replaced. The handed variables (the test-only
    fault switch :data:`~dsclean.scanning.worker.FAULT_ENV`, the stores' credentials: :func:`handed_env`)
    are given to each worker as it starts: forked from the server, a worker sees the server's environment,
    not this process's current one; a pool started with other values is replaced.
    """
    global _local, _starting
    if _starting is not None and _starting is not threading.current_thread():
        _starting.join()  # the worker it starts, or why none could start, before this pool is used
        _starting = None
    if _unavailable:
        raise _unavailable.pop()
    env = handed_env()
    if _local is not None:
        pool, size, was = _local
        if size == workers and was == env and not getattr(pool, "_broken", False):
            return pool
        pool.shutdown(wait=False, cancel_futures=True)
    pool = ProcessPoolExecutor(
        workers, mp_context=_fresh_process_context(formats, facts), initializer=start_worker, initargs=(env,)
    )
    _local = (pool, workers, env)
    return pool


def start_local_workers(formats: Iterable[str] | None = None, facts: bool = True, fork_here: bool = False) -> None:
    """Start the forkserver now (it imports the checkers in the background while this process goes on).

    ``formats``: the formats expected (None: any); the forkserver preloads only their checkers (see
    :func:`preload_modules`; ``facts``: the scan records facts). ``fork_here``: start it (and the
    resource tracker) as forks of this process rather than fresh interpreters (:func:`_fork_helpers`):
    for the ``dsclean`` command, whose process is still small and single-threaded when it calls this.
    """
    if multiprocessing.current_process().daemon:
        return  # a daemonic process cannot start one; the scan says why when it needs workers
    _fresh_process_context(formats, facts, fork_here)


def prestart_local_worker(workers: int) -> None:
    """Start the local pool's first worker now, from a thread, so it is ready when the first chunk is sent.

    For the ``dsclean`` command, right after :func:`start_local_workers`: asking the forkserver for a worker waits
    until it has preloaded the checkers, then the worker starts (unpickles its pool's queues, runs its initializer);
    a thread does that waiting while this process imports the rest of the scan, instead of the scan doing it after.
    The pool is :func:`local_pool`'s, the one the scan then takes (same size, same handed variables). Its start
    is one of the scan's attempts: if no worker could be started (the forkserver died, then its replacement), the
    scan's first use of the pool raises the same :class:`~dsclean.scanning.fastfork.WorkersUnavailable`."""
    global _starting
    if _context is None or not fastfork.server_running() or _starting is not None:
        return
    pool = local_pool(workers)
    _starting = threading.Thread(target=_first_worker, args=(pool,), name="dsclean-first-worker", daemon=True)
    _starting.start()


#: the thread starting the pool's first worker early, until the next local_pool call (the scan's) waits for it
_starting: threading.Thread | None = None
#: its WorkersUnavailable, raised by that call
_unavailable: list[fastfork.WorkersUnavailable] = []


def _first_worker(pool: ProcessPoolExecutor) -> None:
    """A no-op task: the executor starts a worker process for it (Python 3.11+: one per task while none is idle)."""
    try:
        pool.submit(int)
    except fastfork.WorkersUnavailable as exc:
        _unavailable.append(exc)
    except RuntimeError as exc:  # shut down or broken first (the scan ended, or refused its root): nothing to start
        log.debug("no first worker started: %s", exc)


def stop_local_workers() -> None:
    """Stop the kept workers and the forkserver, and wait for them (run at exit).

    Without this the forkserver outlives the process that started it (it notices the end of its
    parent and exits on its own, reparented): nothing is lost, but its CPU time and its workers'
    never reach whoever waits for this process (``time``, a benchmark's ``getrusage``), and a
    process of dsclean's lingers past the command's end.
    """
    global _local
    if _local is not None:
        pool = _local[0]
        _local = None
        pool.shutdown(wait=True, cancel_futures=True)
    while _leaving:
        _leaving.pop().shutdown(wait=True)
    if fastfork.SUPPORTED:  # else the forkserver ends on its own, once this process has
        fastfork.stop_server()


def release_local_workers() -> None:
    """Tell the kept workers to end once idle, without waiting for them (:func:`stop_local_workers` does).

    For a process that scans once (the ``dsclean`` command): its workers exit while it writes its
    results, instead of after. A later scan in this process starts a new pool.
    """
    global _local
    if _local is not None:
        pool = _local[0]
        _local = None
        pool.shutdown(wait=False)
        _leaving.append(pool)


def lost_worker(exc: BaseException) -> bool:
    """A process pool broke, or Dask gave up on a task whose workers kept dying."""
    return isinstance(exc, BrokenProcessPool) or type(exc).__name__ == "KilledWorker"


def run_checks(
    root: str,
    chunks: Iterable[list[str]],
    options: CheckOptions,
    workers: int,
    backend: str = "loky",
    scheduler: str | None = None,
    batches: bool = False,
    release: bool = False,
) -> Iterator[list[Verdict]] | Iterator["Chunk"]:
    """Yield verdict chunks as they finish. Closing the generator cancels what is still queued.

    ``batches=True``: each chunk comes as a :class:`~dsclean.scanning.schema.Chunk`, an Arrow
    record batch of the results :data:`~dsclean.scanning.schema.SCHEMA` built by the worker that
    checked it (:func:`~dsclean.scanning.worker.as_batch`: one buffer to pickle and unpickle per
    chunk, no Python object per file in this process) and its counts; a chunk re-checked file by
    file after a worker died is made one here. What the scan uses.
    """
    source = iter(chunks)
    first = next(source, None)
    if first is None:
        return  # nothing to check (a re-scan of an unchanged tree): no pool, no process started
    source = itertools.chain([first], source)
    pool = make_pool(
        backend, workers, scheduler, {format_of_name(item_name(root, rel)) for rel in first} - {None}, options.facts
    )
    shape, unpack = list, list  # a chunk checked here (isolated), a chunk a worker sent back
    if batches:
        from .schema import chunk_of, read_chunk

        shape, unpack = chunk_of, read_chunk
    source = _last_split(source, 2 * pool.slots if pool.slots > 1 else 1)
    flight: InFlight[list[str]] = InFlight(source)
    fresh_pools = 0  # pools made in a row because one broke with nothing in flight

    def submit(chunk: list[str]) -> Future:
        task = partial(as_batch, pool.task) if batches else pool.task
        return pool.executor.submit(task, root, chunk, options)

    try:
        while True:
            refused = flight.fill(submit, 2 * pool.slots, broken=lost_worker)
            # A worker died since the last wait: a broken pool refuses new tasks at once. The chunk went back
            # to the queue; the futures in flight then fail as lost (below), or, with none in flight (a worker
            # killed while idle), a new pool takes the queue.
            if refused is not None and not flight:
                if fresh_pools >= 3:
                    raise refused
                fresh_pools += 1
                pool.close()
                pool = make_pool(backend, workers, scheduler)
                continue
            fresh_pools = 0
            if not flight:
                if release and backend == "processes":
                    release_local_workers()
                return
            lost: list[list[str]] = []
            for chunk, result, died in flight.completed(lost_worker):
                if died:
                    lost.append(chunk)
                else:
                    yield unpack(result)
            if lost:
                if backend in LOCAL_PROCESSES:  # the whole pool is gone, and with it every chunk still in flight
                    lost += flight.drop()
                for verdicts in isolate_chunks(root, lost, options, workers):
                    yield shape(verdicts)
                if backend in LOCAL_PROCESSES:
                    pool = make_pool(backend, workers, scheduler)
    finally:
        flight.cancel()
        pool.close()


def _last_split(chunks: Iterator[list], pieces: int) -> Iterator[list]:
    """The chunks as they come, except the last ``pieces // 2`` (one per worker), cut into ever smaller pieces.

    Workers take tasks in order as they free up, so the scan ends when the last task does:
    with the last chunks whole, one worker can sit idle for most of a chunk's time while
    another finishes one (up to ~0.2 s of a 2-worker scan of 3,000 JPEGs; 0.18-0.8 s with tasks
    of 4,096 tiny files, docs/benchmarks-history.md "The scan pipeline"). Their files go out in pieces of the files left
    divided by ``pieces`` (guided self-scheduling: large first, down to one file), so the last
    files go to whichever worker is free and the workers finish within a small piece of each other.
    Holds those chunks back to know which are last.
    """
    if pieces <= 1:  # one worker: nothing to balance
        yield from chunks
        return
    held: deque = deque()
    for chunk in chunks:
        held.append(chunk)
        if len(held) > pieces // 2:
            yield held.popleft()
    rest = [item for chunk in held for item in chunk]
    at = 0
    while at < len(rest):
        size = -(-(len(rest) - at) // pieces)  # ceiling: never an empty piece
        yield rest[at : at + size]
        at += size


# ---- fresh processes: one chunk, or a part of one, per process -------------------------------

_context = None
_context_lock = threading.Lock()
#: set in the environment the forkserver starts with, so that it knows itself when it preloads this module
_SERVER_ENV = "DSCLEAN_FORKSERVER"
if os.environ.pop(_SERVER_ENV, None) == "1":
    # This process is the forkserver. Its workers end with os._exit; it ends when the scan's process
    # stops it (stop_local_workers waits for that). Skip the interpreter's teardown at that exit
    # (freeing numpy's, Pillow's, ... objects: ~0.04 s the scan's process waits for, docs/benchmarks-history.md "The scan pipeline").
    atexit.register(os._exit, 0)
_DAEMONIC = (
    "this process is daemonic and cannot start the processes dsclean checks files in (Dask workers are, "
    "by default): start the Dask workers with DASK_DISTRIBUTED__WORKER__DAEMON=False or "
    "`distributed.worker.daemon: false` in the Dask config"
)


def _fresh_process_context(formats: Iterable[str] | None = None, facts: bool = True, fork_here: bool = False):
    """A forkserver: each child forks from a clean, single-threaded, pre-imported server.

    The server preloads this module (the workers' code, and everything a pool worker unpickles)
    and the checkers of ``formats`` (None: all). Only the first call starts a server, so only its
    ``formats`` count: a worker imports any other checker it needs on first use, for itself
    (a tree of sounds never loads Pillow; a tree of JPEGs never loads libsndfile).
    ``fork_here`` (and this process single-threaded): the server and the resource tracker are forks
    of this process (:func:`_fork_helpers`); else fresh interpreters, as multiprocessing starts them.
    Both, and the context's processes (:class:`~dsclean.scanning.fastfork.WorkerContext`: no
    ``__main__`` re-run, a dead server replaced), need multiprocessing's internals: on a Python they
    were not checked on (:data:`~dsclean.scanning.fastfork.SUPPORTED` false) the context is
    multiprocessing's own forkserver context and the server a fresh interpreter.
    """
    global _context
    with _context_lock:  # a Dask worker's task threads can get here at once
        if _context is None:
            atexit.register(stop_local_workers)
            fast = fastfork.SUPPORTED
            context = fastfork.WorkerContext() if fast else multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(preload_modules(formats, facts))
            if fast and fork_here and _single_threaded() and not fastfork.server_running():
                _fork_helpers(preload_modules(formats, facts))
            else:
                os.environ[_SERVER_ENV] = "1"  # seen by the server alone: it inherits this environment, then drops it
                try:
                    forkserver.ensure_running()
                finally:
                    os.environ.pop(_SERVER_ENV, None)
            _context = context
    return _context


def _single_threaded() -> bool:
    """Whether this process runs one thread, native ones included (a library's background thread too), where
    ``/proc`` says; else Python's threads alone."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


def _fork_helpers(preload: list[str]) -> None:
    """The resource tracker and the forkserver started as forks of this process (:func:`.fastfork.fork_helpers`)."""
    fastfork.fork_helpers(preload, _SERVER_ENV, _new_context_lock)


def _new_context_lock() -> None:
    """In a fork made while this process held :data:`_context_lock`: a lock of its own (that one is not its to release)."""
    global _context_lock
    _context_lock = threading.Lock()


def preload_modules(formats: Iterable[str] | None = None, facts: bool = True) -> list[str]:
    """What the forkserver imports before forking workers that check ``formats`` (None: any format).

    This module, the formats' checkers, and with ``facts`` for images the image facts' code
    (:mod:`dsclean.quality.image`, imported on first use otherwise: each worker would import it).
    """
    formats = list(FORMATS if formats is None else formats)
    images = facts and any(kind_of(fmt) == "image" for fmt in formats)
    # schema: workers build their chunk's Arrow batch (pyarrow), imported once here rather than per worker
    return [
        __name__,
        "dsclean.scanning.schema",
        "multiprocessing.synchronize",  # a worker unpickles its pool's queues with it
        "dsclean.scanning.traits",  # every check records the file's traits (check_file)
        *checker_modules(formats),
        *(["dsclean.quality.image"] if images else []),
    ]


def _child(conn, root: str, rels: list[str], options: CheckOptions, faults: str | None, at) -> None:
    set_fault_switch(faults)
    conn.send(check_chunk(root, _Tracked(rels, at), options))
    conn.close()


class _Tracked(list):
    """A group's files as :func:`check_chunk` takes them (one at a time, in order): as it takes one, its
    position goes into ``at`` (a shared-memory integer the parent reads), and ``len`` once it took them all.

    So when the process dies or overruns, the parent knows which file it was checking.
    """

    def __init__(self, rels: list, at) -> None:
        super().__init__(rels)
        self.at = at

    def __iter__(self) -> Iterator:
        for i, rel in enumerate(super().__iter__()):
            self.at.value = i
            yield rel
        self.at.value = len(self)


@dataclass
class _Outcome:
    key: object  # what the caller queued with the group
    rels: list[str]
    verdicts: list[Verdict] | None  # None: the child died or was killed
    exitcode: int | None
    overdue: bool
    at: int  # the file it was checking when it ended: a position in rels, -1 before the first, len(rels) after the last


def _in_children(root: str, queue: deque, options: CheckOptions, parallel: int) -> Iterator[_Outcome]:
    """Run each ``(key, files)`` group of ``queue`` in its own fresh process, ``parallel`` at a time.

    Groups may be added to ``queue`` between outcomes. A child whose current file has not changed for
    ``--timeout`` + :data:`_GRACE` seconds (its own timer did not end it: a decoder blocking SIGALRM) is
    killed as overdue: the budget is per file, whatever the size of the group.
    """
    if multiprocessing.current_process().daemon:
        raise UserError(_DAEMONIC)
    ctx = _fresh_process_context()
    running: dict = {}  # pipe end -> [process, key, rels, shared position, last position seen, since when]
    while queue or running:
        while queue and len(running) < max(1, parallel):
            key, rels = queue.popleft()
            parent_end, child_end = ctx.Pipe(duplex=False)
            at = ctx.RawValue("q", -1)
            proc = ctx.Process(
                target=_child, args=(child_end, root, rels, options, os.environ.get(FAULT_ENV), at), daemon=True
            )
            proc.start()
            child_end.close()
            running[parent_end] = [proc, key, rels, at, -1, time.monotonic()]
        # A pipe end is ready when the child sent its verdicts, or died (EOF). Reading before
        # joining matters: a child with a large result blocks in send() until it is read.
        ready = multiprocessing.connection.wait(list(running), timeout=0.5)
        now = time.monotonic()
        for conn in list(running):
            entry = running[conn]
            proc, key, rels, at = entry[:4]
            if at.value != entry[4]:
                entry[4:] = at.value, now
            overdue = options.timeout > 0 and now - entry[5] > options.timeout + _GRACE
            if conn not in ready and not overdue:
                continue
            del running[conn]
            try:
                verdicts = conn.recv() if conn in ready else None
            except EOFError:  # the child died before sending anything
                verdicts = None
            if verdicts is None:
                proc.join(timeout=0 if overdue else 2.0)  # EOF: let a dying child finish dying
                if proc.is_alive():
                    proc.kill()
            proc.join()
            conn.close()
            yield _Outcome(key, rels, verdicts, proc.exitcode, overdue and verdicts is None, at.value)


def isolate(root: str, rels: list[str], options: CheckOptions, parallel: int = 1) -> list[Verdict]:
    """Check files in fresh processes, as :func:`isolate_chunks` does a lost chunk; name the ones that kill them."""
    return next(isolate_chunks(root, [rels], options, parallel))


def isolate_chunks(
    root: str, chunks: list[list[str]], options: CheckOptions, parallel: int = 1
) -> Iterator[list[Verdict]]:
    """Chunks lost with a dead worker, each checked again in a fresh process of its own; yields each
    chunk's verdicts (in its order) once all its files have one.

    A dead local worker takes every chunk in flight with it, most of them innocent: one fresh process
    per chunk re-checks those. A process that dies too is split where it died (:func:`_split`): the
    file it was checking alone, the files before it, the files after it, each part in a fresh process
    (up to ``parallel`` at once) and split again if it dies, until a part of one file dies: that file
    gets :func:`_failure`'s verdict from its own process. So one culprit costs a few processes, not one
    per file of its chunk, and every culprit of a chunk is found (the files after one are checked too).

    A timeout is the file's own (the worker's timer, or the overdue rule here, runs per file): a file
    that was being checked when its process timed out gets its ``timeout`` verdict at once, without a
    process of its own, so a hanging file meets its --timeout twice in all: in the worker pool (which
    breaks as a whole, without saying which file), then in its chunk's fresh process.
    """
    slots: list[list | None] = [[None] * len(chunk) for chunk in chunks]
    missing = [len(chunk) for chunk in chunks]
    queue = deque(((n, 0), chunk) for n, chunk in enumerate(chunks) if chunk)  # key: (chunk, first file's position)
    yield from ([] for chunk in chunks if not chunk)
    for o in _in_children(root, queue, options, parallel):
        n, start = o.key
        found: list[tuple[int, Verdict]] = []
        if o.verdicts is not None:
            found = list(enumerate(o.verdicts, start))
        elif len(o.rels) == 1:
            found = [(start, _failure(root, o.rels[0], options, o.exitcode, o.overdue))]
        else:
            timed_out = o.overdue or o.exitcode == -signal.SIGALRM
            for offset, part in _split(o.rels, o.at):
                if timed_out and offset == o.at:  # the file ran past --timeout on its own clock: that is its verdict
                    found.append((start + offset, _failure(root, part[0], options, o.exitcode, o.overdue)))
                else:
                    queue.append(((n, start + offset), part))
        for at, verdict in found:
            slots[n][at] = verdict
        missing[n] -= len(found)
        if found and not missing[n]:
            yield slots[n]
            slots[n] = None


def _split(rels: list[str], at: int) -> list[tuple[int, list[str]]]:
    """The parts, ``(offset, files)``, to check again of a group whose process died while on file ``at``.

    The file it was on alone (the suspect: it gets its verdict from a process of its own), the files
    before it (checked without dying: most likely innocent, checked again for their verdicts, which died
    with the process) and the files after it (never reached; may hold other culprits). Without a file
    (the process died before its first file or after its last): the two halves.
    """
    if 0 <= at < len(rels):
        parts = [(at, rels[at : at + 1]), (0, rels[:at]), (at + 1, rels[at + 1 :])]
    else:
        half = len(rels) // 2
        parts = [(0, rels[:half]), (half, rels[half:])]
    return [(offset, part) for offset, part in parts if part]


def check_chunk_on_dask_worker(root: str, rels: list[str], options: CheckOptions) -> list[Verdict]:
    """Dask task: check the chunk in the Dask worker's own local loky pool, isolating if it breaks.

    Dask runs tasks in threads, where no per-file timer, memory ceiling or
    stderr capture is possible, and a segfault would take the whole Dask
    worker down. So the chunk runs in a loky process next to the worker (one
    pool per Dask worker, reused across tasks, as in a local scan); if a file
    kills it, the chunk is isolated in fresh processes here (:func:`isolate`).
    """
    from joblib.externals.loky import get_reusable_executor

    if multiprocessing.current_process().daemon:
        raise UserError(_DAEMONIC)
    try:
        from distributed import get_worker

        threads = get_worker().state.nthreads
    except (ImportError, ValueError):  # not on a Dask worker (called directly)
        threads = 1
    try:
        return get_reusable_executor(max_workers=threads, timeout=300).submit(check_chunk, root, rels, options).result()
    except BrokenProcessPool:
        return isolate(root, rels, options)


def _failure(root: str, rel: str, options: CheckOptions, exitcode: int | None, overdue: bool) -> Verdict:
    """The verdict for a file (or byte range, see :class:`FileSlices`) whose own checking process died or overran."""
    name = item_name(root, rel)
    fmt = format_of_name(name)
    v = Verdict(path=name, kind=kind_of(fmt) if fmt else "unknown")
    if isinstance(root, FileSlices):
        v.size = rel[3]
    elif isinstance(root, SampleBytes):
        v.size = len(rel[1])
    else:
        try:
            st = os.stat(os.path.join(root, rel))
            v.size, v.mtime_ns = st.st_size, st.st_mtime_ns
        except OSError as exc:
            v.detail = f"(stat failed: {exc.strerror})"
    return mark_failure(v, options, exitcode, overdue)


def mark_failure(v: Verdict, options: CheckOptions, exitcode: int | None, overdue: bool) -> Verdict:
    """``v`` marked with how its own checking process ended without a verdict (``exitcode``; ``overdue``: killed
    past ``--timeout``): ``timeout``, ``too_large`` (SIGKILL under ``--max-memory``) or ``decoder_crash``.
    Also the bucket scan's (:func:`dsclean.storage.workers.check_alone`)."""
    if overdue or exitcode == -signal.SIGALRM:
        return v.mark(R.BAD, R.TIMEOUT, f"check took longer than {options.timeout:g} s; the worker was killed")
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        if -exitcode == signal.SIGKILL and options.max_memory > 0:
            return v.mark(R.BAD, R.TOO_LARGE, f"the checking process was killed ({name}), likely out of memory")
        return v.mark(R.BAD, R.DECODER_CRASH, f"checking this file killed the decoder's process with {name}")
    return v.mark(R.BAD, R.DECODER_CRASH, f"the checking process exited with code {exitcode} without a verdict")
