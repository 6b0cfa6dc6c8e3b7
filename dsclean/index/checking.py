"""Check the files an index would take without a current verdict: never scanned, changed, or restored.

``scan && index`` must never ship an unchecked file. The build gives this module the
rows whose scan verdict is missing or stale (size or mtime differ); each gets a
verdict the way ``dsclean scan`` would give it: from the root's scan cache when the
file is unchanged since an earlier check, else decoded on a loky process pool with
the scan's recorded check options. Fresh verdicts go into the scan cache, so the
next scan reuses them. Memory stays compact: paths stay in Arrow arrays and only
one slice at a time becomes Python objects.
"""

from __future__ import annotations

import os
import sys
from typing import Iterator

import numpy as np
import pyarrow as pa

from ..scanning.cache import ScanCache
from ..scanning.check import CheckOptions
from ..scanning.executors import run_checks
from ..scanning.results import SCHEMA
from ..scanning.verdict import Verdict, encode_path

#: files looked up in the cache at once
_LOOKUP_ROWS = 2000
#: files per task sent to a worker (as in the scan)
_CHUNK = 32


class _Verdicts:
    """Verdicts collected into record batches of the results schema (bounded Python lists)."""

    def __init__(self, batch_rows: int = 65_536) -> None:
        self.batches: list[pa.RecordBatch] = []
        self.rows: list[tuple] = []
        self.batch_rows = batch_rows

    def add_row(self, row: tuple) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.batch_rows:
            self.flush()

    def add(self, v: Verdict) -> None:
        values = tuple(vars(v).values())
        self.add_row((encode_path(v.path), *values[1:]))

    def flush(self) -> None:
        if self.rows:
            columns = [pa.array(col, type=f.type) for col, f in zip(zip(*self.rows), SCHEMA)]
            self.batches.append(pa.RecordBatch.from_arrays(columns, schema=SCHEMA))
            self.rows = []

    def table(self) -> pa.Table:
        self.flush()
        return pa.Table.from_batches(self.batches, schema=SCHEMA)


def open_cache(path: str | None, options: CheckOptions) -> ScanCache | None:
    """The scan cache at ``path`` for these options, or None if it cannot be opened (checks still run)."""
    if path is None:
        return None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return ScanCache(path, options)
    except OSError:
        return None


def check_rows(
    root: str,
    paths: pa.Array,
    sizes: np.ndarray,
    mtimes: np.ndarray,
    options: CheckOptions,
    *,
    jobs: int,
    cache: ScanCache | None,
    progress: bool = False,
) -> tuple[pa.Table, int]:
    """Verdicts (a results-schema table) for ``paths`` (binary, relative to ``root``); and how many came from the cache.

    ``sizes``/``mtimes`` are what the build's walk saw, to validate cached verdicts.
    """
    out = _Verdicts()
    misses = np.zeros(len(paths), dtype=bool)
    from_cache = 0
    for start in range(0, len(paths), _LOOKUP_ROWS):
        rels = [os.fsdecode(b) for b in paths.slice(start, _LOOKUP_ROWS).to_pylist()]
        files = [(rel, int(sizes[start + i]), int(mtimes[start + i])) for i, rel in enumerate(rels)]
        hits = cache.lookup(files) if cache is not None else {}
        for i, rel in enumerate(rels):
            row = hits.get(rel)
            if row is None:
                misses[start + i] = True
            else:
                out.add_row(row)
        from_cache += len(hits)
    todo = paths.filter(pa.array(misses))
    if len(todo):
        bar = _bar(len(todo)) if progress else None
        try:
            for verdicts in run_checks(root, _chunks(todo), options, jobs, "loky"):
                for v in verdicts:
                    out.add(v)
                    if cache is not None:
                        cache.add(v)
                if bar is not None:
                    bar.update(len(verdicts))
        finally:
            if bar is not None:
                bar.close()
    return out.table(), from_cache


def _chunks(paths: pa.Array) -> Iterator[list[str]]:
    for start in range(0, len(paths), _LOOKUP_ROWS):
        rels = [os.fsdecode(b) for b in paths.slice(start, _LOOKUP_ROWS).to_pylist()]
        for i in range(0, len(rels), _CHUNK):
            yield rels[i : i + _CHUNK]


def _bar(total: int):
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit=" files", desc="checking", mininterval=0.5, dynamic_ncols=True)
