"""Tasks on an executor a few ahead of their results: bounded submission, completion-order results.

The scan's checks (:func:`dsclean.scanning.executors.run_checks`), dups' chunks
(:func:`dsclean.dups.pool.run_chunks`) and pack's shards (:func:`dsclean.pack.runner.run_tasks`)
all submit from a stream that may be long (millions of files), keep at most a few
tasks per worker slot in flight, so memory stays bounded however long it is, and
take results as they finish. What each does when a worker dies (the pool breaks)
is its own: :class:`InFlight` only says which items were lost with it.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")
_END = object()


class InFlight(Generic[T]):
    """The futures submitted from ``items`` and not yet taken, each with its item.

    ``again``: items to submit before the stream's next ones (refused by a broken pool, or lost
    with one and to run again).
    """

    def __init__(self, items: Iterable[T]) -> None:
        self.source: Iterator[T] = iter(items)
        self.futures: dict[Future, T] = {}
        self.again: deque[T] = deque()

    def __len__(self) -> int:
        return len(self.futures)

    def fill(
        self,
        submit: Callable[[T], Future],
        limit: int,
        *,
        stop: Callable[[], object] | None = None,
        broken: Callable[[BaseException], bool] | None = None,
    ) -> BaseException | None:
        """Submit items until ``limit`` are in flight, the items end, or ``stop()`` is true.

        Returns the exception ``submit`` raised if ``broken`` says it means a dead pool (the pool refuses
        new tasks once a worker died): that item is first in line again. Any other exception propagates.
        """
        while len(self.futures) < limit and not (stop is not None and stop()):
            item: Any = self.again.popleft() if self.again else next(self.source, _END)
            if item is _END:
                break
            try:
                self.futures[submit(item)] = item
            except Exception as exc:
                if broken is None or not broken(exc):
                    raise
                self.again.appendleft(item)
                return exc
        return None

    def completed(self, broken: Callable[[BaseException], bool]) -> Iterator[tuple[T, Any, bool]]:
        """Wait for the first task to finish (none in flight: nothing); each finished one, taken out.

        ``(item, result, False)``, or ``(item, None, True)`` when its exception is one ``broken`` says
        a dead worker caused; any other exception of a task is raised.
        """
        if not self.futures:
            return iter(())
        done, _ = wait(self.futures, return_when=FIRST_COMPLETED)
        return self._outcomes(done, broken)

    def drain(self, broken: Callable[[BaseException], bool]) -> Iterator[tuple[T, Any, bool]]:
        """Every task still in flight, in submission order, each waited for: as :meth:`completed`."""
        return self._outcomes(list(self.futures), broken)

    def drop(self) -> list[T]:
        """Take every task still in flight out, without waiting (their pool is gone): their items."""
        items = list(self.futures.values())
        self.futures.clear()
        return items

    def cancel(self) -> None:
        """Cancel what is still queued (a generator closed early, an error): tasks already running finish."""
        for future in self.futures:
            future.cancel()

    def _outcomes(
        self, futures: Iterable[Future], broken: Callable[[BaseException], bool]
    ) -> Iterator[tuple[T, Any, bool]]:
        for future in futures:
            item = self.futures.pop(future)
            exc = future.exception()
            if exc is None:
                yield item, future.result(), False
            elif broken(exc):
                yield item, None, True
            else:
                raise exc
