"""The scan's own Parquet file (its results), written and read back without importing ``pyarrow.parquet``.

``import pyarrow.parquet`` imports ``pyarrow.fs``: OpenSSL and the S3, GCS, Azure and HDFS file systems
(~50 M instructions, ~15 ms), on the critical path of every scan's start (issue 29's one-file scan), to open
a local file the Parquet classes of ``pyarrow._parquet`` open by themselves. This module drives those
classes as ``pyarrow.parquet``'s ``ParquetWriter`` and ``ParquetFile`` do for a local path, with the same
options (the same file, byte for byte: tested); where a pyarrow lays them out otherwise, it is
``pyarrow.parquet`` itself.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa

try:  # like schema.call_function: the Cython classes behind pyarrow.parquet, without pyarrow.fs
    from pyarrow._parquet import ParquetReader as _Reader
    from pyarrow._parquet import ParquetWriter as _Writer
except ImportError:  # pragma: no cover - a pyarrow laid out otherwise: the public module below
    _Reader = _Writer = None

#: pyarrow.parquet.ParquetWriter's defaults that its Cython writer does not share (pyarrow 14-26)
_WRITER_DEFAULTS: dict[str, Any] = {
    "compression": "snappy",
    "version": "2.6",
    "write_statistics": True,
    "use_deprecated_int96_timestamps": False,
    "writer_engine_version": "V2",
    "data_page_version": "1.0",
    "use_compliant_nested_type": True,
    "store_schema": True,
}


class Writer:
    """A Parquet file being written to ``path`` (``pyarrow.parquet.ParquetWriter``'s ``write_table``,
    ``write_batch``, ``close`` and ``schema``)."""

    def __init__(self, path: str, schema: pa.Schema, **options: Any) -> None:
        self.schema = schema
        self._writer: Any = None
        if _Writer is not None:
            try:
                self._writer = _Writer(path, schema, **{**_WRITER_DEFAULTS, **options})
            except TypeError:  # an option this pyarrow's Cython writer does not take: the public class
                self._writer = None
        if self._writer is None:
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(path, schema, **options)

    def write_table(self, table: pa.Table, row_group_size: int | None = None) -> None:
        if not table.schema.equals(self.schema, check_metadata=False):
            raise ValueError(f"table schema does not match the file's:\n{table.schema}\nvs.\n{self.schema}")
        self._writer.write_table(table, row_group_size=row_group_size)

    def write_batch(self, batch: pa.RecordBatch, row_group_size: int | None = None) -> None:
        self.write_table(pa.Table.from_batches([batch], batch.schema), row_group_size)

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class File:
    """A local Parquet file opened for reading (``pyarrow.parquet.ParquetFile``'s ``metadata``,
    ``schema_arrow``, ``iter_batches``, ``read`` and ``read_row_group``, columns named by their top name)."""

    def __init__(self, path: str) -> None:
        if _Reader is None:  # pragma: no cover - see the import above
            import pyarrow.parquet as pq

            self.reader: Any = pq.ParquetFile(path).reader
        else:
            self.reader = _Reader()
            self.reader.open(path, use_memory_map=False, buffer_size=0, pre_buffer=True)
        self._paths: dict[str, list[int]] = {}
        for i, column in enumerate(self.reader.column_paths):
            self._paths.setdefault(column[0], []).append(i)

    @property
    def metadata(self):
        return self.reader.metadata

    @property
    def schema_arrow(self) -> pa.Schema:
        return self.reader.schema_arrow

    def _indices(self, columns: list[str] | None) -> list[int] | None:
        return None if columns is None else [i for name in columns for i in self._paths.get(name, [])]

    def iter_batches(self, batch_size: int = 65_536, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        groups = range(self.reader.metadata.num_row_groups)
        return self.reader.iter_batches(batch_size, row_groups=groups, column_indices=self._indices(columns))

    def read(self, columns: list[str] | None = None) -> pa.Table:
        return self.reader.read_all(column_indices=self._indices(columns))

    def read_row_group(self, group: int, columns: list[str] | None = None) -> pa.Table:
        return self.reader.read_row_group(group, column_indices=self._indices(columns))

    def close(self) -> None:
        self.reader.close()
