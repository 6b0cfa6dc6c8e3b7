"""Run check chunks on a pool of workers, a few chunks ahead, and survive workers that die.

The pool is any ``concurrent.futures`` executor: loky's reusable process pool
(joblib's engine, the default), a thread pool, or a Dask cluster's executor.
Chunks stream in from discovery; at most ``2 x workers`` are in flight, so
memory is bounded however long the stream is; verdicts come back in
completion order.

When a process worker dies (a decoder segfaults, aborts, or hits the
per-file timeout, see :mod:`dsclean.worker`), every chunk that was in flight
is lost with the pool. Those files are then re-checked one per fresh process,
so the culprit is known exactly: it gets ``decoder_crash`` (with the signal)
or ``timeout``; its neighbours get their normal verdicts; the scan goes on
with a new pool.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterable, Iterator

from . import reasons as R
from .check import CheckOptions
from .formats import format_of_name, kind_of
from .verdict import Verdict
from .worker import check_chunk, check_chunk_in_thread

BACKENDS = ("loky", "threads")

#: extra seconds the parent grants an isolated check beyond --timeout before killing it itself
_GRACE = 5.0


def make_executor(backend: str, workers: int) -> tuple[Executor, Callable]:
    """A fresh executor for ``backend`` and the task function its workers run."""
    if backend == "loky":
        from joblib.externals.loky import get_reusable_executor

        # After a worker died the old pool is broken; get_reusable_executor then builds a new one.
        return get_reusable_executor(max_workers=workers, timeout=60), check_chunk
    if backend == "threads":
        from concurrent.futures import ThreadPoolExecutor

        return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dsclean-check"), check_chunk_in_thread
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def run_checks(
    root: str,
    chunks: Iterable[list[str]],
    options: CheckOptions,
    workers: int,
    backend: str = "loky",
    executor: Executor | None = None,
) -> Iterator[list[Verdict]]:
    """Yield verdict chunks as they finish. Closing the generator cancels what is still queued."""
    if executor is None:
        executor, task = make_executor(backend, workers)
    else:
        task = check_chunk
    source = iter(chunks)
    in_flight: dict[Future, list[str]] = {}
    try:
        while True:
            while len(in_flight) < 2 * workers:
                chunk = next(source, None)
                if chunk is None:
                    break
                in_flight[executor.submit(task, root, chunk, options)] = chunk
            if not in_flight:
                return
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            lost: list[list[str]] = []
            for future in done:
                chunk = in_flight.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool:
                    lost.append(chunk)
                    continue
                yield result
            if lost:
                # The pool is gone, and with it every chunk still in flight.
                lost += in_flight.values()
                in_flight.clear()
                for chunk in lost:
                    yield isolate(root, chunk, options, workers)
                executor, task = make_executor(backend, workers)
    finally:
        for future in in_flight:
            future.cancel()


# ---- isolation: one file per fresh process ---------------------------------------------------

_context = None


def _fresh_process_context():
    """A forkserver: each isolated check forks from a clean, single-threaded, pre-imported server."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["dsclean.worker", "dsclean.check_image", "dsclean.check_audio"])
    return _context


def _isolated_child(conn, root: str, rel: str, options: CheckOptions) -> None:
    conn.send(check_chunk(root, [rel], options)[0])
    conn.close()


def isolate(root: str, rels: list[str], options: CheckOptions, parallel: int = 1) -> list[Verdict]:
    """Check each file in its own fresh process (``parallel`` at a time); name the ones that kill it."""
    ctx = _fresh_process_context()
    queue = list(rels)
    running: dict[int, tuple] = {}  # sentinel -> (process, conn, rel, started)
    verdicts: list[Verdict] = []
    limit = options.timeout + _GRACE if options.timeout > 0 else None
    while queue or running:
        while queue and len(running) < max(1, parallel):
            rel = queue.pop(0)
            parent_end, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_isolated_child, args=(child_end, root, rel, options), daemon=True)
            proc.start()
            child_end.close()
            running[proc.sentinel] = (proc, parent_end, rel, time.monotonic())
        ready = multiprocessing.connection.wait(list(running), timeout=0.5)
        now = time.monotonic()
        for sentinel in list(running):
            proc, conn, rel, started = running[sentinel]
            overdue = limit is not None and now - started > limit
            if sentinel not in ready and not overdue:
                continue
            del running[sentinel]
            if overdue and proc.is_alive():
                proc.kill()
            proc.join()
            verdicts.append(_collect(conn, proc.exitcode, root, rel, options, overdue))
            conn.close()
    return verdicts


def _collect(conn, exitcode: int | None, root: str, rel: str, options: CheckOptions, overdue: bool) -> Verdict:
    if exitcode == 0 and conn.poll():
        return conn.recv()
    fmt = format_of_name(rel)
    v = Verdict(path=rel, kind=kind_of(fmt) if fmt else "unknown", format=None)
    try:
        st = os.stat(os.path.join(root, rel))
        v.size, v.mtime_ns = st.st_size, st.st_mtime_ns
    except OSError as exc:
        v.detail = f"(stat failed: {exc.strerror})"
    if overdue or exitcode == -signal.SIGALRM:
        return v.mark(R.BAD, R.TIMEOUT, f"check took longer than {options.timeout:g} s; the worker was killed")
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        if -exitcode == signal.SIGKILL and options.max_memory:
            return v.mark(R.BAD, R.TOO_LARGE, f"the checking process was killed ({name}), likely out of memory")
        return v.mark(R.BAD, R.DECODER_CRASH, f"checking this file killed the decoder's process with {name}")
    return v.mark(R.BAD, R.DECODER_CRASH, f"the checking process exited with code {exitcode} without a verdict")
