"""The guard's exceptions: each names what failed, the budget, and where the log is."""
from __future__ import annotations


class TooManyFailures(RuntimeError):
    """More samples failed than ``max_failures`` allows: a pipeline quietly dropping data is a bug."""

    def __init__(self, message: str, *, failures: int | None = None, budget: float | None = None,
                 seen: int | None = None, log: str | None = None) -> None:
        super().__init__(message)
        self.failures, self.budget, self.seen, self.log = failures, budget, seen, log


class WorkerDied(RuntimeError):
    """A DataLoader worker died (a signal or an exit): names the signal, its usual cause and the samples in flight.

    A ``RuntimeError`` like torch's own message, so existing handlers still catch it.
    """

    def __init__(self, message: str, *, pid: int | None = None, signal: str | None = None,
                 exit_code: int | None = None, samples: list | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.pid, self.signal, self.exit_code, self.kind = pid, signal, exit_code, kind
        self.samples = samples or []
