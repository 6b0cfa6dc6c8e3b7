"""The checks of a chunk of objects: a bounded pool of reader threads per worker, checks as bytes arrive.

Runs in a worker process (or in the scanning process with ``--jobs 1``): each worker opens the store
itself (the options travel with the task, never to disk), keeps at most ``threads`` reads in flight,
checks each object with the scan's own :func:`~dsclean.scanning.check.check_bytes` from memory, or
with :func:`~dsclean.scanning.check.check_file` on a temp file for an object past
``policy.max_in_memory`` (removed after the check).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .. import reasons as R
from ..openfile import open_regular_file
from ..scanning.check import CheckOptions, check_bytes, check_file
from ..scanning.verdict import Verdict
from ..scanning.worker import effective_ceiling, memory_ceiling, time_limit
from .fs import Store
from .listing import Obj
from .reads import DEFAULT_READ_THREADS, ObjectError, ReadPolicy, classify, quiet_store_retries, retried


@dataclass
class ChunkResult:
    verdicts: list[Verdict] = field(default_factory=list)
    etags: list[str | None] = field(default_factory=list)  # per verdict: the ETag of the bytes checked
    retries: int = 0
    read_bytes: int = 0
    alone: list[int] = field(default_factory=list)  # verdicts too_large with reads beside: check these alone


@dataclass(frozen=True)
class Fetched:
    obj: Obj
    data: bytes | None = None
    temp: str | None = None  # a temp file holding the object (past the in-memory threshold)
    etag: str | None = None
    error: ObjectError | None = None
    short_of_memory: bool = False  # the read failed for memory beside a check near its ceiling: read it again


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> None:
        self.n += 1


def fetch(store: Store, obj: Obj, policy: ReadPolicy, tmpdir: str, retries: _Counter) -> Fetched:
    """One object's bytes (or a temp file of them), or the :class:`ObjectError` saying why not."""
    fs, path = store.fs, store.path(obj.rel)
    try:
        if store.scheme == "file":
            return _fetch_local(obj, path, policy, tmpdir)
        size, etag = obj.size, obj.etag
        if size is None:  # from a manifest without sizes: ask (one HEAD)
            info = retried(lambda: fs.info(path), obj.rel, policy, retries)
            size, etag = info.get("size"), (info.get("ETag") or "").strip('"') or None
        if size is not None and size > policy.max_in_memory:
            fd, temp = tempfile.mkstemp(dir=tmpdir, suffix=os.path.splitext(obj.rel)[1])
            os.close(fd)
            try:
                retried(lambda: fs.get_file(path, temp), obj.rel, policy, retries)
            except BaseException:
                os.unlink(temp)
                raise
            return Fetched(obj, temp=temp, etag=etag)
        # one GET per object (s3fs would first HEAD it to split a large one into concurrent ranges)
        extra = {"max_concurrency": 1} if store.scheme in ("s3", "s3a") else {}
        data = retried(lambda: fs.cat_file(path, **extra), obj.rel, policy, retries)
        return Fetched(obj, data=data, etag=etag)
    except Exception as exc:
        if _out_of_memory(exc):  # the ceiling of the check running meanwhile: not the object's doing
            detail = "out of memory reading it, outside any check's ceiling"
            return Fetched(obj, error=ObjectError(obj.rel, R.UNREADABLE, detail), short_of_memory=True)
        return Fetched(obj, error=classify(obj.rel, exc))


def _out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc`` is (or was raised from, or while handling) a MemoryError."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, MemoryError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _fetch_local(obj: Obj, path: str, policy: ReadPolicy, tmpdir: str) -> Fetched:
    """A ``file://`` object read through :func:`~dsclean.openfile.open_regular_file`: a FIFO or a device (a
    manifest may name one; the listing skips them) is refused at once, never opened to block or act."""
    with open_regular_file(path) as f:
        if os.fstat(f.fileno()).st_size <= policy.max_in_memory:
            return Fetched(obj, data=f.read(), etag=obj.etag)
        fd, temp = tempfile.mkstemp(dir=tmpdir, suffix=os.path.splitext(obj.rel)[1])
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(f, out, 1 << 20)
        except BaseException:
            os.unlink(temp)
            raise
        return Fetched(obj, temp=temp, etag=obj.etag)


