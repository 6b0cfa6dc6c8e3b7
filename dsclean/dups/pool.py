"""Run dups' worker tasks on the scan's loky pool, a few chunks ahead, surviving hostile files.

The executor is the scan's (:func:`dsclean.scanning.executors.make_pool`). When a
worker dies (a decoder segfaults, or the per-file time limit kills it), every
chunk in flight is lost with the pool; those files are re-run one per task on a
fresh pool, so the culprit is named and its neighbours get their answers.
"""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterable, Iterator

from ..inflight import InFlight
from ..scanning.executors import make_pool
from .worker import Limits

#: (root: a folder, or a :class:`dsclean.storage.fs.Store` for a bucket prefix; chunk; limits) -> answers
Task = Callable[[Any, list, Limits], list]


def run_chunks(
    task: Task, root: Any, chunks: Iterable[list], limits: Limits, workers: int, on_death: Callable[[Any], object]
) -> Iterator[tuple[list, list]]:
    """Yield (rels, answers) per chunk as they finish; a file that kills its worker gets ``on_death(rel)``."""
    pool = make_pool("loky", workers)
    flight: InFlight[list] = InFlight(chunks)
    try:
        while True:
            flight.fill(lambda chunk: pool.executor.submit(task, root, chunk, limits), 2 * workers)
            if not flight:
                return
            lost: list[list] = []
            for chunk, answers, died in flight.completed(_broken):
                if died:
                    lost.append(chunk)
                else:
                    yield chunk, answers
            if lost:
                lost += flight.drop()  # the whole pool went down with every chunk in it
                for chunk in lost:
                    yield chunk, [_one_by_one(task, root, rel, limits, on_death) for rel in chunk]
                pool = make_pool("loky", workers)
    finally:
        flight.cancel()


def fresh_workers(workers: int) -> None:
    """Start the pool's worker processes anew (the idle ones of an earlier run in this process are ended):
    a bucket's credentials come from the environment (``AWS_*``, profiles), and a reused worker keeps the
    environment it was started with. The next :func:`run_chunks` reuses these workers."""
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor(max_workers=workers, timeout=60, reuse=False)  # make_pool's arguments: reused after


def _broken(exc: BaseException) -> bool:
    """A worker died (a decoder crashed, or its time limit killed it): the pool broke."""
    return isinstance(exc, BrokenProcessPool)


def _one_by_one(task: Task, root: Any, rel: Any, limits: Limits, on_death: Callable[[Any], object]):
    """Run one file alone on a fresh single-worker pool; if it kills that worker too, it is the culprit."""
    pool = make_pool("loky", 1)
    try:
        return pool.executor.submit(task, root, [rel], limits).result()[0]
    except BrokenProcessPool:
        return on_death(rel)
