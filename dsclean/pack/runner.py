"""Run shard tasks on a pool, a few ahead, in completion order: here, on loky processes, or on Dask.

- ``jobs == 1`` (local): in this process, one shard after the other (for pack, on two
  threads: the next shard is built while the last one's final fsync waits for the disk);
- ``loky``: joblib's reusable process pool on this machine (``--jobs N``);
- ``dask``: a Dask distributed cluster; each shard is one task, written by the
  worker straight to the shared file system (no shard bytes travel through
  the scheduler; a task returns ~24 bytes per sample of records).

At most two tasks per worker slot are in flight, so memory is bounded however
many shards there are. SIGINT/SIGTERM stop submitting and let the shards in
flight finish (each one is complete or absent); a second signal stops at once
(:func:`dsclean.interrupts.stop_on_signals`, installed by the callers).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

from ..errors import UserError
from ..inflight import InFlight
from ..interrupts import StopRequest

BACKENDS = ("loky", "dask")
log = logging.getLogger("dsclean.pack.runner")
#: set when a run of tasks on this process's threads is abandoned (a second signal): tasks check it
ABANDONED = threading.Event()


def run_tasks(
    fn: Callable,
    items: Iterable,
    *,
    backend: str,
    jobs: int,
    scheduler: str | None,
    stop: StopRequest,
    overlap: bool = False,
) -> Iterator:
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
    flight: InFlight = InFlight(items)  # .again: items a dead worker took, first in the next pool
    fresh = 0  # pools started because workers died
    try:
        while True:
            broken = (
                flight.fill(lambda item: executor.submit(fn, item), 2 * slots, stop=stop.__bool__, broken=_lost_worker)
                is not None
            )
            if not flight and not broken:
                return
            for item, result, lost in flight.completed(_lost_worker):
                if lost:
                    flight.again.append(item)
                    broken = True
                else:
                    yield result
            if broken and backend == "loky":
                # the whole pool is gone: its other tasks end as lost too (or done, before the death)
                for item, result, lost in flight.drain(_lost_worker):
                    if lost:
                        flight.again.append(item)
                    else:
                        yield result
                fresh += 1
                executor.shutdown(wait=True, kill_workers=True)  # nothing of the dead pool is left to wait for
                if fresh > RETRIES:
                    raise WorkersLost(
                        list(flight.again), f"worker processes died {fresh} times (killed: out of memory?)"
                    )
                log.warning(
                    "a worker process died; its %d task(s) run again in a new pool (%d of %d)",
                    len(flight.again),
                    fresh,
                    RETRIES,
                )
                executor = get_reusable_executor(max_workers=jobs, timeout=60)
    except BaseException:  # a second signal: tasks on threads give up (write_shard removes its temp file)
        ABANDONED.set()
        raise
    finally:
        flight.cancel()
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
