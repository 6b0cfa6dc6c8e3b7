"""The objects under a prefix, streamed: one listing page in memory at a time, never a list of all keys.

S3 (s3fs): ``list_objects_v2`` pages of up to 1,000 keys, no delimiter (a flat listing: no request
per "folder"), each page retried by s3fs like any request; fsspec's ``find`` would collect every key
into one dict first (300M keys: tens of GB). Other filesystems (``file://``, ``gs://``, ``az://``):
``fs.walk``, one folder's listing at a time. Objects are yielded as :class:`Obj` tuples; only media
names (by extension, as the local discovery) are yielded, the rest are counted.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

from ..formats import format_of_name
from .fs import Store

PAGE_KEYS = 1000  # S3's page size (and its maximum)


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


def wanted(rel: str, include_hidden: bool, stats: ListingStats) -> bool:
    """Count ``rel`` and say whether it is a media object to check."""
    stats.objects += 1
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
        if obj.rel.endswith("/") or any(obj.rel == e or obj.rel.startswith(e + "/") for e in exclude):
            continue  # a "folder" marker object, or our own quarantine
        if wanted(obj.rel, include_hidden, stats):
            yield obj


def iter_listed(store: Store, stats: ListingStats | None = None) -> Iterator[Obj]:
    """Every object under ``store``'s prefix, streamed, whatever its name (a shard set's tars, its index.json)."""
    stats = stats if stats is not None else ListingStats()
    yield from _s3_pages(store, stats) if store.scheme in ("s3", "s3a") else _walk(store, stats)


def probe(store: Store) -> None:
    """One cheap request that fails as listing would (no such bucket, access denied, a wrong endpoint):
    S3, one key of one page (``ls`` of a flat prefix would page through every key); else ``info``."""
    if store.scheme in ("s3", "s3a"):
        from fsspec.asyn import sync

        bucket, _, key = store.root.partition("/")
        fs = store.fs
        sync(fs.loop, fs._call_s3, "list_objects_v2", Bucket=bucket, Prefix=f"{key}/" if key else "", MaxKeys=1)
    elif store.scheme != "file":
        store.fs.info(store.root)


def _s3_pages(store: Store, stats: ListingStats) -> Iterator[Obj]:
    from fsspec.asyn import sync

    fs = store.fs
    bucket, _, key = store.root.partition("/")
    prefix = f"{key}/" if key else ""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": PAGE_KEYS}
    while True:
        page = sync(fs.loop, fs._call_s3, "list_objects_v2", **kwargs)
        stats.pages += 1
        for c in page.get("Contents", ()):
            yield Obj(
                c["Key"][len(prefix) :], c.get("Size"), clean_etag(c.get("ETag")), mtime_ns(c.get("LastModified"))
            )
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
