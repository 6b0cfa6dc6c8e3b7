"""The scan cache: verdicts keyed by (relative path, size, mtime_ns, check options).

Lets the next scan of the same root re-check only new or changed files, so a
re-scan of an unchanged tree costs about a ``stat()`` per file. SQLite in WAL
mode, committed every few thousand verdicts: after a kill -9 a re-run resumes
from what was recorded (at most one uncommitted batch is checked again).
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import astuple
from typing import Iterable

from .check import CheckOptions
from .verdict import FIELDS, Verdict

_COLUMNS = ", ".join(FIELDS)
_LOOKUP_BATCH = 500  # SQLite parameters per IN (...) query


def options_key(options: CheckOptions) -> str:
    """Everything that can change a verdict besides the file itself: a changed option re-checks."""
    from . import __version__

    return json.dumps({"dsclean": __version__, **options.__dict__}, sort_keys=True)


class ScanCache:
    """Verdicts of earlier scans of one root. Use :meth:`lookup` before checking, :meth:`add` after."""

    def __init__(self, path: str, options: CheckOptions, *, commit_every: int = 5000, commit_seconds: float = 2.0):
        self.path = path
        self.key = options_key(options)
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS verdicts ({_COLUMNS}, options TEXT, PRIMARY KEY (path)) WITHOUT ROWID"
        )
        self._pending: list[tuple] = []
        self._commit_every, self._commit_seconds = commit_every, commit_seconds
        self._last_commit = time.monotonic()
        self.hits = 0

    def lookup(self, files: Iterable[tuple[str, int, int]]) -> dict[str, Verdict]:
        """Cached verdicts for those ``(rel, size, mtime_ns)`` whose size, mtime and options still match."""
        wanted = {os.fsencode(rel): (rel, size, mtime) for rel, size, mtime in files}
        keys = list(wanted)
        found: dict[str, Verdict] = {}
        for start in range(0, len(keys), _LOOKUP_BATCH):
            batch = keys[start : start + _LOOKUP_BATCH]
            marks = ",".join("?" * len(batch))
            rows = self._db.execute(f"SELECT {_COLUMNS}, options FROM verdicts WHERE path IN ({marks})", batch)
            for row in rows:
                rel, size, mtime = wanted[row[0]]
                if row[5] == size and row[6] == mtime and row[-1] == self.key:
                    found[rel] = Verdict(rel, *row[1:-1])
        self.hits += len(found)
        return found

    def add(self, v: Verdict) -> None:
        """Remember a fresh verdict (not vanished/changed ones: those must be checked again)."""
        if v.size is None or v.mtime_ns is None or v.reason in ("vanished", "changed"):
            return
        row = astuple(v)
        self._pending.append((os.fsencode(v.path), *row[1:], self.key))
        if len(self._pending) >= self._commit_every or time.monotonic() - self._last_commit > self._commit_seconds:
            self.commit()

    def commit(self) -> None:
        if self._pending:
            marks = ",".join("?" * (len(FIELDS) + 1))
            self._db.execute("BEGIN")
            self._db.executemany(f"INSERT OR REPLACE INTO verdicts ({_COLUMNS}, options) VALUES ({marks})", self._pending)
            self._db.execute("COMMIT")
            self._pending = []
        self._last_commit = time.monotonic()

    def close(self) -> None:
        self.commit()
        self._db.close()
