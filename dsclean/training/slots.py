"""A tiny shared-memory table: one row per process of a DataLoader, written without locks.

Row 0 is the main process, row ``1 + worker id`` a worker. Each process writes only its own
row (int64 words, so a reader never sees a torn value on the platforms torch supports):

``CURRENT`` the dataset index being loaded now (-1 between samples), ``SEEN`` samples asked
for, ``FAILED`` samples that failed, ``REPLACED`` replacements served. Word 0 of the header
row (the last row) holds the epoch the main process set, so persistent workers see
``set_epoch``. The table is a torch shared-memory tensor: it reaches spawned and forkserver
workers by pickling (a file descriptor, not a copy) and forked ones by inheritance.
"""
from __future__ import annotations

import os

CURRENT, SEEN, FAILED, REPLACED = 0, 1, 2, 3
WIDTH = 4
#: rows for a guard used with a loader that did not size the table (torch's own DataLoader)
DEFAULT_WORKERS = 64


class Slots:
    """The table; ``row()`` is this process's row as a memoryview of int64 (indexing gives ints)."""

    def __init__(self, workers: int = DEFAULT_WORKERS) -> None:
        import torch

        self.workers = int(workers)
        self.tensor = torch.full((self.workers + 2, WIDTH), -1, dtype=torch.int64).share_memory_()
        self.tensor[:, SEEN:] = 0
        self.tensor[-1, :] = 0
        self._local()

    def _local(self) -> None:
        self._pid: int | None = None
        self._row: memoryview | None = None
        self._all = None

    def __getstate__(self) -> dict:
        return {"workers": self.workers, "tensor": self.tensor}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._local()

    def row(self) -> memoryview:
        """This process's row (cached per process; a worker finds its id through torch)."""
        if self._row is None or self._pid != os.getpid():
            from torch.utils.data import get_worker_info

            info = get_worker_info()
            r = 0 if info is None else 1 + info.id
            if r > self.workers:  # more workers than rows: count in a private row (per-process budget)
                import numpy as np
                self._row = memoryview(np.zeros(WIDTH, np.int64))
            else:
                self._row = memoryview(self.tensor.numpy()[r])
            self._all = self.tensor.numpy()
            self._pid = os.getpid()
        return self._row

    def totals(self) -> tuple[int, int, int]:
        """(seen, failed, replaced) over every row: the loader-wide counts, read without a lock."""
        self.row()
        rows = self._all[:-1]
        return int(rows[:, SEEN].sum()), int(rows[:, FAILED].sum()), int(rows[:, REPLACED].sum())

    def current(self, worker: int) -> int:
        """The index worker ``worker`` was loading (-1: none)."""
        return int(self.tensor[1 + worker, CURRENT])

    @property
    def epoch(self) -> int:
        return int(self.tensor[-1, 0])

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.tensor[-1, 0] = int(value)

    def reset_counts(self) -> None:
        self.tensor[:-1, CURRENT] = -1
        self.tensor[:-1, SEEN:] = 0

    def load_counts(self, seen: int, failed: int, replaced: int) -> None:
        """Put restored totals in the main row (a resumed run keeps its budget)."""
        self.tensor[:-1, SEEN:] = 0
        self.tensor[0, SEEN], self.tensor[0, FAILED], self.tensor[0, REPLACED] = seen, failed, replaced
