"""``--manifest FILE``: the keys to check, instead of listing the bucket (e.g. an S3 Inventory report).

A text file (one key a line), a CSV with a header naming a ``key`` column (``size``, ``etag``,
``last_modified`` columns used when present), or a Parquet file with a ``key`` column (S3 Inventory's
Parquet). Read streaming: a line, a CSV row or a Parquet batch at a time. A key is a key of the bucket
(as S3 Inventory writes them, ``prefix/...``) or a full URL (for ``file://``: a path relative to the
root, or an absolute one under it); keys outside the scanned prefix are counted,
not checked (the summary says how many).
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
from .listing import ListingStats, Obj, clean_etag, mtime_ns, wanted

BATCH_ROWS = 65_536
MAX_KEY = 1024  # S3's longest key (bytes): a longer "key" is not one


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
        if not raw or len(raw) > MAX_KEY:
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
        if rel and not rel.endswith("/") and wanted(rel, include_hidden, stats):
            yield Obj(rel, size, etag, mtime)


def _open(path: str):
    try:
        return open_regular_file(path)
    except OSError as exc:
        raise UserError(f"manifest {path}: cannot read it: {exc.strerror or exc}") from None


def _text_rows(path: str) -> Iterator[tuple]:
    """Lines read at most :data:`MAX_KEY` + 2 characters at a time: a line past that (no key is) is
    skipped to its end and yielded empty (counted as a bad row), never held whole."""
    with _open(path) as f, io.TextIOWrapper(f, encoding="utf-8", errors="surrogateescape") as text:
        while line := text.readline(MAX_KEY + 2):
            if not line.endswith("\n") and len(line) == MAX_KEY + 2:
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
            reader = csv.reader(text)
            header = [h.strip().lower() for h in next(reader, [])]
            if "key" not in header:
                raise UserError(f"manifest {path}: a CSV manifest needs a header row with a 'key' column")
            k = header.index("key")
            s, e, m = (header.index(c) if c in header else None for c in ("size", "etag", "last_modified"))
            for row in _csv_checked(reader, path):
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


def _csv_checked(reader, path: str) -> Iterator[list[str]]:
    """The CSV rows; a malformed one (a field over the csv module's limit, a NUL) is an error naming the line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise UserError(f"manifest {path}: line {reader.line_num}: {exc}") from None
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
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=cols):
        data = batch.to_pydict()
        keys = data[names["key"]]
        sizes = data.get(names.get("size", ""), [None] * len(keys))
        etags = data.get(names.get("etag", ""), [None] * len(keys))
        mcol = names.get("last_modified_date") or names.get("last_modified")
        mtimes = data.get(mcol or "", [None] * len(keys))
        for key, size, etag, mtime in zip(keys, sizes, etags, mtimes):
            yield key if isinstance(key, str) else "", _int(size), clean_etag(etag), mtime_ns(mtime)
