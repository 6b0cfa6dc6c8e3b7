"""``dsclean dups s3://BUCKET/PREFIX``: the facts of a bucket prefix's objects, and its splits.

The listing is the bucket scan's (:func:`dsclean.storage.listing.iter_objects`: streamed, a page in memory);
objects are named by key relative to the prefix. The facts of an object whose key, ETag, size and
last-modified time are those of an ``ok`` row of the prefix's last scan (or of a scanned ancestor prefix's:
``scan s3://b/data`` serves ``dups s3://b/data/train``) are taken from that scan's results, found through its
state folder (:mod:`dsclean.storage.reuse`); objects the scan marked bad are left out, as local files are;
every other object is read and hashed in worker processes (:mod:`.objects`).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import locations, reasons
from ..errors import UserError
from ..scanning.verdict import encode_path
from ..splits import MAX_TOP_ENTRIES, SPLIT_NAMES, splits_among
from ..storage.fs import Store
from ..storage.listing import NoSuchBucket, Obj, iter_objects, probe, top_entries
from ..storage.manifest import ManifestStats, iter_manifest
from ..storage.reads import ReadPolicy, classify, describe, quiet_store_retries, retried
from ..storage.reuse import IDS_FILE, RECORD_FILE, identity
from ..storage.urls import normalize, scrub
from .columns import (
    BATCH,
    DEAD_ROW,
    RESULT_COLUMNS,
    Columns,
    add_facts_row,
    add_results_row,
    chunks,
    is_image,
    read_results,
    take,
    with_facts,
)
from .objects import facts_objects
from .pool import run_chunks
from .worker import KIND_CODES, Limits

CHUNK = 32  # objects per worker task (its reads go 2 x read threads ahead)


def open_store(url: str, options: dict, policy: ReadPolicy = ReadPolicy()) -> Store:
    """The prefix ``url``, checked listable with one cheap request: else a UserError naming it (no such bucket,
    access denied, a wrong endpoint), secrets scrubbed."""
    store = Store(url, dict(options))
    quiet_store_retries(store.fs, store.scheme)
    try:
        retried(lambda: probe(store), store.url, policy)
    except FileNotFoundError as exc:
        if store.scheme in ("s3", "s3a") or isinstance(exc, NoSuchBucket):
            raise UserError(f"cannot list {store.url}: no such bucket") from None
        if store.scheme == "file" and not os.path.isdir(store.root):
            raise UserError(f"{store.url}: no such folder") from None
    except Exception as exc:
        raise UserError(f"cannot list {store.url}: {scrub(classify(store.url, exc).detail, store.options)}") from None
    if store.scheme == "file" and not os.path.isdir(store.root):
        raise UserError(f"{store.url}: no such folder")
    return store


def check_distinct_urls(urls: list[str]) -> None:
    """Refuse a prefix given twice, or one inside another: its objects would be their own duplicates."""
    norm = [normalize(u) for u in urls]
    for i, a in enumerate(norm):
        for j, b in enumerate(norm):
            if i < j and a == b:
                raise UserError(f"{urls[i]} and {urls[j]} are the same prefix; give each root once")
            if i != j and a.startswith(b + "/"):
                raise UserError(f"{urls[i]} is inside {urls[j]}; give roots that do not nest (each root is one split)")


def split_prefixes(url: str, options: dict, names=SPLIT_NAMES) -> list[str]:
    """A URL split root's splits (``s3://b/data`` -> ``s3://b/data/train``, ``.../val``) as
    :func:`dsclean.splits.split_roots` finds a folder's, or ``[url]``: one delimited listing of the top
    level, a page at a time, stopped at the first other "folder" or past ``MAX_TOP_ENTRIES`` entries."""
    store = open_store(url, options)
    try:
        found = splits_among(_top_level(store), names)
    except Exception as exc:
        raise UserError(f"cannot list {store.url}: {scrub(describe(exc), store.options)}") from None
    return [store.url_of(s) for s in found] or [url]


def _top_level(store: Store) -> Iterator[tuple[str, bool]]:
    """(name, is a folder) of the prefix's top level; S3: ``list_objects_v2`` with a delimiter, paged."""
    if store.scheme not in ("s3", "s3a"):
        for n, entry in enumerate(top_entries(store, store.root)):
            if n > MAX_TOP_ENTRIES:
                return
            yield entry
        return
    from fsspec.asyn import sync

    fs = store.fs
    bucket, _, key = store.root.partition("/")
    prefix = f"{key}/" if key else ""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/", "MaxKeys": 1000}
    while True:
        page = sync(fs.loop, fs._call_s3, "list_objects_v2", **kwargs)
        for c in page.get("CommonPrefixes", ()):
            yield c["Prefix"][len(prefix) :].rstrip("/"), True
        for c in page.get("Contents", ()):
            yield c["Key"][len(prefix) :], False
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token or token == kwargs.get("ContinuationToken"):
            return  # the last page (or a server repeating its token: every loop makes progress)
        kwargs["ContinuationToken"] = token


