"""Parquet shards with image or audio bytes: Hugging Face ``datasets`` Image/Audio features (a struct of
``bytes`` and ``path``) or a binary column named with ``--column``, read in row batches (bounded memory).

A row's member name is ``row N:COLUMN``; its key is the row number in the shard (the deny-list's ``row``
too). The name the checker sees takes its extension from the row's ``path`` when that names a media
format, else from the bytes' magic (:func:`dsclean.formats.sniff`).
"""

from __future__ import annotations

from typing import IO, Iterator

from .. import reasons as R
from ..errors import UserError
from ..formats import FORMATS, format_of_name, sniff
from .events import Problem, ReadFailed, Sample, ShardDone

#: rows read at once (a batch of a row group: bounded memory whatever the shard's size)
BATCH_ROWS = 64
#: a value larger than this is not checked (too_large)
MAX_SAMPLE = 1 << 30


def _is_binary(t) -> bool:
    import pyarrow as pa

    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _has_bytes(t) -> bool:
    import pyarrow as pa

    if not pa.types.is_struct(t):
        return False
    i = t.get_field_index("bytes")
    return i >= 0 and _is_binary(t.field(i).type)


def media_columns(schema, column: str | None, where: str) -> list[str]:
    """The columns holding media bytes: ``column`` (checked), else every struct with a binary ``bytes`` field."""
    if column is not None:
        if column not in schema.names:
            raise UserError(f"{where}: no column {column!r} (it has {', '.join(schema.names[:20])})")
        t = schema.field(column).type
        if not (_is_binary(t) or _has_bytes(t)):
            raise UserError(f"{where}: column {column!r} is {t}, not bytes (binary, or a struct of bytes and path)")
        return [column]
    found = [f.name for f in schema if _has_bytes(f.type)]
    if not found:
        raise UserError(
            f"{where}: no image or audio column (a struct of bytes and path, as Hugging Face Image/Audio "
            "features are stored): name the bytes column with --column NAME"
        )
    return found


def _name(shard: str, row: int, column: str, data: bytes, path: str | None) -> str:
    if path and format_of_name(path):
        ext = "." + path.rpartition(".")[2]
    else:
        fmt = sniff(data[:64])
        ext = FORMATS[fmt][1][0] if fmt else ".bin"
    return f"{shard}/row-{row}-{column}{ext}"


def read_shard(f: IO[bytes], shard: str, column: str | None = None) -> Iterator[Sample | Problem | ShardDone]:
    """Every media value of the Parquet shard ``f`` (named ``shard``) as a Sample, and what is wrong with it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f)
        columns = media_columns(pf.schema_arrow, column, shard)
        rows = pf.metadata.num_rows
    except ReadFailed as exc:
        yield Problem(shard, None, None, None, exc.reason, str(exc))
        yield ShardDone(shard, 0)
        return
    except (pa.ArrowException, OSError) as exc:
        yield Problem(shard, None, None, None, R.BROKEN_SHARD, f"not a readable Parquet file: {exc}")
        yield ShardDone(shard, 0)
        return
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
            for name in columns:
                col = batch.column(name)
                if pa.types.is_struct(col.type):
                    values = col.field("bytes").to_pylist()
                    i = col.type.get_field_index("path")
                    paths = col.field(i).to_pylist() if i >= 0 else [None] * len(values)
                else:
                    values, paths = col.to_pylist(), [None] * len(col)
                for k, (data, path) in enumerate(zip(values, paths)):
                    r = row + k
                    member = f"row {r}:{name}"
                    if data is None:
                        why = f"no bytes in the row (path only: {path})" if path else "no bytes in the row (null)"
                        yield Problem(shard, str(r), member, r, R.EMPTY, why)
                    elif len(data) > MAX_SAMPLE:
                        why = f"{len(data):,} bytes, more than the {MAX_SAMPLE:,} a sample is checked for"
                        yield Problem(shard, str(r), member, r, R.TOO_LARGE, why)
                    else:
                        yield Sample(shard, str(r), member, r, data, _name(shard, r, name, data, path))
            row += batch.num_rows
    except ReadFailed as exc:  # an object in a bucket: 403, 404, still failing after retries
        yield Problem(shard, str(row), None, row, exc.reason, f"at row {row}: {exc}")
    except (pa.ArrowException, OSError) as exc:
        yield Problem(shard, str(row), None, row, R.BROKEN_SHARD, f"cannot read row batch at row {row}: {exc}")
    yield ShardDone(shard, max(rows, row))
