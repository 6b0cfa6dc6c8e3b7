"""A shard set's results rows as a worker makes them: the table's schema and a batch of verdicts with their shard
columns, and a bad or warn verdict's ``problems.jsonl`` line.

Needs ``pyarrow`` alone (as :mod:`dsclean.scanning.schema`, which the workers' forkserver preloads), never
``pyarrow.parquet``: a worker that reads a shard builds its rows without importing the Parquet writer (~40 ms of
CPU a worker); :mod:`.results` writes them.
"""

from __future__ import annotations

import json

import pyarrow as pa

from ..scanning.schema import SCHEMA, verdicts_batch
from ..scanning.verdict import Verdict
from ..schema import SHARD_COLUMNS, arrow_fields

#: the results table of a shard set
SHARD_SCHEMA = pa.schema(list(SCHEMA) + arrow_fields(SHARD_COLUMNS))


def results_batch(verdicts: list[Verdict], where: list[tuple[str, str, str, int | None]]) -> pa.RecordBatch:
    """Verdicts and their ``(shard, member, key, row)`` as one record batch of :data:`SHARD_SCHEMA`."""
    batch = verdicts_batch(verdicts)
    extra = list(zip(*where)) or [()] * len(SHARD_COLUMNS)
    arrays = list(batch.columns) + [pa.array(col, type=f.type) for col, f in zip(extra, arrow_fields(SHARD_COLUMNS))]
    return pa.RecordBatch.from_arrays(arrays, schema=SHARD_SCHEMA)


def problem_line(v: Verdict, shard: str, member: str, key: str, row: int | None) -> str:
    """The ``problems.jsonl`` line of a bad or warn verdict."""
    return json.dumps({**v.to_json(), "shard": shard, "member": member, "key": key, "row": row})
