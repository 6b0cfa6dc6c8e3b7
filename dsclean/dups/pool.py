"""Run dups' worker tasks on the scan's loky pool, a few chunks ahead, surviving hostile files.

The executor is the scan's (:func:`dsclean.scanning.executors.make_pool`). When a
worker dies (a decoder segfaults, or the per-file time limit kills it), every
chunk in flight is lost with the pool; those files are re-run one per task on a
fresh pool, so the culprit is named and its neighbours get their answers.
"""
from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterable, Iterator

from ..scanning.executors import make_pool
from .worker import Limits

Task = Callable[[str, list[str], Limits], list]


def run_chunks(task: Task, root: str, chunks: Iterable[list[str]], limits: Limits, workers: int,
               on_death: Callable[[str], object]) -> Iterator[tuple[list[str], list]]:
    """Yield (rels, answers) per chunk as they finish; a file that kills its worker gets ``on_death(rel)``."""
    pool = make_pool("loky", workers)
    source = iter(chunks)
    in_flight: dict[Future, list[str]] = {}
    try:
        while True:
            while len(in_flight) < 2 * workers:
                chunk = next(source, None)
                if chunk is None:
                    break
                in_flight[pool.executor.submit(task, root, chunk, limits)] = chunk
            if not in_flight:
                return
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            lost: list[list[str]] = []
            for future in done:
                chunk = in_flight.pop(future)
                exc = future.exception()
                if exc is None:
                    yield chunk, future.result()
                elif isinstance(exc, BrokenProcessPool):
                    lost.append(chunk)
                else:
                    raise exc
            if lost:
                lost += in_flight.values()  # the whole pool went down with every chunk in it
                in_flight.clear()
                for chunk in lost:
                    yield chunk, [_one_by_one(task, root, rel, limits, on_death) for rel in chunk]
                pool = make_pool("loky", workers)
    finally:
        for future in in_flight:
            future.cancel()


def _one_by_one(task: Task, root: str, rel: str, limits: Limits, on_death: Callable[[str], object]):
    """Run one file alone on a fresh single-worker pool; if it kills that worker too, it is the culprit."""
    pool = make_pool("loky", 1)
    try:
        return pool.executor.submit(task, root, [rel], limits).result()[0]
    except BrokenProcessPool:
        return on_death(rel)
