"""Stage 3: verdicts on disk, and back.

The scan streams verdicts into a Parquet table (every file, columnar, compact
for millions of rows) and bad/warn ones into a JSONL list for people. Both are
written to temp files and renamed when the scan ends. Later stages read the
table with :func:`read_results`.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Iterable

import pyarrow as pa

from .. import locations, reasons
from ..atomic import publish, temp_next_to
from .parquetio import Writer
from .schema import SCHEMA  # the results table's schema (defined apart: workers build batches without pyarrow.parquet)
from .verdict import Verdict, encode_path

#: columns Parquet dictionary-encodes: the few-valued strings (and the flag codes). Unique ones (path,
#: content hash) and the numbers are not: a dictionary for them is built, then dropped, at ~0.3 µs a row.
DICTIONARY_COLUMNS = [f.name for f in SCHEMA if f.type == pa.string()] + ["flags.list.element"]


#: key of the results file's schema metadata: {"root", "shard": [i, n] or null, "options"}
META_KEY = "dsclean"


def read_results_meta(path: str) -> dict:
    """What a results file says about the scan that wrote it (root, part, check options)."""
    if os.path.isdir(path):
        path = os.path.join(path, locations.RESULTS_FILE)
    import pyarrow.parquet as pq  # here: a scan writes its results without pyarrow.parquet (see .parquetio)

    metadata = pq.read_schema(path).metadata or {}
    raw = metadata.get(META_KEY.encode())
    return json.loads(raw) if raw else {}


class ResultsWriter:
    """Stream verdicts to ``<report_dir>/scan_results.parquet`` and ``problems.jsonl``.

    Rows are buffered up to ``batch_rows`` and written as one Parquet row group,
    so memory stays bounded however many files are scanned. Both files are
    written under temp names; :meth:`close` publishes them (fsync + rename), so
    until then any previous results stay whole.
    """

    def __init__(self, report_dir: str, *, tag: str = "", meta: dict | None = None, batch_rows: int = 65_536) -> None:
        os.makedirs(report_dir, exist_ok=True)
        self.report_dir = report_dir
        self.results_path = os.path.join(report_dir, locations.tagged(locations.RESULTS_FILE, tag))
        self.problems_path = os.path.join(report_dir, locations.tagged(locations.PROBLEMS_FILE, tag))
        self._tmp_results = temp_next_to(self.results_path)
        try:
            self._tmp_problems = temp_next_to(self.problems_path)
        except OSError:
            os.unlink(self._tmp_results)
            raise
        schema = SCHEMA.with_metadata({META_KEY: json.dumps(meta or {})})
        try:
            self._writer = Writer(self._tmp_results, schema, compression="zstd", use_dictionary=DICTIONARY_COLUMNS)
            self._problems = open(self._tmp_problems, "w", encoding="utf-8")
        except OSError:  # a full disk already: leave no temp file behind
            for tmp in (self._tmp_results, self._tmp_problems):
                if os.path.exists(tmp):
                    os.unlink(tmp)
            raise
        self._batch_rows = batch_rows
        self._rows: list[tuple] = []
        self._tables: list[pa.Table] = []  # rows already in Arrow (reused from earlier results)
        self._table_rows = 0
        self.rows = 0

    def add(self, v: Verdict, extra: dict | None = None) -> None:
        """Buffer one verdict; ``extra`` keys (e.g. where it was quarantined) go to the JSONL line only."""
        row = tuple(vars(v).values())  # dataclass fields, in FIELDS order
        self._rows.append((encode_path(v.path), *row[1:]))
        self.rows += 1
        if v.status != reasons.OK or extra:  # bad/warn, or moved for a quality flag
            # ensure_ascii keeps lone surrogates (non-UTF-8 names) as \udcXX: lossless and valid JSON
            with _naming(self.problems_path):
                self._problems.write(json.dumps({**v.to_json(), **(extra or {})}) + "\n")
        if len(self._rows) + self._table_rows >= self._batch_rows:
            self._flush()

    def add_problem(self, v: Verdict, extra: dict | None = None) -> None:
        """Write the problems-file line of a bad or warn verdict whose row goes in through :meth:`add_table`
        (a fresh chunk's batch)."""
        with _naming(self.problems_path):
            self._problems.write(json.dumps({**v.to_json(), **(extra or {})}) + "\n")

    def add_row(self, row: tuple) -> None:
        """Buffer an ``ok`` row that is already in results-table form (from the scan cache)."""
        self._rows.append(row)
        self.rows += 1
        if len(self._rows) + self._table_rows >= self._batch_rows:
            self._flush()

    def add_table(self, table: pa.Table | pa.RecordBatch) -> None:
        """Buffer ``ok`` rows already in Arrow with the results :data:`SCHEMA` (e.g. reused from the
        previous results of an unchanged file): no Python object per row."""
        if table.num_rows:
            table = pa.Table.from_arrays(list(table.columns), schema=self._writer.schema)
            self._tables.append(table)
            self._table_rows += table.num_rows
            self.rows += table.num_rows
            if len(self._rows) + self._table_rows >= self._batch_rows:
                self._flush()

    def _flush(self) -> None:
        parts = self._tables
        if self._rows:
            columns = [pa.array(col, type=f.type) for col, f in zip(zip(*self._rows), SCHEMA)]
            parts.append(pa.Table.from_batches([pa.RecordBatch.from_arrays(columns, schema=self._writer.schema)]))
        if parts:
            table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
            with _naming(self.results_path):
                self._writer.write_table(table, row_group_size=max(1, table.num_rows))  # one row group
            self._rows, self._tables, self._table_rows = [], [], 0

    def discard(self) -> None:
        """Drop the temp files: the previous results (if any) stay as they were (also on a full disk)."""
        try:
            with contextlib.suppress(OSError):  # closing flushes; on a full disk that fails again: the file goes anyway
                self._writer.close()
            with contextlib.suppress(OSError):
                self._problems.close()
        finally:
            for tmp in (self._tmp_results, self._tmp_problems):
                if os.path.exists(tmp):
                    os.unlink(tmp)

    def close(self, more_problems: Iterable[dict] = ()) -> None:
        """Write what is buffered, append ``more_problems`` lines (files quarantined earlier), publish both files."""
        try:
            self._flush()
            with _naming(self.results_path):
                self._writer.close()
            with _naming(self.problems_path):
                for line in more_problems:
                    self._problems.write(json.dumps(line) + "\n")
                self._problems.close()
            publish(self._tmp_results, self.results_path)
            publish(self._tmp_problems, self.problems_path)
        except OSError:
            self.discard()  # nothing half-written stays under a temp name
            raise


@contextlib.contextmanager
def _naming(path: str):
    """Give an OSError without a file name (a buffered write on a full disk) the name of the output."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), path) from exc
        raise


def read_results(path: str, columns: list[str] | None = None) -> pa.Table:
    """The results table of a scan: a results file, or a report folder holding one.

    ``path`` is binary (exact file-name bytes); ``os.fsdecode`` gives a ``str``.
    """
    if os.path.isdir(path):
        path = os.path.join(path, locations.RESULTS_FILE)
    import pyarrow.parquet as pq  # here, not at the top (see .parquetio)

    return pq.read_table(path, columns=columns)


def iter_verdicts(path: str, *, status: str | None = None):
    """Yield :class:`Verdict` objects from a results file, one batch in memory at a time."""
    if os.path.isdir(path):
        path = os.path.join(path, locations.RESULTS_FILE)
    import pyarrow.parquet as pq  # here, not at the top (see .parquetio)

    for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
        if status is not None:
            import pyarrow.compute as pc  # here: not on the scan's start (see scanning.cache)

            batch = batch.filter(pc.equal(batch.column("status"), status))
        for row in batch.to_pylist():
            row["path"] = os.fsdecode(row["path"])
            yield Verdict(**row)


def read_problems(path: str) -> list[dict]:
    """The bad/warn list of a scan (``problems.jsonl``) as dicts."""
    if os.path.isdir(path):
        path = os.path.join(path, locations.PROBLEMS_FILE)
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
