"""``--manifest FILE``: the keys to check, instead of listing the bucket (e.g. an S3 Inventory report).

A text file (one key a line), a CSV with a header naming a ``key`` column (``size``, ``etag``,
``last_modified`` columns used when present), or a Parquet file with a ``key`` column (S3 Inventory's
Parquet). Read streaming: a line, a CSV row or a Parquet batch at a time. A key is a key of the bucket
(as S3 Inventory writes them, ``prefix/...``) or a full URL (for ``file://``: a path relative to the
root, or an absolute one under it); keys outside the scanned prefix are counted,
not checked (the summary says how many).

A manifest is untrusted input: every key goes through :func:`~.listing.safe_key` (as listed keys do:
an unsafe one is counted, never joined into a path), and nothing in it sizes memory unchecked: text lines
are read :data:`MAX_LINE` characters at a time, a CSV row is bounded by :data:`MAX_CSV_ROW`, a Parquet row
group by its metadata (:data:`MAX_ROW_GROUP_BYTES`) before it is read.
"""

from __future__ import annotations

import csv
import io
import urllib.parse
from dataclasses import dataclass
from typing import Iterator

from ..errors import UserError
from ..openfile import open_regular_file
from .fs import Store
from .listing import MAX_KEY, ListingStats, Obj, clean_etag, key_bytes, mtime_ns, wanted

BATCH_ROWS = 65_536
MAX_LINE = 2 * MAX_KEY  # a text manifest's line: a key, or a full URL of one (scheme and bucket added)
MAX_CSV_ROW = 1 << 20  # characters of one CSV row (its lines): an S3 Inventory row is a few KB
MAX_ROW_GROUP_BYTES = 256 << 20  # a Parquet row group's key columns, uncompressed (its metadata): read whole


@dataclass
class ManifestStats(ListingStats):
    outside: int = 0  # keys not under the scanned prefix
    bad_rows: int = 0  # empty or over-long keys


def manifest_kind(path: str) -> str:
    low = path.lower()
    if low.endswith(".parquet"):
        return "parquet"
    if low.endswith((".csv", ".csv.gz")):
        return "csv"
    return "text"


def iter_manifest(path: str, store: Store, *, include_hidden: bool = False, stats: ManifestStats) -> Iterator[Obj]:
    """The media objects a manifest names under ``store``'s prefix, as :class:`Obj` (size etc. if given)."""
    kind = manifest_kind(path)
    rows = _parquet_rows(path) if kind == "parquet" else _csv_rows(path) if kind == "csv" else _text_rows(path)
    if store.scheme == "file":  # local paths: absolute under the root, or relative to it
        prefix = store.root + "/"
    else:
        key = store.root.partition("/")[2]
        prefix = f"{key}/" if key else ""
    url_prefix = store.url + "/"
    for raw, size, etag, mtime in rows:
        if not raw or len(raw) > MAX_LINE or _too_long(raw):
            stats.bad_rows += 1
            continue
        if raw.startswith(url_prefix):
            rel = raw[len(url_prefix) :]
        elif "://" in raw:
            stats.outside += 1
            continue
        elif raw.startswith(prefix):
            rel = raw[len(prefix) :]
        elif store.scheme == "file" and not raw.startswith("/"):
            rel = raw
        else:
            stats.outside += 1
            continue
        if wanted(rel, include_hidden, stats):  # an unsafe key ('..', control characters) counted, never joined
            yield Obj(rel, size, etag, mtime)


def _too_long(raw: str) -> bool:
    try:
        return key_bytes(raw) > MAX_LINE
    except UnicodeEncodeError:
        return True


def _open(path: str):
    try:
        return open_regular_file(path)
    except OSError as exc:
        raise UserError(f"manifest {path}: cannot read it: {exc.strerror or exc}") from None


def _text_rows(path: str) -> Iterator[tuple]:
    """Lines read at most :data:`MAX_LINE` + 2 characters at a time: a line past that (no key is) is
    skipped to its end and yielded empty (counted as a bad row), never held whole."""
    with _open(path) as f, io.TextIOWrapper(f, encoding="utf-8", errors="surrogateescape") as text:
        while line := text.readline(MAX_LINE + 2):
            if not line.endswith("\n") and len(line) == MAX_LINE + 2:
                while (rest := text.readline(1 << 16)) and not rest.endswith("\n"):
                    pass
                yield "", None, None, None
                continue
            yield line.rstrip("\r\n"), None, None, None


