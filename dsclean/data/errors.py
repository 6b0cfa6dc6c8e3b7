"""What a sample's failure raises: the sample named (index, path, root), or the budget passed.

Below both :mod:`.dataset` and :mod:`.guard`, so the guard can name what it catches without
importing the dataset that runs it.
"""

from __future__ import annotations


class SampleError(Exception):
    """A sample failed to load: the message names the index, the path, the root and the cause.

    Built from a single message string, because a DataLoader worker re-raises an
    exception in the main process as ``type(exc)(message)``; the extra attributes
    survive ordinary pickling (they live in ``__dict__``).
    """

    def __init__(
        self, message: str, *, index: int | None = None, path: str | None = None, root: str | None = None
    ) -> None:
        super().__init__(message)
        self.index, self.path, self.root = index, path, root


class UnsafePathError(SampleError):
    """An index entry is absolute or leads outside the root. Never skipped, even with ``on_error="skip"``."""


class TooManyFailures(RuntimeError):
    """More samples failed than ``max_failures`` allows: a pipeline quietly dropping data is a bug."""

    def __init__(
        self,
        message: str,
        *,
        failures: int | None = None,
        budget: float | None = None,
        seen: int | None = None,
        log: str | None = None,
    ) -> None:
        super().__init__(message)
        self.failures, self.budget, self.seen, self.log = failures, budget, seen, log
