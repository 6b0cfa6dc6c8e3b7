"""The scan's results written and read without ``pyarrow.parquet`` (scanning.parquetio): the same file as the
public classes write, read back the same, column names as the public reader takes them."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dsclean.scanning import parquetio
from dsclean.scanning.results import DICTIONARY_COLUMNS, META_KEY
from dsclean.scanning.schema import SCHEMA, verdicts_batch
from dsclean.scanning.verdict import Verdict


def _table() -> pa.Table:
    verdicts = [
        Verdict(path=f"cats/{i}.jpg", kind="image", status="ok" if i % 3 else "bad", reason="" if i % 3 else "corrupt")
        for i in range(50)
    ]
    for i, v in enumerate(verdicts):
        v.size, v.width, v.flags = 1000 + i, 10 + i, ["dark"] if i % 4 == 0 else []
    schema = SCHEMA.with_metadata({META_KEY: json.dumps({"root": "/data", "shard": None})})
    return pa.Table.from_batches([verdicts_batch(verdicts)]).replace_schema_metadata(schema.metadata)


@pytest.mark.parametrize(
    "options", [{"compression": "zstd", "use_dictionary": DICTIONARY_COLUMNS}, {"compression": "zstd"}, {}]
)  # {}: pyarrow.parquet's own defaults (snappy) too
def test_the_writer_writes_the_file_pyarrow_parquet_writes(tmp_path, options):
    table = _table()
    ours, theirs = tmp_path / "ours.parquet", tmp_path / "theirs.parquet"
    with parquetio.Writer(str(ours), table.schema, **options) as w:
        w.write_table(table.slice(0, 20), row_group_size=20)
        w.write_batch(table.slice(20).to_batches()[0])
    with pq.ParquetWriter(str(theirs), table.schema, **options) as w:
        w.write_table(table.slice(0, 20), row_group_size=20)
        w.write_batch(table.slice(20).to_batches()[0])
    assert ours.read_bytes() == theirs.read_bytes()
    assert pq.read_table(str(ours)).equals(table)


def test_the_file_reads_back_columns_by_name_as_pyarrow_parquet_does(tmp_path):
    table = _table()
    path = str(tmp_path / "r.parquet")
    pq.write_table(table, path, row_group_size=16)
    ours, theirs = parquetio.File(path), pq.ParquetFile(path)
    assert ours.schema_arrow.equals(theirs.schema_arrow, check_metadata=True)
    assert ours.metadata.num_row_groups == theirs.metadata.num_row_groups == 4
    columns = ["status", "flags", "path"]
    assert ours.read(columns).equals(theirs.read(columns))
    assert ours.read().equals(theirs.read())
    assert ours.read_row_group(2, ["path"]).equals(theirs.read_row_group(2, columns=["path"]))
    got = [b for b in ours.iter_batches(batch_size=7, columns=["flags", "size"])]
    want = [b for b in theirs.iter_batches(batch_size=7, columns=["flags", "size"])]
    assert len(got) == len(want) > 1 and all(a.equals(b) for a, b in zip(got, want))
    ours.close()


def test_a_table_of_another_schema_is_refused(tmp_path):
    table = _table()
    with parquetio.Writer(str(tmp_path / "x.parquet"), table.schema) as w:
        with pytest.raises(ValueError, match="does not match"):
            w.write_table(table.select(["path", "status"]))


def test_without_the_cython_classes_the_public_module_writes(tmp_path, monkeypatch):
    """A pyarrow without ``pyarrow._parquet``'s classes (laid out otherwise): the public writer, same file."""
    monkeypatch.setattr(parquetio, "_Writer", None)
    table = _table()
    path = tmp_path / "w.parquet"
    with parquetio.Writer(str(path), table.schema, compression="zstd") as w:
        assert isinstance(w._writer, pq.ParquetWriter)
        w.write_table(table)
    assert pq.read_table(str(path)).equals(table)