def check_objects(
    store: Store,
    objs: list[Obj],
    check: CheckOptions,
    policy: ReadPolicy,
    threads: int,
    capture_stderr: bool = True,
    isolated: bool = False,
    on_check: Callable[[], None] | None = None,
) -> ChunkResult:
    """Verdicts of ``objs`` (named by key relative to the prefix), reading ``threads`` at a time.

    ``isolated``: this is a worker process of the scan's own pool, whose main thread runs the checks:
    each check runs under ``--timeout`` (past it SIGALRM ends the process; the scan finds the object
    that did it, see :func:`dsclean.storage.scan._run`) and under ``--max-memory`` (RLIMIT_AS set for the
    check alone, as the local worker sets it: an allocation past it is a MemoryError, ``too_large``). The
    reader threads share that address space: a read that fails for memory during a check is read again
    after it, outside the ceiling (never an innocent object's verdict); a check that ran out of memory while
    reads were in flight (they may have used its headroom) is listed in ``alone``, for :func:`settle` to check
    again alone. ``on_check``: called as each
    check starts (after its read).
    """
    ceiling = 0
    if isolated:
        _arm_faults()
        ceiling = effective_ceiling(check.max_memory)
    quiet_store_retries(store.fs, store.scheme)
    out, retries = ChunkResult(), _Counter()
    pool, tmpdir = _pool(threads), _tmpdir()
    pending: deque[Future[Fetched]] = deque()
    items = iter(objs)
    try:
        while True:
            while len(pending) < max(1, threads) * 2:  # reads a little ahead of the checks, bounded
                obj = next(items, None)
                if obj is None:
                    break
                pending.append(pool.submit(fetch, store, obj, policy, tmpdir, retries))
            if not pending:
                break
            got = pending.popleft().result()
            if got.short_of_memory:  # read beside a check near its ceiling: again, now that none runs
                got = fetch(store, got.obj, policy, tmpdir, retries)
            if on_check is not None:
                on_check()
            beside = ceiling > 0 and any(not fut.done() for fut in pending)  # reads that may allocate meanwhile
            with time_limit(check.timeout if isolated else 0), memory_ceiling(ceiling):
                out.verdicts.append(_verdict(got, check, capture_stderr))
            if beside and out.verdicts[-1].reason == R.TOO_LARGE:  # the reads may have used the check's headroom
                out.alone.append(len(out.verdicts) - 1)
            out.etags.append(got.etag)
            out.read_bytes += len(got.data) if got.data is not None else (got.obj.size or 0) if got.temp else 0
    finally:
        for fut in pending:  # an error mid-chunk: the reads already started finish, their temp files go
            got = fut.result()
            if got.temp is not None:
                os.unlink(got.temp)
    out.retries = retries.n
    return out


_POOL: tuple[int, ThreadPoolExecutor] | None = None
_TMPDIR: str | None = None


def _pool(threads: int) -> ThreadPoolExecutor:
    """This process's reader threads (kept between chunks: starting threads per chunk costs more than
    reading small objects)."""
    global _POOL
    threads = max(1, threads)
    if _POOL is None or _POOL[0] != threads:
        if _POOL is not None:
            _POOL[1].shutdown(wait=True)
        _POOL = (threads, ThreadPoolExecutor(threads, thread_name_prefix="dsclean-read"))
    return _POOL[1]


def _tmpdir() -> str:
    """This process's folder for objects past the in-memory threshold (each removed after its check;
    the empty folder at exit)."""
    global _TMPDIR
    if _TMPDIR is None or not os.path.isdir(_TMPDIR):
        _TMPDIR = tempfile.mkdtemp(prefix="dsclean-objects-")
        atexit.register(_rmdir, _TMPDIR)
    return _TMPDIR


def _rmdir(path: str) -> None:
    with contextlib.suppress(OSError):  # not empty: a temp copy of a check killed mid-way stays for a look
        os.rmdir(path)


def _verdict(got: Fetched, check: CheckOptions, capture_stderr: bool) -> Verdict:
    obj = got.obj
    if got.error is not None:
        v = Verdict(path=obj.rel, kind=_kind(obj.rel), size=obj.size, mtime_ns=obj.mtime_ns)
        status = R.WARN if got.error.reason == R.NOT_REGULAR else R.BAD  # as the local scan: not judged, kept
        return v.mark(status, got.error.reason, got.error.detail)
    if got.temp is not None:
        try:
            v = check_file(os.path.dirname(got.temp), os.path.basename(got.temp), check, capture_stderr=capture_stderr)
        finally:
            os.unlink(got.temp)
        v.path = obj.rel
    else:
        assert got.data is not None
        v = check_bytes(got.data, obj.rel, check, capture_stderr=capture_stderr)
    v.mtime_ns = obj.mtime_ns
    return v


def _kind(rel: str) -> str:
    from ..formats import format_of_name, kind_of

    fmt = format_of_name(rel)
    return kind_of(fmt) if fmt else "unknown"


def run_chunk(args: tuple[Store, list[Obj], CheckOptions, ReadPolicy, int]) -> Any:
    """The task a Dask worker runs (one picklable argument). Tasks run in the Dask worker's threads, side by
    side: no time limit, and fd 2 left alone (redirecting it is process-wide)."""
    return check_objects(*args, capture_stderr=False)


def run_chunk_isolated(args: tuple[Store, list[Obj], CheckOptions, ReadPolicy, int]) -> Any:
    """The task a worker process of the scan's own pool runs: each check under ``--timeout``."""
    return check_objects(*args, isolated=True)


#: seconds past ``--timeout`` before a lone check whose own timer did not end it is killed (the local scan's)
GRACE = 5.0


