"""The Arrow types of the fact columns, defined once (the facts schema, docs/reference/facts.md, is the contract).

The scan's results table and ``index --facts`` append these columns; readers
(``dsclean dups``, reports) must accept any subset of them, including none.
"""
from __future__ import annotations

import pyarrow as pa

from ..hashing import DIGEST_SIZE
from .facts import FIELDS

#: fact column -> Arrow type; every column nullable (null = not computed / not applicable)
FACT_COLUMNS: dict[str, pa.DataType] = {
    "content_hash": pa.binary(DIGEST_SIZE),
    "phash": pa.uint64(),
    "brightness": pa.float32(),
    "contrast": pa.float32(),
    "entropy": pa.float32(),
    "sharpness": pa.float32(),
    "grayscale": pa.bool_(),
    "orientation": pa.int8(),
    "peak": pa.float32(),
    "rms": pa.float32(),
    "clipped": pa.float32(),
    "dc_offset": pa.float32(),
    "silent_channels": pa.int32(),
    "flags": pa.list_(pa.string()),
}
assert tuple(FACT_COLUMNS) == FIELDS, "FACT_COLUMNS and Facts fields must agree"

FACT_FIELDS: list[pa.Field] = [pa.field(name, typ) for name, typ in FACT_COLUMNS.items()]


def facts_table(rows: list[dict]) -> pa.Table:
    """A table of fact rows (dicts from :meth:`Facts.row`), typed by :data:`FACT_COLUMNS`."""
    return pa.Table.from_pylist(rows, schema=pa.schema(FACT_FIELDS))
