"""External sorting for the index build: memory bounded by a run, however many rows.

:class:`Sorter` takes record batches in any order, sorts runs of ``run_rows`` rows
by one binary key column (Arrow's sort) and spills each run to an uncompressed
Arrow IPC stream in a temp folder. :meth:`Sorter.sorted` merges the runs: it keeps
one block of each run in memory, takes from every run the rows up to the smallest
"last key" among the blocks (the frontier: no row still on disk sorts before it),
sorts those few rows and yields them. :func:`aligned` walks several key-sorted
streams side by side the same way, so a join is a vectorised lookup inside each
window of keys. Byte order of the key column decides (Arrow compares binary
values as bytes, like Python ``bytes``).
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

#: rows per spilled run (sorted in memory: ~100 B a row for the build's columns)
RUN_ROWS = 131_072
#: rows per block read back from a run while merging
BLOCK_ROWS = 8_192
#: runs merged at once: more runs are first merged in groups into longer runs, so the blocks
#: held while merging (FAN_IN x BLOCK_ROWS rows) do not grow with the number of rows
FAN_IN = 8


class Sorter:
    """Sort record batches by the binary column ``key`` through runs spilled to ``folder``."""

    def __init__(
        self, folder: str, name: str, key: str, schema: pa.Schema | None = None, run_rows: int | None = None
    ) -> None:
        self.folder, self.name, self.key, self.schema = folder, name, key, schema
        self.run_rows = run_rows or RUN_ROWS
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.runs: list[str] = []
        self.merges = 0
        self.rows = 0

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        if not batch.num_rows:
            return
        if self.schema is None:  # from the first rows
            self.schema = batch.schema
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        self.pending.extend(batches)
        self.pending_rows += batch.num_rows
        self.rows += batch.num_rows
        if self.pending_rows >= self.run_rows:
            self._spill()

    def _spill(self) -> None:
        if not self.pending:
            return
        table = pa.Table.from_batches(self.pending, schema=self.schema)
        table = table.take(pc.sort_indices(table, sort_keys=[(self.key, "ascending")]))
        path = os.path.join(self.folder, f"{self.name}-{len(self.runs):05d}.arrows")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, self.schema) as writer:
            for b in table.to_batches(max_chunksize=BLOCK_ROWS):
                writer.write_batch(b)
        self.runs.append(path)
        self.pending, self.pending_rows = [], 0
        release_memory()

    def sorted(self) -> Iterator[pa.Table]:
        """All rows in key order, a window at a time (each run file is removed once read)."""
        self._spill()
        runs = self.runs
        while len(runs) > FAN_IN:  # merge passes: at most FAN_IN runs are ever read at once
            merged = []
            for start in range(0, len(runs), FAN_IN):
                group = runs[start : start + FAN_IN]
                if len(group) == 1:
                    merged.append(group[0])
                    continue
                self.merges += 1
                path = os.path.join(self.folder, f"{self.name}-merged-{self.merges:05d}.arrows")
                with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, self.schema) as writer:
                    for table in merge([_read_run(p) for p in group], self.key):
                        for b in table.to_batches(max_chunksize=BLOCK_ROWS):
                            writer.write_batch(b)
                merged.append(path)
            runs = merged
        self.runs = []
        yield from merge([_read_run(p) for p in runs], self.key)


def release_memory() -> None:
    """Hand memory Arrow freed back to the system (its allocator keeps it otherwise, and peak RSS would creep)."""
    pa.default_memory_pool().release_unused()


def _read_run(path: str) -> Iterator[pa.Table]:
    """A spilled run's blocks, read into private memory (never mapped), then the file removed."""
    try:
        with pa.OSFile(path, "rb") as source:
            reader = pa.ipc.open_stream(source)
            for batch in reader:
                yield pa.Table.from_batches([batch])
    finally:
        os.unlink(path)


def batches_of(table_stream: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """Skip empty tables."""
    for t in table_stream:
        if t.num_rows:
            yield t


def aligned(streams: list[Iterator[pa.Table]], key: str) -> Iterator[list[pa.Table | None]]:
    """Windows of several key-sorted streams: each window holds, from every stream, its rows up to one frontier key.

    Rows with equal keys always land in the same window, so joining inside a window is exact.
    A stream with no rows left gives ``None``.
    """
    streams = [batches_of(s) for s in streams]
    heads: list[pa.Table | None] = [next(s, None) for s in streams]
    while any(h is not None for h in heads):
        frontier = min(h.column(key)[-1].as_py() for h in heads if h is not None)
        window: list[pa.Table | None] = []
        for i, head in enumerate(heads):
            if head is None:
                window.append(None)
                continue
            upto = pc.less_equal(head.column(key), pa.scalar(frontier, head.schema.field(key).type))
            n = int(pc.sum(upto).as_py() or 0)  # the block is sorted: the first n rows
            window.append(head.slice(0, n))
            rest = head.slice(n)
            heads[i] = rest if rest.num_rows else next(streams[i], None)
        yield window


def merge(streams: list[Iterator[pa.Table]], key: str) -> Iterator[pa.Table]:
    """One key-sorted stream out of several: each window's rows, sorted."""
    for n, window in enumerate(aligned(streams, key)):
        if n % 256 == 255:
            release_memory()
        parts = [t for t in window if t is not None and t.num_rows]
        if not parts:
            continue
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            table = table.take(pc.sort_indices(table, sort_keys=[(key, "ascending")]))
        yield table


#: the build's temp folder next to the output: ``.dsclean-index-XXXXXXXX`` (runs, column temp files)
SPILL_PREFIX = ".dsclean-index-"
#: inside it, locked by the build for as long as it runs: a folder whose lock can be taken is a dead run's
SPILL_LOCK = "owner.lock"
#: a spill folder without a lock file (a build killed before it made one, or one of an older release) is
#: left alone this long after its last change
UNLOCKED_GRACE_SECONDS = 3600


def make_spill_folder(parent: str) -> tuple[str, int]:
    """A new spill folder in ``parent`` and the descriptor holding its lock (close it after removing the folder).

    Spill folders a killed build left in ``parent`` are removed first (:func:`remove_stale_spill_folders`).
    """
    import fcntl
    import tempfile

    remove_stale_spill_folders(parent)
    folder = tempfile.mkdtemp(prefix=SPILL_PREFIX, dir=parent)
    fd = os.open(os.path.join(folder, SPILL_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return folder, fd


def remove_stale_spill_folders(parent: str) -> list[str]:
    """Remove the spill folders of builds that are no longer running (killed: kill -9, power loss, OOM killer).

    Only folders named like ours; one is in use while a build holds its lock (or, without a lock file, for an
    hour after its last change). Returns the folders removed.
    """
    import fcntl
    import shutil

    removed = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(SPILL_PREFIX) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return removed
    for entry in entries:
        lock = os.path.join(entry.path, SPILL_LOCK)
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            if _age(entry) > UNLOCKED_GRACE_SECONDS:
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
            continue
        except OSError:
            continue  # not ours to judge (permissions): left alone
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live build's
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        finally:
            os.close(fd)
    return removed


def _age(entry: os.DirEntry) -> float:
    """Seconds since ``entry`` last changed; 0 if it is gone meanwhile (nothing left to remove)."""
    import time

    try:
        return time.time() - entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return 0.0
