"""A tiny shared-memory table: one row per process of a DataLoader, written without locks.

Row 0 is the main process, row ``1 + worker id`` a worker. Each process writes only its own
row (int64 words, so a reader never sees a torn value on the platforms torch supports):

``CURRENT`` the dataset index being loaded now (-1 between samples), ``SEEN`` samples asked
for, ``FAILED`` samples that failed, ``REPLACED`` replacements served. Word 0 of the header
row (the last row) holds the epoch the main process set, so persistent workers see
``set_epoch``. The table is an anonymous shared mapping (``memfd_create``, Linux): forked
workers inherit it; spawned and forkserver ones get the owner's pid and descriptor and open
``/proc/<pid>/fd/<fd>`` (no file name, nothing to clean up: the memory goes with the last map).
Elsewhere it is a small temporary file, removed when the owner is collected.
"""

from __future__ import annotations

import mmap
import os
import tempfile

import numpy as np

CURRENT, SEEN, FAILED, REPLACED = 0, 1, 2, 3
WIDTH = 4
#: rows for a guard used with a loader that did not size the table (torch's own DataLoader)
DEFAULT_WORKERS = 64


class Slots:
    """The table; ``row()`` is this process's row as a memoryview of int64 (indexing gives ints)."""

    def __init__(self, workers: int = DEFAULT_WORKERS) -> None:
        self.workers = int(workers)
        size = (self.workers + 2) * WIDTH * 8
        self._owner_pid = os.getpid()
        self._owned = True
        if hasattr(os, "memfd_create"):
            self._fd, self._file = os.memfd_create("dsclean-guard-slots", os.MFD_CLOEXEC), None
        else:
            fd, self._file = tempfile.mkstemp(prefix="dsclean-guard-slots-")
            self._fd = fd
        os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size, mmap.MAP_SHARED)
        self._table = np.frombuffer(self._map, np.int64).reshape(self.workers + 2, WIDTH)
        self._table[:, CURRENT] = -1
        self._table[-1, :] = 0
        self._local()

    def _local(self) -> None:
        self._pid: int | None = None
        self._row: memoryview | None = None

    def __getstate__(self) -> dict:
        return {"workers": self.workers, "_owner_pid": self._owner_pid, "_fd": self._fd, "_file": self._file}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        source = self._file or f"/proc/{self._owner_pid}/fd/{self._fd}"
        fd = os.open(source, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            self._map = mmap.mmap(fd, (self.workers + 2) * WIDTH * 8, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        self._owned = False  # the owner's pid and descriptor stay, so this copy pickles on
        self._table = np.frombuffer(self._map, np.int64).reshape(self.workers + 2, WIDTH)
        self._local()

    def __del__(self, _getpid=os.getpid, _unlink=os.unlink, _close=os.close) -> None:
        if getattr(self, "_owned", False) and self._owner_pid == _getpid():
            if self._file:
                try:
                    _unlink(self._file)
                except OSError:
                    pass  # already gone: nothing to clean up
            try:
                _close(self._fd)
            except OSError:
                pass  # closed at interpreter exit already

    @property
    def tensor(self) -> np.ndarray:
        return self._table

    def row(self) -> memoryview:
        """This process's row (cached per process; a worker finds its id through torch)."""
        if self._row is None or self._pid != os.getpid():
            from torch.utils.data import get_worker_info

            info = get_worker_info()
            r = 0 if info is None else 1 + info.id
            if r > self.workers:  # more workers than rows: count in a private row (per-process budget)
                self._row = memoryview(np.zeros(WIDTH, np.int64))
            else:
                self._row = memoryview(self._table[r])
            self._pid = os.getpid()
        return self._row

    def totals(self) -> tuple[int, int, int]:
        """(seen, failed, replaced) over every row: the loader-wide counts, read without a lock."""
        rows = self._table[:-1]
        return int(rows[:, SEEN].sum()), int(rows[:, FAILED].sum()), int(rows[:, REPLACED].sum())

    def current(self, worker: int) -> int:
        """The index worker ``worker`` was loading (-1: none)."""
        return int(self._table[1 + worker, CURRENT])

    @property
    def epoch(self) -> int:
        return int(self._table[-1, 0])

    @epoch.setter
    def epoch(self, value: int) -> None:
        self._table[-1, 0] = int(value)

    def reset_counts(self) -> None:
        self._table[:-1, CURRENT] = -1
        self._table[:-1, SEEN:] = 0

    def load_counts(self, seen: int, failed: int, replaced: int) -> None:
        """Put restored totals in the main row (a resumed run keeps its budget)."""
        self._table[:-1, SEEN:] = 0
        self._table[0, SEEN], self._table[0, FAILED], self._table[0, REPLACED] = seen, failed, replaced
