"""The objects under a prefix, streamed: one listing page in memory at a time, never a list of all keys.

S3 (s3fs): ``list_objects_v2`` pages of up to 1,000 keys, no delimiter (a flat listing: no request
per "folder"), each page retried by s3fs like any request; fsspec's ``find`` would collect every key
into one dict first (300M keys: tens of GB). Other filesystems (``file://``, ``gs://``, ``az://``):
``fs.walk``, one folder's listing at a time. Objects are yielded as :class:`Obj` tuples; only media
names (by extension, as the local discovery) are yielded, the rest are counted.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple

from ..errors import UserError
from ..formats import format_of_name
from ..scanning.quarantine.journal import safe_rel
from .fs import Store

PAGE_KEYS = 1000  # S3's page size (and its maximum)
MAX_EMPTY_PAGES = 1000  # truncated pages in a row without a key: past this the listing makes no progress
MAX_KEY = 1024  # S3's longest key (bytes, UTF-8): a longer "key" is not one
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Obj(NamedTuple):
    """One object: its key relative to the prefix, and what the store says of it (None: not known)."""

    rel: str
    size: int | None = None
    etag: str | None = None
    mtime_ns: int | None = None


@dataclass
class ListingStats:
    """What the listing saw besides the media objects it yielded."""

    objects: int = 0  # every object listed
    skipped_other: int = 0  # not a media name (by extension)
    skipped_hidden: int = 0  # a dot-named key component
    unsafe: int = 0  # keys that are no safe path below the prefix (safe_key): never read, never joined
    unsafe_examples: list[str] = field(default_factory=list)  # the first few, as ascii() reprs
    pages: int = 0


def mtime_ns(value: Any) -> int | None:
    """A listing's LastModified / mtime as integer nanoseconds (None if absent)."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return int(value.timestamp()) * 1_000_000_000 + value.microsecond * 1000
    if isinstance(value, (int, float)):
        return int(value * 1e9)
    return None


def clean_etag(value: Any) -> str | None:
    return value.strip('"') if isinstance(value, str) and value else None


def key_bytes(key: str) -> int:
    """A key's length in bytes as the store counts them (UTF-8; undecodable bytes kept as one each)."""
    return len(key) if key.isascii() else len(key.encode("utf-8", "surrogateescape"))


def safe_key(rel: str) -> bool:
    """Whether ``rel`` (a key relative to the prefix, from a listing or a manifest: untrusted) names an
    object below the prefix as a path would: the journal's rule (:func:`safe_rel`: not empty, not absolute,
    no NUL, no empty, ``.`` or ``..`` part), no control character, at most :data:`MAX_KEY` bytes."""
    try:
        size = key_bytes(rel)
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        return False
    return safe_rel(rel) is not None and size <= MAX_KEY and _CONTROL.search(rel) is None


def _unsafe(stats: ListingStats, example: str) -> None:
    stats.unsafe += 1
    if len(stats.unsafe_examples) < 5:
        stats.unsafe_examples.append(example)


def wanted(rel: str, include_hidden: bool, stats: ListingStats) -> bool:
    """Count ``rel`` and say whether it is a media object to check (a "folder" marker, ``dir/``, is not;
    an unsafe key is counted apart and never read)."""
    stats.objects += 1
    if not rel or rel.endswith("/"):  # a folder marker object (or the prefix's own)
        stats.skipped_other += 1
        return False
    if not safe_key(rel):
        _unsafe(stats, ascii(rel[:200]))
        return False
    if not include_hidden and any(part.startswith(".") for part in rel.split("/")):
        stats.skipped_hidden += 1
        return False
    if format_of_name(rel) is None:
        stats.skipped_other += 1
        return False
    return True


def iter_objects(
    store: Store, *, include_hidden: bool = False, stats: ListingStats | None = None, exclude: tuple[str, ...] = ()
) -> Iterator[Obj]:
    """Every media object under ``store``'s prefix, streamed; ``exclude``: relative prefixes not to enter
    (a quarantine prefix inside the scanned one)."""
    stats = stats if stats is not None else ListingStats()
    source = _s3_pages(store, stats) if store.scheme in ("s3", "s3a") else _walk(store, stats)
    for obj in source:
        if any(obj.rel == e or obj.rel.startswith(e + "/") for e in exclude):
            continue  # our own quarantine
        if wanted(obj.rel, include_hidden, stats):
            yield obj


