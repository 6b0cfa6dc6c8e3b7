"""The scan cache: verdicts keyed by (relative path, size, mtime_ns, check options, checker version).

One table per set of check options and checker version (named by a hash of
them), so a scan with other options neither sees nor evicts these verdicts, and
no verdict outlives a change of the integrity rules
(:data:`~dsclean.scanning.check.CHECKER_VERSION`).

Lets the next scan of the same root re-check only new or changed files, so a
re-scan of an unchanged tree costs about a ``stat()`` per file. SQLite in WAL
mode, committed every few thousand verdicts: after a kill -9 a re-run resumes
from what was recorded (at most one uncommitted batch is checked again).
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from typing import Iterable

from .. import reasons as R
from .check import CHECKER_VERSION, CheckOptions
from .verdict import FIELDS, Verdict, encode_path

#: what SQLite stores: every verdict field but the flags (a list; the scan derives them from the facts
#: with the thresholds of the day, so changing a threshold re-checks nothing)
_STORED = FIELDS[: FIELDS.index("flags")]
_COLUMNS = ", ".join(_STORED)
_PHASH = _STORED.index("phash")
_GREY = _STORED.index("grayscale")
_SIGN = 1 << 63  # SQLite integers are signed 64-bit: a uint64 perceptual hash is stored as its int64 bits
_LOOKUP_BATCH = 500  # SQLite parameters per IN (...) query


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
    return CheckOptions(**{k: v for k, v in (data if isinstance(data, dict) else {}).items() if k in known})


#: verdicts that depend on the environment (permissions, load, limits, a file in motion), not on
#: the bytes: a later scan must check again (a chmod changes neither size nor mtime)
NOT_CACHED = frozenset({R.VANISHED, R.CHANGED, R.UNREADABLE, R.TIMEOUT, R.TOO_LARGE, R.DECODER_CRASH, R.NOT_REGULAR})


def _to_db(row: tuple) -> tuple:
    p = row[_PHASH]
    return row if p is None or p < _SIGN else (*row[:_PHASH], p - 2 * _SIGN, *row[_PHASH + 1:])


def _from_db(row: tuple) -> tuple:
    """A stored row in results-table form: the phash unsigned again, grayscale a bool again (SQLite
    keeps 0/1), flags None (the scan derives them)."""
    p, grey = row[_PHASH], row[_GREY]
    if (p is None or p >= 0) and grey is None:
        return (*row, None)
    out = list(row)
    if p is not None and p < 0:
        out[_PHASH] = p + 2 * _SIGN
    if grey is not None:
        out[_GREY] = bool(grey)
    out.append(None)
    return tuple(out)


def row_to_verdict(rel: str, row: tuple) -> Verdict:
    return Verdict(rel, *row[1:])


class ScanCache:
    """Verdicts of earlier scans of one root. Use :meth:`lookup` before checking, :meth:`add` after."""

    def __init__(self, path: str, options: CheckOptions, *, commit_every: int = 5000, commit_seconds: float = 2.0):
        self.path = path
        self.table = "verdicts_" + hashlib.sha256(options_key(options).encode()).hexdigest()[:16]
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} ({_COLUMNS}, PRIMARY KEY (path)) WITHOUT ROWID")
        self._pending: list[tuple] = []
        self._commit_every, self._commit_seconds = commit_every, commit_seconds
        self._last_commit = time.monotonic()
        self.hits = 0

    def lookup(self, files: Iterable[tuple[str, int, int]]) -> dict[str, tuple]:
        """Cached rows for those ``(rel, size, mtime_ns)`` whose size and mtime still match.

        A row is a results-table row (``path`` as bytes first, then the other
        :data:`~dsclean.scanning.verdict.FIELDS`); :func:`row_to_verdict` makes it a Verdict.
        Rows, not Verdicts: a re-scan of an unchanged tree is mostly this loop.
        """
        files = list(files)
        rows = self.rows_of([rel for rel, _, _ in files])
        found = {rel: row for rel, size, mtime in files
                 if (row := rows.get(rel)) is not None and row[5] == size and row[6] == mtime}
        self.hits += len(found)
        return found

    def rows_of(self, rels: list[str]) -> dict[str, tuple]:
        """Cached rows of those paths, whatever their size and mtime (the caller compares them)."""
        wanted = {encode_path(rel): rel for rel in rels}
        keys = list(wanted)
        found: dict[str, tuple] = {}
        for start in range(0, len(keys), _LOOKUP_BATCH):
            batch = keys[start : start + _LOOKUP_BATCH]
            marks = ",".join("?" * len(batch))
            for row in self._db.execute(f"SELECT {_COLUMNS} FROM {self.table} WHERE path IN ({marks})", batch):
                found[wanted[row[0]]] = _from_db(row)
        return found

    def add(self, v: Verdict) -> None:
        """Remember a fresh verdict, unless it says more about the moment than about the file."""
        if v.size is None or v.mtime_ns is None or v.reason in NOT_CACHED:
            return
        row = tuple(vars(v).values())[: len(_STORED)]
        self._pending.append(_to_db((encode_path(v.path), *row[1:])))
        if len(self._pending) >= self._commit_every or time.monotonic() - self._last_commit > self._commit_seconds:
            self.commit()

    def add_rows(self, rows: Iterable[tuple]) -> None:
        """:meth:`add` for fresh verdicts already in results-table form (rows of worker columns)."""
        n = len(_STORED)
        self._pending.extend(_to_db(r[:n]) for r in rows
                             if r[5] is not None and r[6] is not None and r[3] not in NOT_CACHED)
        if len(self._pending) >= self._commit_every or time.monotonic() - self._last_commit > self._commit_seconds:
            self.commit()

    def forget(self, rel: str) -> None:
        """Drop the verdict of a file moved out of the root (quarantined): if a file comes back at that
        path with the same size and mtime (a restore, a backup copied with ``cp -p``), it is checked again."""
        key = encode_path(rel)
        self._pending = [r for r in self._pending if r[0] != key] if self._pending else self._pending
        self._db.execute(f"DELETE FROM {self.table} WHERE path = ?", (key,))

    def commit(self) -> None:
        if self._pending:
            marks = ",".join("?" * len(_STORED))
            self._pending.sort()  # in key order: ~20% less B-tree work than discovery's hash order
            self._db.execute("BEGIN")
            self._db.executemany(f"INSERT OR REPLACE INTO {self.table} ({_COLUMNS}) VALUES ({marks})", self._pending)
            self._db.execute("COMMIT")
            self._pending = []
        self._last_commit = time.monotonic()

    def close(self) -> None:
        self.commit()
        self._db.close()
