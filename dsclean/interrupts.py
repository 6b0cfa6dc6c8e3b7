"""SIGINT/SIGTERM as a request to stop between units of work; a second signal interrupts at once.

The scan (between verdict chunks), pack and verify (between shards) install
:func:`stop_on_signals` around their loop and check the request it yields.
Raising KeyboardInterrupt at an arbitrary instruction could land between a file's
quarantine move and the write of its verdict, or between a shard's rename and its
record; a flag the loop checks between units cannot. The first signal sets the
flag (``signum``: the loop finishes the unit in hand, then stops and keeps what
was done; ``dsclean scan`` and ``pack`` then exit 128 + the signal); a second one
raises KeyboardInterrupt where the process is (stop now, still keep what was decided).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


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
    """A :class:`StopRequest` that SIGINT and SIGTERM set while the block runs (their handlers restored after).

    Off the main thread nothing is installed (signals are delivered to the main thread only): the
    request is then set by the caller alone.
    """
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
