"""The training loader's exception: a dead worker, named (the guard's are in :mod:`dsclean.data.errors`)."""

from __future__ import annotations


class WorkerDied(RuntimeError):
    """A DataLoader worker died (a signal or an exit): names the signal, its usual cause and the samples in flight.

    A ``RuntimeError`` like torch's own message, so existing handlers still catch it.
    """

    def __init__(
        self,
        message: str,
        *,
        pid: int | None = None,
        signal: str | None = None,
        exit_code: int | None = None,
        samples: list | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.pid, self.signal, self.exit_code, self.kind = pid, signal, exit_code, kind
        self.samples = samples or []