def _int(value: object) -> int | None:
    try:
        return int(value) if value not in (None, "") else None  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _csv_rows(path: str) -> Iterator[tuple]:
    with _open(path) as f:
        stream = f
        if path.lower().endswith(".gz"):
            import gzip

            stream = gzip.open(f)
        with io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape", newline="") as text:
            budget = [0]  # characters of the row being read: bounded, the csv module's row is not
            reader = csv.reader(_bounded_lines(text, path, budget))
            header = [h.strip().lower() for h in next(reader, [])]
            if "key" not in header:
                raise UserError(f"manifest {path}: a CSV manifest needs a header row with a 'key' column")
            k = header.index("key")
            s, e, m = (header.index(c) if c in header else None for c in ("size", "etag", "last_modified"))
            for row in _csv_checked(reader, path, budget):
                if len(row) <= k:
                    yield "", None, None, None
                    continue
                key = row[k]
                if "%" in key:
                    key = urllib.parse.unquote(key)  # S3 Inventory URL-encodes keys
                yield (
                    key,
                    _int(row[s]) if s is not None and s < len(row) else None,
                    clean_etag(row[e]) if e is not None and e < len(row) else None,
                    None if m is None or m >= len(row) else _iso_ns(row[m]),
                )


def _bounded_lines(text: io.TextIOWrapper, path: str, budget: list[int]) -> Iterator[str]:
    """The lines of a CSV manifest for the csv module, each read at most :data:`MAX_CSV_ROW` characters at
    a time; a row (its lines: quoted fields may hold newlines) past that is an error naming the file."""
    line_no = 0
    while line := text.readline(MAX_CSV_ROW + 1):
        line_no += 1
        budget[0] += len(line)
        if budget[0] > MAX_CSV_ROW:
            raise UserError(
                f"manifest {path}: line {line_no}: a CSV row longer than {MAX_CSV_ROW:,} characters "
                "(an S3 Inventory row is a few hundred): not a manifest of keys"
            )
        yield line


def _csv_checked(reader, path: str, budget: list[int]) -> Iterator[list[str]]:
    """The CSV rows; a malformed one (a field over the csv module's limit, a NUL) is an error naming the line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise UserError(f"manifest {path}: line {reader.line_num}: {exc}") from None
        budget[0] = 0
        yield row


def _iso_ns(text: str) -> int | None:
    import datetime

    try:
        return mtime_ns(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        return None


def _parquet_rows(path: str) -> Iterator[tuple]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(_open(path))
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for a file that is not Parquet
        raise UserError(f"manifest {path}: not a Parquet file ({exc})") from None
    names = {n.lower(): n for n in pf.schema_arrow.names}
    if "key" not in names:
        raise UserError(f"manifest {path}: a Parquet manifest needs a 'key' column (has {', '.join(names)})")
    cols = [names[c] for c in ("key", "size", "etag", "last_modified_date", "last_modified") if c in names]
    _check_row_groups(pf, cols, path)
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=cols):
        data = batch.to_pydict()
        keys = data[names["key"]]
        sizes = data.get(names.get("size", ""), [None] * len(keys))
        etags = data.get(names.get("etag", ""), [None] * len(keys))
        mcol = names.get("last_modified_date") or names.get("last_modified")
        mtimes = data.get(mcol or "", [None] * len(keys))
        for key, size, etag, mtime in zip(keys, sizes, etags, mtimes):
            yield key if isinstance(key, str) else "", _int(size), clean_etag(etag), mtime_ns(mtime)


def _check_row_groups(pf, cols: list[str], path: str) -> None:
    """Every row group's columns we read, by the file's own metadata, under :data:`MAX_ROW_GROUP_BYTES`
    uncompressed (pyarrow reads a row group's column chunks whole): else an error naming the file, before
    anything is read. A metadata size that is no count (negative) is refused the same way."""
    meta = pf.metadata
    wanted_cols = set(cols)
    index = [i for i in range(meta.num_columns) if meta.schema.column(i).path.split(".")[0] in wanted_cols]
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        sizes = [group.column(i).total_uncompressed_size for i in index]
        total = sum(sizes)
        if total > MAX_ROW_GROUP_BYTES or any(n < 0 for n in sizes):
            raise UserError(
                f"manifest {path}: row group {g} holds {total / 2**20:,.0f} MB of key columns uncompressed "
                f"(over {MAX_ROW_GROUP_BYTES >> 20} MB, read whole): write it with smaller row groups "
                "(pyarrow.parquet.write_table(..., row_group_size=1_000_000))"
            )
