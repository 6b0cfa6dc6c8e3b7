"""The CLI's view of the ``dsclean`` logger: library notes printed as ``note:`` / ``error:`` lines.

Library code never prints: it logs on ``dsclean.*`` loggers, and the package's own
``NullHandler`` keeps Python's last-resort handler from printing them, so a program (a
training script under DDP, every rank importing dsclean) decides with its logging config what
shows. A command is such a program: :func:`notes_at` prints the records at ``level`` and above
while the command runs (``-q``: errors only).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Iterator


class _NoteFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        prefix = "error" if record.levelno >= logging.ERROR else "note"
        return f"{prefix}: {record.getMessage()}"


class _StderrHandler(logging.Handler):
    """Writes to the ``sys.stderr`` of the moment (a test's capture, a redirected stream)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):  # the reader went away, or the stream was closed
            pass


@contextlib.contextmanager
def notes_at(level: int = logging.WARNING) -> Iterator[logging.Handler]:
    """Print ``dsclean`` log records at ``level`` and above on stderr for the duration of the block."""
    log = logging.getLogger("dsclean")
    handler = _StderrHandler(level)
    handler.setFormatter(_NoteFormatter())
    old = log.level
    if log.getEffectiveLevel() > level:
        log.setLevel(level)
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
