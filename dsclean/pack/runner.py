"""Run shard tasks on a pool, a few ahead, in completion order: here, on loky processes, or on Dask.

- ``jobs == 1`` (local): in this process, one shard after the other (for pack, on two
  threads: the next shard is built while the last one's final fsync waits for the disk);
- ``loky``: joblib's reusable process pool on this machine (``--jobs N``);
- ``dask``: a Dask distributed cluster; each shard is one task, written by the
  worker straight to the shared file system (no shard bytes travel through
  the scheduler; a task returns ~24 bytes per sample of records).

At most two tasks per worker slot are in flight, so memory is bounded however
many shards there are. SIGINT/SIGTERM stop submitting and let the shards in
flight finish (each one is complete or absent); a second signal stops at once.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Iterable, Iterator

from ..errors import UserError

BACKENDS = ("loky", "dask")
log = logging.getLogger("dsclean.pack.runner")
#: set when a run of tasks on this process's threads is abandoned (a second signal): tasks check it
ABANDONED = threading.Event()


class StopRequest:
    """Set by SIGINT/SIGTERM (``signum``) or by the caller (``stop``); a second signal interrupts at once."""

    def __init__(self) -> None:
        self.signum = 0
        self.stopped = False

    def __call__(self, signum: int, frame: object) -> None:
        if self.signum:
            raise KeyboardInterrupt
        self.signum = signum

    def stop(self) -> None:
        self.stopped = True

    def __bool__(self) -> bool:
        return bool(self.signum) or self.stopped


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_tasks(fn: Callable, items: Iterable, *, backend: str, jobs: int, scheduler: str | None,
              stop: StopRequest, overlap: bool = False) -> Iterator:
    """Yield ``fn(item)`` for each item, in completion order, until the items end or ``stop`` is set.

    ``overlap`` (``jobs`` 1): two tasks in flight on threads of this process, for tasks that
    do their CPU work one at a time themselves and then wait for the disk (write_shard: the
    next shard is built while the last one's fsync runs).
    """
    if backend not in BACKENDS:
        raise UserError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "loky" and jobs <= 1 and not overlap:
        for item in items:
            if stop:
                return
            yield fn(item)
        return
    if backend == "loky" and jobs <= 1:
        ABANDONED.clear()
        pool = ThreadPoolExecutor(2, thread_name_prefix="pack-task")
        executor, slots, close = pool, 1, (lambda: pool.shutdown(wait=True, cancel_futures=True))
    elif backend == "dask":
        from ..scanning.executors import connect_dask

        client, slots = connect_dask(scheduler)
        executor, close = client.get_executor(pure=False), client.close
    else:
        from joblib.externals.loky import get_reusable_executor

        executor, slots, close = get_reusable_executor(max_workers=jobs, timeout=60), jobs, (lambda: None)
    source = iter(items)
    in_flight: dict[Future, object] = {}
    retry: list = []  # items a dead worker took: first in the next pool
    fresh = 0  # pools started because workers died
    try:
        while True:
            broken = False
            while not stop and len(in_flight) < 2 * slots:
                item = retry.pop(0) if retry else next(source, None)
                if item is None:
                    break
                try:
                    in_flight[executor.submit(fn, item)] = item
                except Exception as exc:  # a worker died since the last wait: the pool refuses new tasks
                    if not _lost_worker(exc):
                        raise
                    retry.insert(0, item)
                    broken = True
                    break
            if not in_flight and not broken:
                return
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED) if in_flight else (set(), set())
            for future in done:
                item = in_flight.pop(future)
                exc = future.exception()
                if exc is None:
                    yield future.result()
                elif _lost_worker(exc):
                    retry.append(item)
                    broken = True
                else:
                    raise exc
            if broken and backend == "loky":
                # the whole pool is gone: its other tasks end as lost too (or done, before the death)
                for future in list(in_flight):
                    item = in_flight.pop(future)
                    exc = future.exception()
                    if exc is None:
                        yield future.result()
                    elif _lost_worker(exc):
                        retry.append(item)
                    else:
                        raise exc
                fresh += 1
                executor.shutdown(wait=True, kill_workers=True)  # nothing of the dead pool is left to wait for
                if fresh > RETRIES:
                    raise WorkersLost(retry, f"worker processes died {fresh} times (killed: out of memory?)")
                log.warning("a worker process died; its %d task(s) run again in a new pool (%d of %d)",
                            len(retry), fresh, RETRIES)
                executor = get_reusable_executor(max_workers=jobs, timeout=60)
    except BaseException:  # a second signal: tasks on threads give up (write_shard removes its temp file)
        ABANDONED.set()
        raise
    finally:
        for future in in_flight:
            future.cancel()
        if fresh and backend == "loky":  # a pool that lost workers once is not kept for the next run
            executor.shutdown(wait=True, kill_workers=True)
        close()


def release_workers() -> None:
    """Stop the kept loky workers now, killing any that hang (the ``dsclean pack`` command, at its end).

    Left to the interpreter's exit, a pool that lost a worker can keep the process waiting for its
    manager thread; stopped here, with ``kill_workers``, nothing of it is left to wait for."""
    from joblib.externals.loky import reusable_executor

    executor = getattr(reusable_executor, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)


#: new loky pools one run may start after worker processes died (each runs the dead pool's tasks again)
RETRIES = 2


class WorkersLost(RuntimeError):
    """Worker processes kept dying: ``items`` (each tried in every pool) were never done."""

    def __init__(self, items: list, why: str) -> None:
        super().__init__(why)
        self.items = items


def _lost_worker(exc: BaseException) -> bool:
    """A process pool broke: a worker was killed (loky's TerminatedWorkerError is a BrokenProcessPool)."""
    from concurrent.futures.process import BrokenProcessPool

    return isinstance(exc, BrokenProcessPool)
