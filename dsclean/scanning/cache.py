"""The scan cache: verdicts keyed by (relative path, size, mtime_ns, check options, checker version).

Lets the next scan of the same root re-check only new or changed files. A folder in the
root's state folder (``scan_cache/``, one per part of a job array) holds one sub-folder
per set of check options and checker version (named by a hash of them), so a scan with
other options neither sees nor evicts these verdicts, and no verdict outlives a change of
the integrity rules (:data:`~dsclean.scanning.check.CHECKER_VERSION`).

Inside, the verdicts are Arrow IPC files ("segments", lz4-compressed record batches of
the results columns but the flags). A scan appends the fresh verdicts it decides as one
segment every few thousand verdicts or seconds (written to a temp name, then renamed: a
segment is whole or absent), so after a kill -9 a re-run resumes from what was recorded
(at most one unwritten batch is checked again). The newest row of a path wins; a file
moved out of the root (quarantined) gets a *tombstone* row (empty status), so it is
never answered from the cache. A run's segments stay as they are when it ends (reading
them back to merge them into one file cost the scan's main process ~0.2 µs per file, and
a lookup reads one record batch at a time whatever file holds it); when the segments of
more than :data:`MAX_RUNS` runs (or more than :data:`MAX_SEGMENTS` segments) pile up they
are compacted into one file (newest row per path, tombstones dropped), under a lock file,
always temp + rename.

Writing costs the main process no per-row work beyond the Arrow conversion the results
file needs anyway (the scan hands over its results batches); SQLite's B-tree insert per
verdict cost ~30 µs per file. Reading is vectorized like :mod:`.reuse`: the path column
of every segment is hashed once, on the first lookup that needs it, into a sorted 64-bit
hash array (16 B per cached row: 160 MB at 10 million); rows are fetched one record batch
at a time (a few decoded batches kept), so memory stays bounded.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections import OrderedDict
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from .. import reasons as R
from .check import CHECKER_VERSION, CheckOptions
from .results import SCHEMA
from .schema import SetLookupOptions, call_function
from .verdict import FIELDS, Verdict, encode_path

#: what the cache stores: every verdict field but the flags (a list; the scan derives them from the facts
#: with the thresholds of the day, so changing a threshold re-checks nothing)
_STORED = FIELDS[: FIELDS.index("flags")]
STORED_SCHEMA = pa.schema([SCHEMA.field(name) for name in _STORED])
_SIZE, _MTIME, _STATUS = (_STORED.index(f) for f in ("size", "mtime_ns", "status"))
#: the status of a tombstone row (a path whose verdict must not be reused: the file was moved out)
TOMBSTONE = ""
#: runs (each a set of segments, or one compacted file) per options folder past which a closing scan
#: compacts them into one file
MAX_RUNS = 8
#: segments per options folder past which a closing scan compacts them, whatever the runs (a 10M-file
#: scan writes ~2,000)
MAX_SEGMENTS = 10_000
_SUFFIX = ".arrow"
_BATCHES_KEPT = 4  # decoded record batches kept for lookups
_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
_STALE_TEMP_S = 3600.0  # temp files of a killed writer older than this are removed by a compaction


def options_key(options: CheckOptions) -> str:
    """Everything that can change a verdict besides the file itself: a changed option or rule re-checks."""
    from .. import __version__

    fields = {**options.__dict__, "timeout": float(options.timeout)}  # 1 and 1.0 are the same option
    return json.dumps({"dsclean": __version__, "checker": CHECKER_VERSION, **fields}, sort_keys=True)


def options_from_key(key: str | None) -> CheckOptions:
    """The check options a results file or pointer recorded (:func:`options_key`); defaults if none.

    Fields this version does not know are ignored, missing ones take their defaults.
    """
    import dataclasses

    try:
        data = json.loads(key) if key else {}
    except ValueError:
        data = {}
    known = {f.name for f in dataclasses.fields(CheckOptions)}
    # JSON has no tuples: a tuple field (``loaders``) comes back a list, and must compare equal to the scan's
    return CheckOptions(
        **{
            k: tuple(v) if isinstance(v, list) else v
            for k, v in (data if isinstance(data, dict) else {}).items()
            if k in known
        }
    )


#: verdicts that depend on the environment (permissions, load, limits, a file in motion), not on
#: the bytes: a later scan must check again (a chmod changes neither size nor mtime)
NOT_CACHED = R.NOT_JUDGED
_NOT_CACHED_ARRAY = pa.array(sorted(NOT_CACHED), pa.string())


def row_to_verdict(rel: str, row: tuple) -> Verdict:
    return Verdict(rel, *row[1:])


def _hashes(paths: list[bytes]) -> np.ndarray:
    """A 64-bit hash per path (Python's SipHash of the bytes: consistent within one process)."""
    return np.fromiter(map(hash, paths), dtype=np.int64, count=len(paths))


def cacheable(batch: pa.RecordBatch | pa.Table) -> pa.Array:
    """Which rows of a results batch the cache may keep: size and mtime known, a verdict about the bytes."""
    # pyarrow.compute's and_, is_valid, invert, is_in and fill_null, called by name (see schema.call_function)
    known = call_function(
        "and", [call_function("is_valid", [batch["size"]]), call_function("is_valid", [batch["mtime_ns"]])]
    )
    about_bytes = call_function(
        "invert", [call_function("is_in", [batch["reason"]], SetLookupOptions(_NOT_CACHED_ARRAY))]
    )
    return call_function("coalesce", [call_function("and", [known, about_bytes]), pa.scalar(False)])


def _run_of(path: str) -> str:
    """The run that wrote a segment: ``<time>-<pid>-<run>-<seq>.arrow``; a file named otherwise (an older
    dsclean's, one segment or a merged run) is a run of its own."""
    parts = os.path.basename(path).split("-")
    return "-".join(parts[1:3]) if len(parts) == 4 else path


def _segments(folder: str) -> list[str]:
    """The segment files of an options folder, oldest first (names start with a time stamp)."""
    try:
        return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(_SUFFIX) and n[0] != ".")
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def _opened(path: str, key: str, fields: list[int] | None = None) -> Iterator[pa.ipc.RecordBatchFileReader | None]:
    """A segment's reader (memory-mapped, closed after use: a killed scan of millions of files leaves
    thousands of segments, more than a process may hold open), or None when it is gone (compacted
    away meanwhile), unreadable (a power loss before its data reached the disk) or of other options or
    another schema: never trusted."""
    try:
        source = pa.memory_map(path)
    except (OSError, pa.ArrowException):
        yield None
        return
    with source:
        try:
            reader = pa.ipc.open_file(source, options=pa.ipc.IpcReadOptions(included_fields=fields) if fields else None)
            schema = reader.schema
        except (OSError, pa.ArrowException):
            reader = None
        else:
            want = STORED_SCHEMA if fields is None else pa.schema([STORED_SCHEMA.field(i) for i in fields])
            if (schema.metadata or {}).get(b"options") != key.encode() or not schema.remove_metadata().equals(want):
                reader = None
        yield reader