def _ancestors(url: str) -> Iterator[str]:
    """``url``, then each prefix above it up to the bucket: ``s3://b/d/train``, ``s3://b/d``, ``s3://b``."""
    scheme, _, rest = url.partition("://")
    parts = rest.split("/")
    for n in range(len(parts), 0, -1):
        yield f"{scheme}://{'/'.join(parts[:n])}"


def _last_scan(store: Store, state_dir: str | None) -> tuple[pa.Table | None, list[str], str, str]:
    """The last scan's results of the prefix or its nearest scanned ancestor, each row with its identity
    (column ``_id``) and its key made relative to this prefix: (table, [results file], where from, the prefix
    of the rows' keys within the scanned prefix, "" or ``train/``); no table when there is none to use."""
    import json

    for url in _ancestors(store.url):
        folder = locations.url_state_dir(url, state_dir)
        try:
            with open(os.path.join(folder, RECORD_FILE), encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        results = record.get("results") if isinstance(record, dict) else None
        if isinstance(results, str) and os.path.isfile(results) and record.get("url") == url:
            break
    else:
        return None, [], f"none: no scan of {store.url} (or of a prefix above it) is recorded here", ""
    try:
        ids = np.load(os.path.join(folder, IDS_FILE), mmap_mode="r")
    except (OSError, ValueError) as exc:
        return None, [], f"not used: {results} has no object identities ({exc})", ""
    table = read_results([results])
    if table is None or table.num_rows != len(ids):
        return None, [], f"not used: {results} does not match its object identities (rows differ)", ""
    table = table.append_column("_id", pa.array(np.asarray(ids, dtype=np.uint64)))
    under = store.url[len(url) + 1 :] + "/" if url != store.url else ""
    table = locations.subtree_rows(table, encode_path(under))  # an ancestor's scan: this prefix's rows
    source = f"{results} (the last scan of {url}: objects unchanged since, same key, ETag, size and time)"
    if not with_facts(results):
        source += " (scanned with --facts none: no hashes to reuse, every object is hashed here)"
    return table, [results], source, under


def collect_bucket(
    index: int,
    given: str,
    store: Store,
    cols: Columns,
    stats: dict,
    failed: list[str],
    *,
    limits: Limits,
    workers: int,
    use_results: bool,
    state_dir: str | None,
    progress: Callable[[int], Any] | None = None,
    manifest: str | None = None,
) -> tuple[list[str], str]:
    """Add the facts of every media object under ``store`` (listed, or the keys under it that ``manifest``
    names) to ``cols`` (root ``index``); returns (the results files read, where they came from). Objects that
    cannot be read go to ``failed``, named ``given/key``."""
    table, paths, source, ident_prefix = (
        _last_scan(store, state_dir) if use_results else (None, [], "not used (--no-results)", "")
    )
    todo = _from_results(index, store, table, cols, stats, ident_prefix, manifest)
    for objs, rows in run_chunks(facts_objects, store, chunks(todo, CHUNK), limits, workers, lambda obj: DEAD_ROW):
        for obj, row in zip(objs, rows):
            error = add_facts_row(cols, stats, index, encode_path(obj.rel), row, None, obj.etag)
            if error is not None:
                failed.append(f"{given.rstrip('/')}/{obj.rel}: {error}")
                continue
            if progress:
                progress(1)
    return paths, source


def _from_results(
    index: int,
    store: Store,
    table: pa.Table | None,
    cols: Columns,
    stats: dict,
    ident_prefix: str,
    manifest: str | None = None,
) -> Iterator[Obj]:
    """Add the objects whose facts the results hold (unchanged since); yield the objects that need reading."""
    try:
        listing = iter_manifest(manifest, store, stats=ManifestStats()) if manifest else iter_objects(store)
        while True:
            batch = list(take(listing, BATCH))
            if not batch:
                return
            if table is None:
                yield from batch
            else:
                yield from _match_batch(index, batch, table, cols, stats, ident_prefix)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"listing {store.url} failed: {scrub(describe(exc), store.options)}") from None


def _match_batch(
    index: int, batch: list[Obj], table: pa.Table, cols: Columns, stats: dict, ident_prefix: str
) -> Iterator[Obj]:
    """One listing batch: rows of the results aligned by one hash lookup, then each object's identity compared."""
    encoded = [encode_path(o.rel) for o in batch]
    where = pc.index_in(pa.array(encoded, pa.binary()), value_set=table.column("path").combine_chunks())
    found = where.is_valid().to_pylist()
    rows = table.take(pc.fill_null(where, 0))
    none = [None] * len(batch)
    py = {n: rows.column(n).to_pylist() if n in rows.column_names else none for n in (*RESULT_COLUMNS, "_id")}
    for i, (obj, raw) in enumerate(zip(batch, encoded)):
        if not found[i]:
            yield obj
            continue
        if py["status"][i] == reasons.BAD:
            stats["bad"] += 1
            continue
        ident = identity(obj._replace(rel=ident_prefix + obj.rel))
        image = is_image(obj.rel)
        kind = KIND_CODES["image" if image else "audio"]
        if not (ident != 0 and py["_id"][i] == ident) or not add_results_row(
            cols, index, raw, obj.size, obj.mtime_ns, kind, py, i, image, None, obj.etag
        ):
            yield obj
            continue
        stats["from_results"] += 1
