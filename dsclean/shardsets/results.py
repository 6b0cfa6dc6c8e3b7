"""A shard set's results: the scan's results table plus the shard columns, and its problems list.

The table is the one schema (:data:`dsclean.scanning.schema.SCHEMA`, then
:data:`dsclean.schema.SHARD_COLUMNS`): one row per checked sample, ``path`` = ``<shard>/<member>``.
``problems.jsonl`` holds the bad and warn verdicts and every structure problem, each naming its shard
and member, key or row. Both are written under temp names and published when the run ends.
"""

from __future__ import annotations

import contextlib
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from .. import locations
from .. import reasons as R
from ..atomic import publish, temp_next_to
from ..scanning.results import META_KEY
from ..scanning.verdict import Verdict
from .events import Problem
from .rows import SHARD_SCHEMA, problem_line, results_batch

__all__ = ["SHARD_SCHEMA", "ShardResultsWriter", "problem_line", "results_batch"]


class ShardResultsWriter:
    """Stream verdicts with their shard, member, key and row to ``scan_results.parquet`` and ``problems.jsonl``."""

    def __init__(self, report_dir: str, meta: dict, batch_rows: int = 8192, tag: str = "") -> None:
        """``tag``: a job array's part (:func:`dsclean.locations.part_tag`), in both file names."""
        os.makedirs(report_dir, exist_ok=True)
        self.results_path = os.path.join(report_dir, locations.tagged(locations.RESULTS_FILE, tag))
        self.problems_path = os.path.join(report_dir, locations.tagged(locations.PROBLEMS_FILE, tag))
        self._tmp_results = temp_next_to(self.results_path)
        self._tmp_problems = temp_next_to(self.problems_path)
        schema = SHARD_SCHEMA.with_metadata({META_KEY: json.dumps(meta)})
        self._writer = pq.ParquetWriter(self._tmp_results, schema, compression="zstd")
        self._problems = open(self._tmp_problems, "w", encoding="utf-8")
        self._verdicts: list[Verdict] = []
        self._where: list[tuple[str, str, str, int | None]] = []
        self._batch_rows = batch_rows
        self.rows = 0

    def add(self, v: Verdict, shard: str, member: str, key: str, row: int | None) -> None:
        self._verdicts.append(v)
        self._where.append((shard, member, key, row))
        self.rows += 1
        if v.status != R.OK:
            self._problems.write(problem_line(v, shard, member, key, row) + "\n")
        if len(self._verdicts) >= self._batch_rows:
            self._flush()

    def add_batch(self, batch: pa.RecordBatch, problem_lines: list[str]) -> None:
        """Rows already made (:func:`results_batch`, by the worker that checked them) and their problem lines."""
        self._flush()
        self._writer.write_table(pa.Table.from_batches([batch]).replace_schema_metadata(self._writer.schema.metadata))
        self.rows += batch.num_rows
        for line in problem_lines:
            self._problems.write(line + "\n")

    def add_problem(self, p: Problem) -> None:
        """A structure problem (no verdict row: it is not one sample's bytes)."""
        line = {
            "status": R.BAD,
            "reason": p.reason,
            "detail": p.detail,
            "shard": p.shard,
            "member": p.member,
            "key": p.key,
            "row": p.row,
        }
        self._problems.write(json.dumps(line) + "\n")

    def add_checked(self, checked) -> None:
        """A :class:`~.tartasks.Checked` task's rows (Arrow IPC made by its worker) and problem lines."""
        for data in checked.batches:
            self.add_batch(pa.ipc.read_record_batch(pa.py_buffer(data), SHARD_SCHEMA), [])
        for row in checked.not_ok:
            self._problems.write(row.line + "\n")

    def _flush(self) -> None:
        if not self._verdicts:
            return
        batch = results_batch(self._verdicts, self._where)
        self._writer.write_table(pa.Table.from_batches([batch]).replace_schema_metadata(self._writer.schema.metadata))
        self._verdicts, self._where = [], []

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self._writer.close()
        with contextlib.suppress(OSError):
            self._problems.close()
        for tmp in (self._tmp_results, self._tmp_problems):
            if os.path.exists(tmp):
                os.unlink(tmp)

    def close(self) -> None:
        try:
            self._flush()
            self._writer.close()
            self._problems.close()
            publish(self._tmp_results, self.results_path)
            publish(self._tmp_problems, self.problems_path)
        except OSError:
            self.discard()
            raise