def check_alone(
    store: Store, obj: Obj, check: CheckOptions, policy: ReadPolicy, env: tuple[tuple[str, str], ...]
) -> ChunkResult:
    """``obj`` read and checked in a fresh worker process of its own (an object that ended a pool worker):
    its verdict, or, when this process too ends without one, how it ended, with the local scan's reasons
    (:func:`dsclean.scanning.executors.mark_failure`): ``timeout`` (its timer's SIGALRM, or overdue by
    :data:`GRACE`: a decoder blocking the signal), ``decoder_crash`` naming the signal, ``too_large``."""
    import multiprocessing
    import multiprocessing.connection
    import time

    ctx = multiprocessing.get_context("forkserver")
    parent_end, child_end = ctx.Pipe(duplex=False)
    started = ctx.RawValue("d", 0.0)  # when its check began (after the read), on the system's monotonic clock
    proc = ctx.Process(target=_alone, args=(child_end, env, store, obj, check, policy, started), daemon=True)
    proc.start()
    child_end.close()
    result, overdue = None, False
    try:
        while True:
            ready = multiprocessing.connection.wait([parent_end, proc.sentinel], timeout=0.5)
            if parent_end in ready:
                with contextlib.suppress(EOFError):
                    result = parent_end.recv()
                break
            if proc.sentinel in ready:
                break
            if check.timeout > 0 and started.value and time.monotonic() - started.value > check.timeout + GRACE:
                overdue = True
                break
    finally:
        proc.join(timeout=0 if overdue else 2.0)
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent_end.close()
    if result is not None:
        return result
    from ..scanning.executors import mark_failure

    v = Verdict(path=obj.rel, kind=_kind(obj.rel), size=obj.size, mtime_ns=obj.mtime_ns)
    return ChunkResult(verdicts=[mark_failure(v, check, proc.exitcode, overdue)], etags=[obj.etag])


def settle(
    result: ChunkResult,
    objs: list[Obj],
    store: Store,
    check: CheckOptions,
    policy: ReadPolicy,
    env: tuple[tuple[str, str], ...],
) -> ChunkResult:
    """``result`` (of ``objs``) with each verdict listed in ``result.alone`` replaced by the verdict of its object
    checked again by :func:`check_alone` (a fresh process, the ceiling alone, no reads beside it): a too_large
    that the reader threads' buffers caused is not the object's (nor moved to the quarantine)."""
    for i in result.alone:
        again = check_alone(store, objs[i], check, policy, env)
        result.verdicts[i], result.etags[i] = again.verdicts[0], again.etags[0]
        result.retries += again.retries
    result.alone = []
    return result


def _alone(conn, env, store: Store, obj: Obj, check: CheckOptions, policy: ReadPolicy, started) -> None:
    """The process of :func:`check_alone`."""
    import time

    init_worker(env, check.facts)

    def began() -> None:
        started.value = time.monotonic()

    conn.send(check_objects(store, [obj], check, policy, 1, isolated=True, on_check=began))
    conn.close()


def init_worker(env: tuple[tuple[str, str], ...], facts: bool) -> None:
    """Initializer of the scan's worker processes: the local scan's (the handed variables: the stores'
    credentials as the scan has them now, the fault switch; end with the scan's process), then every checker imported now, outside any check's time limit (a first check that
    imports its decoder under a loaded machine must not be mistaken for a hang)."""
    import importlib

    from ..scanning.executors import preload_modules
    from ..scanning.worker import start_worker

    start_worker(env)
    for name in preload_modules(None, facts):
        importlib.import_module(name)
    from PIL import Image

    Image.init()  # Pillow's format plugins, registered on the first open otherwise


def _arm_faults() -> None:
    """dsclean's own tests' fault switch (DSCLEAN_TEST_FAULTS=1: objects named __hang__, __segfault__, ...
    really hang or crash their check), as the local scan's workers arm it; inert otherwise."""
    from ..scanning import check as check_module
    from ..scanning.worker import FAULT_ENV, inject_fault

    check_module.fault_hook = inject_fault if os.environ.get(FAULT_ENV) == "1" else None


def read_ahead(
    store: Store, objs: list[Obj], policy: ReadPolicy = ReadPolicy(), threads: int = DEFAULT_READ_THREADS
) -> Iterator[Fetched]:
    """Each object of ``objs`` read (:func:`fetch`), in order, at most ``2 * threads`` reads ahead on this
    process's reader threads (memory: that many objects). For readers other than the scan's checks
    (``dsclean dups``): the caller removes the temp file of each object it is given; those read ahead and
    not taken (the caller stopped early) are removed here."""
    quiet_store_retries(store.fs, store.scheme)
    pool, tmpdir, retries = _pool(threads), _tmpdir(), _Counter()
    pending: deque[Future[Fetched]] = deque()
    items = iter(objs)
    try:
        while True:
            while len(pending) < 2 * max(1, threads):
                obj = next(items, None)
                if obj is None:
                    break
                pending.append(pool.submit(fetch, store, obj, policy, tmpdir, retries))
            if not pending:
                return
            yield pending.popleft().result()
    finally:
        for fut in pending:
            got = fut.result()
            if got.temp is not None:
                os.unlink(got.temp)
