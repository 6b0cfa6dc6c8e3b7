"""Re-scan fast path: reuse ``ok`` rows of the root's previous results whose file is unchanged.

A re-scan of an unchanged tree should cost about an ``os.walk`` + ``stat``. The scan
cache (:mod:`.cache`) answers lookups with a Python tuple per row; here the previous results (the root's last ``scan_results.parquet``, every
job-array part, as :func:`dsclean.locations.find_results` finds them) are matched
against each batch of discovered paths with numpy and Arrow, and the matching rows go
into the new results as Arrow tables, never as per-file Python objects.

Memory: an index of one 64-bit hash of each previous path, sorted (8 B), and its row
number (8 B): 160 MB at 10 million files; the rows themselves stay on disk and are read
one row group at a time (a few cached: discovery order is the order the previous scan
wrote them in, so a batch of paths mostly falls into one or two row groups).

Only rows that are safe to reuse are: same root, same check options and checker version
(:func:`~.cache.options_key`, recorded in the results), same results schema, same path
bytes (hash matches are confirmed on the bytes), same size and mtime_ns (a fresh
``stat``), status ``ok`` and a reason the cache would keep. Everything else falls back
to the scan cache and the checkers.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict

import numpy as np
import pyarrow as pa

from .. import locations
from .. import reasons as R
from ..jsonpaths import path_bytes
from . import parquetio
from .cache import NOT_CACHED
from .results import META_KEY, SCHEMA

_GROUPS_KEPT = 4  # decoded row groups kept (each at most ~65k rows)


def _hashes(paths: list[bytes]) -> np.ndarray:
    """A 64-bit hash per path (Python's SipHash of the bytes: consistent within one process)."""
    return np.fromiter(map(hash, paths), dtype=np.int64, count=len(paths))


def _moved_paths(results_path: str) -> np.ndarray:
    """Hashes of the paths the problems list next to ``results_path`` says were quarantined.

    A moved file's row may say ``ok`` (moved for a quality flag); if the file is put back later
    (a restore, a backup copied with ``cp -p``) it must be checked again, not matched. Streamed:
    only the moved paths' hashes are kept. A missing problems list raises (no reuse then).
    """
    folder, name = os.path.split(results_path)
    stem, ext = os.path.splitext(locations.RESULTS_FILE)
    tag = name[len(stem) : -len(ext)]
    problems = os.path.join(folder, locations.tagged(locations.PROBLEMS_FILE, tag))
    moved: list[bytes] = []
    with open(problems, encoding="utf-8") as f:
        for line in f:
            if "quarantined_as" not in line:
                continue
            item = json.loads(line)
            if "quarantined_as" in item:
                moved.append(path_bytes(item))
    return _hashes(moved)


def _restored(root: str, paths: list[str], state_dir: str | None) -> np.ndarray:
    """Hashes of the files put back since the previous scan finished: from its quarantine, and from any
    other a restore recorded in its pointer (:func:`dsclean.locations.note_restore`: a scan killed after
    its moves never recorded its quarantine).

    A restore drops a file's line from the problems list, so :func:`_moved_paths` no longer sees that
    it was moved; the journal does (a file moved for a quality flag has an ``ok`` row: reused, it
    would never be checked again)."""
    from .quarantine.status import restored_since

    pointer = locations.pointer_for(root, paths, state_dir)
    if not pointer:
        return np.empty(0, np.int64)
    since = int(pointer.get("finished_ns") or 0)
    qdirs = [
        q
        for q in [pointer.get("quarantine"), *(pointer.get("restored_from") or [])]
        if isinstance(q, str) and os.path.isdir(q)
    ]
    return _hashes([p for q in dict.fromkeys(qdirs) for p in restored_since(q, root, since)])


class PreviousResults:
    """The ``ok`` rows of a root's previous results, matched by (path, size, mtime_ns) in batches."""

    def __init__(self, files: list[parquetio.File], flags_same: bool, moved: np.ndarray | None = None) -> None:
        self._files = files
        self._moved = np.unique(moved) if moved is not None else np.empty(0, np.int64)  # hashes: never reused
        self.flags_same = flags_same  # the flags column was computed with today's thresholds
        starts, hashes = [0], []
        self._groups: list[tuple[int, int]] = []  # global row group -> (file, row group in file)
        for f_no, pf in enumerate(files):
            for g in range(pf.metadata.num_row_groups):
                paths = pf.read_row_group(g, columns=["path"]).column(0).to_pylist()
                hashes.append(_hashes(paths))
                starts.append(starts[-1] + len(paths))
                self._groups.append((f_no, g))
        self._starts = np.array(starts, dtype=np.int64)
        all_hashes = np.concatenate(hashes) if hashes else np.empty(0, np.int64)
        self._order = np.argsort(all_hashes, kind="stable")
        self._sorted = all_hashes[self._order]
        self._cache: OrderedDict[int, pa.Table] = OrderedDict()
        self.notes: list[str] = []

    @classmethod
    def open(cls, root: str, state_dir: str | None, options: str, flags: dict | None) -> "PreviousResults | None":
        """The previous results of ``root`` if they were made with check options ``options`` (else None)."""
        paths, _ = locations.find_results(root, None, state_dir)
        files = []
        try:
            for path in paths:
                pf = parquetio.File(path)
                raw = (pf.schema_arrow.metadata or {}).get(META_KEY.encode())
                meta = json.loads(raw) if raw else {}
                if (
                    meta.get("root") != root
                    or meta.get("options") != options
                    or not pf.schema_arrow.remove_metadata().equals(SCHEMA)
                ):
                    return None  # other options, rules, root or schema: nothing of it may be reused
                files.append(pf)
            if not files:
                return None
            moved = np.concatenate([_moved_paths(path) for path in paths] + [_restored(root, paths, state_dir)])
            return cls(
                files, flags_same=flags is not None and meta.get("flags") == json.loads(json.dumps(flags)), moved=moved
            )
        except (OSError, ValueError, KeyError, pa.ArrowException):
            return None  # unreadable (results or problems list): the scan cache and the checkers do the work

    def close(self) -> None:
        """Let go of the previous results files (before the new results replace them is fine: POSIX)."""
        self._cache.clear()
        for pf in self._files:
            pf.close()

    def __len__(self) -> int:
        return len(self._sorted)

    def candidates(self, keys: list[bytes]) -> np.ndarray:
        """Per path: the row number of a previous row with the same path hash, -1 if none."""
        if not len(self._sorted):
            return np.full(len(keys), -1, np.int64)
        h = _hashes(keys)
        pos = np.minimum(np.searchsorted(self._sorted, h), len(self._sorted) - 1)
        found = np.where(self._sorted[pos] == h, self._order[pos], -1)
        if len(self._moved):
            found[np.isin(h, self._moved)] = -1
        return found

    def rows(self, rows: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """The previous rows numbered ``rows``, in row order, and where each came from in ``rows``.

        Discovery lists the tree in the order the previous scan wrote it, so a batch is mostly a
        run of consecutive rows: a zero-copy slice of one row group, no gather.
        """
        by_row = np.argsort(rows, kind="stable")
        sorted_rows = rows[by_row]
        group_of = np.searchsorted(self._starts, sorted_rows, side="right") - 1
        parts = []
        for g in np.unique(group_of).tolist():
            within = sorted_rows[group_of == g] - self._starts[g]
            table = self._group(g)
            if within[-1] - within[0] == len(within) - 1:  # consecutive (rows are unique)
                parts.append(table.slice(int(within[0]), len(within)))
            else:
                parts.append(table.take(pa.array(within)))
        return (pa.concat_tables(parts) if parts else SCHEMA.empty_table()), by_row

    def _group(self, g: int) -> pa.Table:
        table = self._cache.get(g)
        if table is None:
            f_no, within = self._groups[g]
            table = self._files[f_no].read_row_group(within).replace_schema_metadata(None)
            self._cache[g] = table
            if len(self._cache) > _GROUPS_KEPT:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(g)
        return table

    def match(
        self, prefix: str, rels: list[str], keys: list[bytes], stats: dict[str, tuple[int, int, int, int]]
    ) -> tuple[pa.Table, list[int], list[os.stat_result]]:
        """The reusable rows of a batch of discovered paths, their positions in the batch and their ``stat``.

        Stats each file that has a previous row; a file that vanished is no match. A file stat'ed
        but not matched goes into ``stats`` (``rel -> (size, mtime_ns, inode, device)``), so the
        scan cache path does not stat it again.
        """
        import pyarrow.compute as pc  # here: a first scan never needs it (see scanning.cache)

        found = self.candidates(keys)
        stat = os.stat
        sts: list[os.stat_result] = []
        if (found >= 0).all():  # an unchanged tree: every path has a row (no index per file)
            try:
                sts = [stat(prefix + rel) for rel in rels]
                pos = list(range(len(rels)))
            except OSError:
                sts = []  # one vanished since listing: the careful loop below
        if not sts:
            pos = []
            for i in np.flatnonzero(found >= 0).tolist():
                try:
                    sts.append(stat(prefix + rels[i]))
                except OSError:
                    continue  # vanished since listing: checked (-> vanished)
                pos.append(i)
        if not pos:
            return SCHEMA.empty_table(), [], []
        try:
            table, order = self.rows(found[pos])
        except (OSError, pa.ArrowException) as exc:  # a damaged row group: reuse nothing more of these results
            self.notes.append(
                f"previous scan results are damaged ({exc}); not reused (the scan cache and the "
                "checkers answer instead)"
            )
            self._sorted = self._sorted[:0]  # every later lookup finds nothing
            stats.update((rels[i], (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)) for i, st in zip(pos, sts))
            return SCHEMA.empty_table(), [], []
        if len(order) > 1 and not (order[1:] > order[:-1]).all():  # not in discovery order: align
            pos, sts = [pos[j] for j in order.tolist()], [sts[j] for j in order.tolist()]
        same = pc.and_(
            pc.and_(
                pc.equal(table["path"], pa.array([keys[i] for i in pos], pa.binary())), pc.equal(table["status"], R.OK)
            ),
            pc.and_(
                pc.equal(table["size"], pa.array([st.st_size for st in sts], pa.int64())),
                pc.equal(table["mtime_ns"], pa.array([st.st_mtime_ns for st in sts], pa.int64())),
            ),
        )
        keep = pc.and_(same, pc.invert(pc.is_in(table["reason"], pa.array(sorted(NOT_CACHED), pa.string()))))
        keep = pc.fill_null(keep, False)
        if pc.all(keep).as_py():
            return table, pos, sts
        mask = keep.to_pylist()
        for i, st, k in zip(pos, sts, mask):
            if not k:
                stats[rels[i]] = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
        return (table.filter(keep), [i for i, k in zip(pos, mask) if k], [st for st, k in zip(sts, mask) if k])
