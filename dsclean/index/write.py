"""The writing of an index build: the kept rows sorted into index order, then written in one go.

:class:`KeptRows` takes the judged rows (labels from the CSV applied, facts columns kept or
dropped) into a :class:`~dsclean.index.spill.Sorter` keyed by index order (class, then walk
order). :func:`write_streamed` streams them column by column into the one-batch Arrow file or
the npy folder (:mod:`dsclean.index.columns`); ``--dedup`` takes them into memory instead
(:func:`sorted_table`, :func:`write_table`). Both write through
:func:`dsclean.atomic.atomic_output` (temp + rename): a failed write leaves an earlier index as it was.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..atomic import atomic_output, output_target
from ..errors import UserError
from .columns import ColumnSink, write_npy_columns, write_one_batch
from .labels import CsvLabels
from .spill import Sorter
from .store import FACTS, META_KEY, NPY_META, write_arrow, write_npy
from .summary import IndexSummary
from .walk import WALK_SCHEMA


def check_output(output: str, fmt: str) -> None:
    """Refuse to replace something that is not an index of the same format (checked before any work)."""
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UserError(f"{output}: the folder {parent} does not exist")
    if fmt == "arrow" and os.path.isdir(output):
        raise UserError(f"{output}: is a folder; an arrow index is a single file (use --format npy for a folder)")
    target = output_target(output, directory=fmt == "npy")  # devices, FIFOs, sockets: refused; links: their target
    if fmt == "arrow" and os.path.isfile(target) and os.path.getsize(target) > 0:
        with open(target, "rb") as f:
            if f.read(6) != b"ARROW1":
                raise UserError(
                    f"{output}: exists and is not an Arrow index (no Arrow file signature); "
                    "refusing to replace it: choose another output path"
                )
    if fmt == "npy" and os.path.lexists(output):
        if not os.path.isdir(output):
            raise UserError(f"{output}: exists and is not a folder; an npy index is a folder")
        if os.listdir(output) and not os.path.isfile(os.path.join(output, NPY_META)):
            raise UserError(f"{output}: exists, is not empty and is not a dsclean npy index; refusing to replace it")


class KeptRows:
    """The rows the index keeps, on their way to a :class:`Sorter` in index order; counts for the schema."""

    def __init__(self, spill: str, *, by_label: bool, facts: bool, csv_labels: CsvLabels | None, classes: int) -> None:
        self.order = Sorter(spill, "order", "order")
        self.by_label, self.facts, self.csv_labels = by_label, facts, csv_labels
        self.csv_seen = np.zeros(len(csv_labels.paths), bool) if csv_labels is not None else None
        self.path_bytes = self.max_size = 0
        self.unlabeled = 0

    def add(self, table: pa.Table, summary: IndexSummary) -> None:
        if not table.num_rows:
            return
        drop = [n for n in table.column_names if n in FACTS and not self.facts]
        table = table.drop_columns(drop)
        if self.csv_labels is not None:
            where = pc.index_in(table.column("path"), value_set=self.csv_labels.paths)
            hit = where.to_numpy(zero_copy_only=False)
            self.csv_seen[hit[~np.isnan(hit)].astype(np.int64) if hit.dtype.kind == "f" else hit] = True
            col = self.csv_labels.ids.take(where)
            listed = pc.is_valid(col)
            summary.unlabeled += int(pc.sum(pc.invert(listed)).as_py() or 0)
            table = table.set_column(table.schema.get_field_index("label"), "label", col).filter(listed)
            if not table.num_rows:
                return
        if self.facts:  # every facts column, null where the results have none: one schema for every block
            for name, typ in FACTS.items():
                if name not in table.column_names:
                    table = table.append_column(pa.field(name, typ), pa.nulls(table.num_rows, typ))
        names = [*WALK_SCHEMA.names, *(FACTS if self.facts else ())]
        table = table.select(names).cast(
            pa.schema([*WALK_SCHEMA, *(pa.field(n, FACTS[n]) for n in FACTS if self.facts)])
        )
        key = table.column("key")
        if self.by_label:  # ImageFolder order: class, then walk order; a 4-byte big-endian label sorts first
            labels = np.ascontiguousarray(table.column("label").to_numpy().astype(">u4"))
            n = len(labels)
            prefix = pa.Array.from_buffers(
                pa.binary(),
                n,
                [None, pa.py_buffer(np.arange(0, 4 * n + 1, 4, np.int32)), pa.py_buffer(labels.tobytes())],
            )
            key = pc.binary_join_element_wise(prefix, key, pa.scalar(b"", pa.binary()))
        table = table.drop_columns(["key"]).append_column("order", key)
        self.path_bytes += int(pc.sum(pc.binary_length(table.column("path"))).as_py() or 0)
        self.max_size = max(self.max_size, int(pc.max(table.column("size")).as_py() or 0))
        self.order.add(table)


def write_streamed(
    output: str, fmt: str, rows: KeptRows, schema: pa.Schema, meta: dict, summary: IndexSummary, classes: int
) -> np.ndarray:
    """Stream the sorted rows into column temp files, then write the index; returns label counts (-1 first)."""
    folder = os.path.join(rows.order.folder, "columns")
    os.makedirs(folder)
    sinks = [ColumnSink(folder, f.name, f.type) for f in schema]
    counts = np.zeros(classes + 1, np.int64)
    bare = pa.schema(list(schema))
    try:
        for table in rows.order.sorted():
            table = table.select(bare.names).cast(bare)
            for sink, col in zip(sinks, table.columns):
                for chunk in col.chunks:
                    sink.append(chunk)
            counts += np.bincount(table.column("label").to_numpy().astype(np.int64) + 1, minlength=classes + 1)
            summary.media_bytes += int(pc.sum(table.column("size")).as_py() or 0)
        for sink in sinks:
            sink.finish()
        summary.rows = sinks[0].length
        with atomic_output(output, directory=fmt == "npy") as tmp:
            if fmt == "arrow":
                write_one_batch(tmp, schema.with_metadata({META_KEY: json.dumps(meta).encode("ascii")}), sinks)
            else:
                write_npy_columns(
                    tmp,
                    {s.name: s for s in sinks},
                    {"labels": "label", "kinds": "kind", "sizes": "size", "mtimes": "mtime_ns"},
                )
                with open(os.path.join(tmp, NPY_META), "w", encoding="ascii") as f:
                    json.dump(meta, f, indent=1)
    finally:
        for sink in sinks:
            sink.close()
    return counts


def finalize(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Index order is the ``order`` column's (already sorted); the index schema, one chunk per column."""
    for f in schema:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.select(schema.names).cast(schema).combine_chunks()


def sorted_table(rows: KeptRows, schema: pa.Schema) -> pa.Table:
    """All the kept rows in index order, in memory, as the index schema (``--dedup`` needs them at once)."""
    return finalize(pa.concat_tables(rows.order.sorted()), schema)


def write_table(output: str, fmt: str, table: pa.Table, meta: dict, summary: IndexSummary, classes: int) -> np.ndarray:
    """Write the index of ``table`` (in index order); returns label counts (-1 first)."""
    summary.rows, summary.media_bytes = table.num_rows, int(pc.sum(table.column("size")).as_py() or 0)
    counts = np.bincount(table.column("label").to_numpy().astype(np.int64) + 1, minlength=classes + 1)
    meta["rows"] = table.num_rows
    writer = write_arrow if fmt == "arrow" else write_npy
    with atomic_output(output, directory=fmt == "npy") as tmp:
        writer(table, tmp, meta)
    return counts