def write_segment(
    final: str, schema: pa.Schema, tables: Iterable[pa.Table | pa.RecordBatch], *, durable: bool = False
) -> str:
    """Write one Arrow IPC segment to a temp name and rename it to ``final`` (a reader never sees half a file).

    ``durable``: fsync the data before the rename and the folder after it (a tombstone ``restore`` relies on);
    the cache's own batches skip it, as a lost batch is only checked again.
    """
    tmp = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.{os.getpid()}.tmp")
    try:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema, options=_WRITE_OPTIONS) as w:
            for t in tables:
                w.write(t)
        if durable:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        from ..atomic import fsync_dir

        fsync_dir(os.path.dirname(final))
    return final


class ScanCache:
    """Verdicts of earlier scans of one root. Use :meth:`lookup` (or :meth:`rows_of`) before checking,
    :meth:`add_batch` (or :meth:`add`) after, :meth:`forget` for a file moved out, :meth:`close` at the end."""

    def __init__(self, path: str, options: CheckOptions, *, commit_every: int = 5000, commit_seconds: float = 2.0):
        self.path = path
        self.key = options_key(options)
        self.folder = os.path.join(path, "verdicts_" + hashlib.sha256(self.key.encode()).hexdigest()[:16])
        os.makedirs(self.folder, exist_ok=True)
        self._schema = STORED_SCHEMA.with_metadata({"options": self.key})
        self._listed = _segments(self.folder)  # what earlier runs recorded (read lazily, on the first lookup)
        self._index: tuple[np.ndarray, np.ndarray] | None = None
        self._groups: list[tuple[str, int]] = []  # global record batch -> (segment, batch in it)
        self._starts = np.zeros(1, np.int64)
        self._decoded: OrderedDict[int, pa.RecordBatch] = OrderedDict()
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._rows: list[tuple] = []  # single verdicts (add), made a batch at commit
        self._commit_every, self._commit_seconds = commit_every, commit_seconds
        self._last_commit = time.monotonic()
        self._run = f"{time.time_ns():x}"  # names this run's segments (with the pid): runs are counted for compaction
        self._seq = 0
        self.hits = 0
        self.notes: list[str] = []
        self.damaged: set[str] = set()  # segments that could not be read: dropped by the next compaction
        self.failed = False  # a write failed (a full or read-only state folder): the rest of the run is not cached

    @classmethod
    def existing(cls, path: str, options: CheckOptions) -> "ScanCache | None":
        """The cache at ``path`` for these options if it holds verdicts, else None (nothing is created: another
        root's cache, read by :mod:`.related`, is not written to)."""
        folder = os.path.join(path, "verdicts_" + hashlib.sha256(options_key(options).encode()).hexdigest()[:16])
        return cls(path, options) if _segments(folder) else None

    # ---- reading ------------------------------------------------------------------------------

    def _load(self) -> tuple[np.ndarray, np.ndarray]:
        """Hash every recorded path once: sorted hashes and, per hash, the global row of its newest row."""
        if self._index is not None:
            return self._index
        hashes, starts = [], [0]
        self._groups, self._decoded = [], OrderedDict()
        for path in self._listed:
            with _opened(path, self.key) as whole:
                if whole is None:
                    continue
            mine_h, mine_n = [], []
            try:
                with _opened(path, self.key, [0]) as paths_only:
                    for b in range(paths_only.num_record_batches if paths_only is not None else 0):
                        column = paths_only.get_batch(b).column(0)
                        mine_h.append(_hashes(column.to_pylist()))
                        mine_n.append(len(column))
            except (OSError, pa.ArrowException) as exc:  # damaged (a bad sector, a power loss): never trusted
                self._note_damaged(path, exc)
                continue
            for b, (h, n) in enumerate(zip(mine_h, mine_n)):
                hashes.append(h)
                starts.append(starts[-1] + n)
                self._groups.append((path, b))
        self._starts = np.array(starts, np.int64)
        h = np.concatenate(hashes) if hashes else np.empty(0, np.int64)
        order = np.argsort(h, kind="stable")  # equal hashes keep file order: the last is the newest
        h = h[order]
        last = np.ones(len(h), bool)
        last[:-1] = h[1:] != h[:-1]
        self._index = (h[last], order[last])
        return self._index

    def _batch(self, g: int) -> pa.RecordBatch | None:
        """Record batch ``g`` (decoded; a few kept), or None if its segment was compacted away meanwhile."""
        batch = self._decoded.get(g)
        if batch is None:
            path, b = self._groups[g]
            with _opened(path, self.key) as reader:
                if reader is None or b >= reader.num_record_batches:
                    return None
                try:
                    batch = reader.get_batch(b)
                    batch.validate(full=True)
                except (OSError, pa.ArrowException) as exc:  # damaged: its files are checked again
                    self._note_damaged(path, exc)
                    return None
                if batch.num_rows != int(self._starts[g + 1] - self._starts[g]):
                    return None  # another process compacted or merged into this name meanwhile: check again
            self._decoded[g] = batch
            if len(self._decoded) > _BATCHES_KEPT:
                self._decoded.popitem(last=False)
        else:
            self._decoded.move_to_end(g)
        return batch

    def _note_damaged(self, path: str, exc: BaseException) -> None:
        note = f"scan cache segment {path} is damaged ({exc}); its verdicts are ignored (those files are checked again)"
        if note not in self.notes:
            self.notes.append(note)
        self.damaged.add(path)

    def rows_of(self, rels: list[str]) -> dict[str, tuple]:
        """Cached rows of those paths, whatever their size and mtime (the caller compares them).

        A row is a results-table row (``path`` as bytes first, then the other
        :data:`~dsclean.scanning.verdict.FIELDS`, flags None); :func:`row_to_verdict` makes it a Verdict.
        """
        if not rels or not self._listed:
            return {}
        hashes, rows = self._load()
        if not len(hashes):
            return {}
        keys = [encode_path(rel) for rel in rels]
        h = _hashes(keys)
        pos = np.minimum(np.searchsorted(hashes, h), len(hashes) - 1)
        found = np.where(hashes[pos] == h, rows[pos], -1)
        at = np.flatnonzero(found >= 0)
        if not len(at):
            return {}
        wanted = found[at]
        group_of = np.searchsorted(self._starts, wanted, side="right") - 1
        out: dict[str, tuple] = {}
        for g in np.unique(group_of).tolist():
            mine = group_of == g
            batch = self._batch(g)
            if batch is None:
                continue  # compacted away by another process since the index was built: checked again
            batch = batch.take(pa.array(wanted[mine] - self._starts[g]))
            for i, row in zip(at[mine].tolist(), zip(*(col.to_pylist() for col in batch.columns))):
                if row[0] == keys[i] and row[_STATUS] != TOMBSTONE:  # the bytes, not just the hash
                    out[rels[i]] = (*row, None)
        return out

    def lookup(self, files: Iterable[tuple[str, int, int]]) -> dict[str, tuple]:
        """Cached rows for those ``(rel, size, mtime_ns)`` whose size and mtime still match."""
        files = list(files)
        rows = self.rows_of([rel for rel, _, _ in files])
        found = {
            rel: row
            for rel, size, mtime in files
            if (row := rows.get(rel)) is not None and row[_SIZE] == size and row[_MTIME] == mtime
        }
        self.hits += len(found)
        return found

    # ---- writing ------------------------------------------------------------------------------

    def add_batch(self, batch: pa.RecordBatch | pa.Table, skip: Iterable[bytes] = ()) -> None:
        """Remember the fresh verdicts of a results batch (results :data:`SCHEMA`), but for paths in
        ``skip`` (moved now) and verdicts that say more about the moment than about the file."""
        if self.failed:
            return
        keep = cacheable(batch)
        skip = list(skip)
        if skip:
            moved = call_function("is_in", [batch["path"]], SetLookupOptions(pa.array(skip, pa.binary())))
            keep = call_function("and", [keep, call_function("invert", [moved])])
        kept = batch if call_function("all", [keep]).as_py() else call_function("filter", [batch, keep])
        kept = kept.select(list(_STORED))
        if isinstance(kept, pa.Table):
            kept = kept.combine_chunks().to_batches()
            kept = kept[0] if kept else None
        if kept is not None and kept.num_rows:
            self._pending.append(kept)
            self._pending_rows += kept.num_rows
        self._maybe_commit()

    def add(self, v: Verdict) -> None:
        """Remember one fresh verdict, unless it says more about the moment than about the file."""
        if self.failed or v.size is None or v.mtime_ns is None or v.reason in NOT_CACHED:
            return
        self._rows.append((encode_path(v.path), *tuple(vars(v).values())[1 : len(_STORED)]))
        self._maybe_commit()

    def forget(self, rel: str) -> None:
        """Drop the verdict of a file moved out of the root (quarantined): if a file comes back at that
        path with the same size and mtime (a restore, a backup copied with ``cp -p``), it is checked again."""
        import pyarrow.compute as pc  # here: a scan that moves nothing never imports it (see schema.call_function)

        key = encode_path(rel)
        self._pending = [b.filter(pc.not_equal(b["path"], key)) for b in self._pending]
        self._pending_rows = sum(b.num_rows for b in self._pending)
        self._rows = [r for r in self._rows if r[0] != key]
        self._rows.append((key, "", TOMBSTONE, *([None] * (len(_STORED) - 3))))
        self._maybe_commit()  # with the next batch: a kill -9 before it loses it (restore writes them again)

    def _maybe_commit(self) -> None:
        if (
            self._pending_rows + len(self._rows) >= self._commit_every
            or time.monotonic() - self._last_commit > self._commit_seconds
        ):
            self.commit()

    def commit(self) -> None:
        """Write what is pending as one segment (temp name, then rename: whole or absent)."""
        batches = self._pending
        if self._rows:
            batches = [
                *batches,
                pa.RecordBatch.from_arrays(
                    [pa.array(col, type=f.type) for col, f in zip(zip(*self._rows), STORED_SCHEMA)],
                    schema=STORED_SCHEMA,
                ),
            ]
        self._pending, self._pending_rows, self._rows = [], 0, []
        self._last_commit = time.monotonic()
        if not batches or self.failed:
            return
        self._seq += 1
        name = f"{time.time_ns():020d}-{os.getpid()}-{self._run}-{self._seq:06d}{_SUFFIX}"  # sorted: oldest first
        try:
            self._write(name, [pa.Table.from_batches(batches, STORED_SCHEMA)])
        except (OSError, pa.ArrowException) as exc:
            # The cache only saves work: a full or read-only state folder must not fail the scan. What was not
            # written is checked again next time (a missing tombstone too: that file is then answered by its
            # older verdict of the same size and mtime, which was a verdict about the same bytes).
            self.failed = True
            self.notes.append(
                f"scan cache {self.folder}: could not be written "
                f"({getattr(exc, 'strerror', None) or exc}); the verdicts of the rest of this scan "
                "are not cached (the next scan checks those files again)"
            )

    def _write(self, name: str, tables: Iterable[pa.Table | pa.RecordBatch]) -> str:
        return write_segment(os.path.join(self.folder, name), self._schema, tables)

    def close(self) -> None:
        """Write what is pending; compact when the segments of many runs piled up.

        A failed compaction (a full disk) changes nothing: the segments stay as they were, and a note says so.
        """
        self.commit()
        self._decoded, self._index = OrderedDict(), None
        try:
            self._tidy()
        except (OSError, pa.ArrowException) as exc:
            self.notes.append(
                f"scan cache {self.folder}: not compacted ({getattr(exc, 'strerror', None) or exc}); "
                "its segments are kept as they are"
            )

    def _tidy(self) -> None:
        with open(os.path.join(self.folder, ".lock"), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another process is compacting: next time
            self._remove_stale_temps()
            listed = _segments(self.folder)
            if len(listed) > MAX_SEGMENTS or len({_run_of(p) for p in listed}) > MAX_RUNS:
                self._compact(listed)

    def _compact(self, listed: list[str]) -> None:
        """Rewrite every segment as one: the newest row per path, without tombstones (bounded memory:
        the hash index, and one record batch at a time)."""
        import pyarrow.compute as pc  # here, as in forget: not on a first scan's start

        self._listed = listed
        hashes, rows = self._load()
        winners = np.zeros(int(self._starts[-1]), bool)
        winners[rows] = True

        def batches():
            for g in range(len(self._groups)):
                batch = self._batch(g)
                if batch is None and self._groups[g][0] in self.damaged:
                    continue  # unreadable: its verdicts are dropped (those files are checked again)
                if batch is None:
                    raise FileNotFoundError(f"{self._groups[g][0]} vanished while being compacted")
                keep = pc.and_(
                    pa.array(winners[self._starts[g] : self._starts[g + 1]]), pc.not_equal(batch["status"], TOMBSTONE)
                )
                yield batch.filter(keep)

        self._write(os.path.basename(listed[-1]), batches())
        for p in listed[:-1]:
            os.unlink(p)
        self._decoded, self._index, self._groups = OrderedDict(), None, []

    def _remove_stale_temps(self) -> None:
        now = time.time()
        for name in os.listdir(self.folder):
            if name.endswith(".tmp"):
                path = os.path.join(self.folder, name)
                with contextlib.suppress(FileNotFoundError):
                    if now - os.stat(path).st_mtime > _STALE_TEMP_S:
                        os.unlink(path)


def forget_before_restore(cache_paths: Iterable[str], rels: list[str]) -> list[str]:
    """Durable tombstones for ``rels`` in every options folder of these scan caches, before files are put
    back at those paths (``dsclean restore``); returns the segments written.

    A scan writes a moved file's tombstone with its next cache batch, so a kill -9 soon after the move
    loses it, and a verdict made with other check options never gets one: either older row (bit rot
    keeps size and mtime) would answer for the file put back. Each segment is fsynced and renamed into
    place before this returns; an OSError is raised to the caller, which then moves nothing.
    """
    if not rels:
        return []
    paths = [encode_path(rel) for rel in rels]
    written = []
    for cache_path in cache_paths:
        for name in sorted(os.listdir(cache_path)) if os.path.isdir(cache_path) else ():
            folder = os.path.join(cache_path, name)
            key = _options_of(folder) if name.startswith("verdicts_") and os.path.isdir(folder) else None
            if key is None:
                continue  # no readable segment: no verdict to supersede
            n = len(paths)
            cols = [pa.array(paths, pa.binary()), pa.array([""] * n), pa.array([TOMBSTONE] * n)]
            cols += [pa.nulls(n, f.type) for f in list(STORED_SCHEMA)[3:]]
            batch = pa.RecordBatch.from_arrays(
                [c.cast(f.type) for c, f in zip(cols, STORED_SCHEMA)], schema=STORED_SCHEMA
            )
            now = time.time_ns()
            final = os.path.join(folder, f"{now:020d}-{os.getpid()}-restore{now:x}-000001{_SUFFIX}")
            # its data on disk before its name: a power loss must not leave a torn tombstone
            written.append(write_segment(final, STORED_SCHEMA.with_metadata({"options": key}), [batch], durable=True))
    return written


def _options_of(folder: str) -> str | None:
    """The options key of a cache's options folder, from the first of its segments that can be read."""
    for seg in _segments(folder):
        try:
            with pa.memory_map(seg) as source:
                key = (pa.ipc.open_file(source).schema.metadata or {}).get(b"options")
        except (OSError, pa.ArrowException):
            continue
        if key and os.path.basename(folder) == "verdicts_" + hashlib.sha256(key).hexdigest()[:16]:
            return key.decode()
    return None


def cached_rows(path: str, mtime_ns: int | None = None) -> int:
    """Rows recorded in the scan cache at ``path`` (every options folder; superseded rows and tombstones
    included), or only those with that ``mtime_ns``: what tests and benchmarks use to see what a run wrote."""
    import pyarrow.compute as pc

    n = 0
    for folder in sorted(os.listdir(path)) if os.path.isdir(path) else ():
        for seg in _segments(os.path.join(path, folder)):
            try:
                reader = pa.ipc.open_file(pa.memory_map(seg))
            except FileNotFoundError:
                continue  # compacted away since the listing
            for b in range(reader.num_record_batches):
                batch = reader.get_batch(b)
                n += batch.num_rows if mtime_ns is None else pc.sum(pc.equal(batch["mtime_ns"], mtime_ns)).as_py() or 0
    return n