def iter_listed(store: Store, stats: ListingStats | None = None) -> Iterator[Obj]:
    """Every object under ``store``'s prefix, streamed, whatever its name (a shard set's tars, its index.json)."""
    stats = stats if stats is not None else ListingStats()
    yield from _s3_pages(store, stats) if store.scheme in ("s3", "s3a") else _walk(store, stats)


class NoSuchBucket(FileNotFoundError):
    """The bucket of a prefix does not exist (a prefix merely without objects raises FileNotFoundError)."""


def probe(store: Store) -> None:
    """One cheap request that fails as listing would (no such bucket, access denied, a wrong endpoint):
    S3, one key of one page (``ls`` of a flat prefix would page through every key); else ``info``, and when
    that finds nothing, whether the bucket exists (GCS and Azure answer a missing bucket's path and an empty
    prefix alike: a misspelt bucket must not scan as 0 objects)."""
    if store.scheme in ("s3", "s3a"):
        from fsspec.asyn import sync

        bucket, _, key = store.root.partition("/")
        fs = store.fs
        sync(fs.loop, fs._call_s3, "list_objects_v2", Bucket=bucket, Prefix=f"{key}/" if key else "", MaxKeys=1)
    elif store.scheme != "file":
        try:
            store.fs.info(store.root)
        except FileNotFoundError:
            bucket = store.root.split("/", 1)[0]
            if not store.fs.exists(bucket):
                raise NoSuchBucket(bucket) from None
            raise


def _s3_pages(store: Store, stats: ListingStats) -> Iterator[Obj]:
    from fsspec.asyn import sync

    fs = store.fs
    bucket, _, key = store.root.partition("/")
    prefix = f"{key}/" if key else ""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": PAGE_KEYS}
    last, empty = "", 0  # the listing is in key order: each page goes on past the last key (progress)
    while True:
        page = sync(fs.loop, fs._call_s3, "list_objects_v2", **kwargs)
        stats.pages += 1
        contents = page.get("Contents") or ()
        empty = 0 if contents else empty + 1
        if empty > MAX_EMPTY_PAGES:
            raise UserError(
                f"listing {store.url}: {empty:,} pages in a row without a key: the listing makes no progress"
            )
        for c in contents:
            key = c.get("Key") if isinstance(c, dict) else None
            if not isinstance(key, str) or not key.startswith(prefix):  # not below the prefix asked for
                stats.objects += 1
                _unsafe(stats, ascii(key)[:200])
                continue
            if key <= last:
                raise UserError(
                    f"listing {store.url} went back ({key[:200]!a} after {last[:200]!a}): the server's listing is "
                    "not in key order, and would not end; give the keys with --manifest"
                )
            last = key
            yield Obj(key[len(prefix) :], c.get("Size"), clean_etag(c.get("ETag")), mtime_ns(c.get("LastModified")))
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token or token == kwargs.get("ContinuationToken"):
            return  # the last page (or a server repeating its token: every loop makes progress)
        kwargs["ContinuationToken"] = token


def _walk(store: Store, stats: ListingStats) -> Iterator[Obj]:
    fs, root = store.fs, store.root
    cut = len(root) + 1
    for dirpath, _dirs, files in fs.walk(root, detail=True):
        stats.pages += 1
        for name, info in sorted(files.items()):
            full = info.get("name") or f"{dirpath}/{name}"
            full = fs._strip_protocol(full)
            if info.get("type") not in (None, "file"):
                continue  # a symlink to a folder, a device: not an object
            yield Obj(
                full[cut:],
                info.get("size"),
                clean_etag(info.get("ETag") or info.get("etag")),
                mtime_ns(info.get("LastModified") or info.get("mtime") or info.get("last_modified")),
            )


def top_entries(store: Store, path: str) -> Iterator[tuple[str, bool]]:
    """``(name, is a folder)`` of the entries directly under ``path`` (a filesystem path of ``store``), for
    the filesystems other than S3 (S3 callers page ``list_objects_v2`` with a delimiter themselves). The listing
    is requested here (its errors raised inside a caller's retry); the entries are iterated.

    ``file://``: ``os.scandir``, streamed (a caller stopping early reads no further). ``gs://``, ``az://``:
    fsspec's ``ls``, which returns the level's whole listing at once (names and sizes: one dict an entry)."""
    if store.scheme == "file":
        import os

        return _scandir(os.scandir(path))
    listing = store.fs.ls(path, detail=True)
    return (
        (str(info.get("name", "")).rstrip("/").rsplit("/", 1)[-1], info.get("type") == "directory") for info in listing
    )


def _scandir(it: Any) -> Iterator[tuple[str, bool]]:
    with it:
        for entry in it:
            yield entry.name, entry.is_dir()
