"""Shard sets in object storage (``s3://B/shards/``): found by a streamed listing, read from the store.

A prefix is a shard set on the same rule as a local folder (:mod:`.detect`): an MDS or litdata
``index.json`` at its top, or ``.tar``/``.tar.gz``/``.tgz`` or ``.parquet`` objects and no media objects or
"subfolders" beside them. Shards are read where they are: a tar or Parquet shard through an fsspec file
object whose every read is retried with backoff (:func:`dsclean.storage.reads.retried`; 403 and 404 named
by :func:`~dsclean.storage.reads.classify`), no local copy; an MDS or litdata shard (their readers want a
local file) through a temp file of its own, removed after (:func:`staged`). Names are keys relative to
the prefix. Nothing here writes to the bucket.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
import tempfile
from typing import IO, Iterator

from .. import reasons as R
from ..errors import UserError
from ..storage.fs import Store
from ..storage.reads import ReadPolicy, classify, retried
from .events import ReadFailed

#: listing entries looked at to recognise a shard prefix (as MAX_ENTRIES for a folder)
MAX_OBJECTS = 1_000_000
#: the most bytes of an index.json read
MAX_INDEX_JSON = 256 << 20
_COPY_PIECE = 8 << 20


class RetriedReader(io.RawIOBase):
    """An object read as a stream: each read of the fsspec file retried (at the same position) on throttling
    and server errors; a read that still fails raises :class:`~.events.ReadFailed` naming the key and why."""

    def __init__(self, store: Store, name: str, policy: ReadPolicy = ReadPolicy()) -> None:
        super().__init__()
        self.name_ = name
        self.policy = policy
        self._pos = 0
        try:
            self._f = retried(lambda: store.fs.open(store.path(name), "rb"), name, policy)
        except Exception as exc:
            raise ReadFailed(classify(name, exc).reason, classify(name, exc).detail) from None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END:
            self._pos = max(0, self.size() + offset)
        elif whence == io.SEEK_CUR:
            self._pos = max(0, self._pos + offset)
        else:
            self._pos = max(0, offset)
        return self._pos

    def size(self) -> int:
        return int(self._f.size)

    def read(self, n: int = -1) -> bytes:
        at = self._pos

        def once() -> bytes:
            self._f.seek(at)
            return self._f.read(n)

        try:
            data = retried(once, self.name_, self.policy)
        except Exception as exc:
            err = classify(self.name_, exc)
            raise ReadFailed(err.reason, f"reading at byte {at:,}: {err.detail}") from None
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a read-only object file: nothing to lose
            self._f.close()
        super().close()


def open_object(store: Store, name: str) -> IO[bytes]:
    """The object ``name`` under ``store``'s prefix as a retried read stream (:class:`RetriedReader`)."""
    return RetriedReader(store, name)  # type: ignore[return-value]


@contextlib.contextmanager
def staged(store: Store, name: str) -> Iterator[str | None]:
    """A temp copy of the object ``name`` (in a temp folder of its own, under its own base name), removed
    after; None when the object is not there (404). Other failures raise :class:`~.events.ReadFailed`."""
    folder = tempfile.mkdtemp(prefix="dsclean-shard-")
    try:
        path = os.path.join(folder, os.path.basename(name))
        try:
            src = open_object(store, name)
        except ReadFailed as exc:
            if exc.reason == R.VANISHED:  # 404
                yield None
                return
            raise
        with src, open(path, "wb") as dst:
            while piece := src.read(_COPY_PIECE):
                dst.write(piece)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def read_index(store: Store, name: str = "index.json") -> dict:
    """An MDS or litdata ``index.json`` in the bucket, bounded (a UserError naming its URL when it is not one)."""
    try:
        with open_object(store, name) as f:
            raw = f.read(MAX_INDEX_JSON + 1)
    except ReadFailed as exc:
        raise UserError(f"{store.url_of(name)}: cannot read the index: {exc}") from None
    if len(raw) > MAX_INDEX_JSON:
        raise UserError(f"{store.url_of(name)}: more than {MAX_INDEX_JSON:,} bytes: not a shard index")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{store.url_of(name)}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise UserError(f"{store.url_of(name)}: not a JSON object: not a shard index")
    return doc


def exists(store: Store, name: str) -> bool:
    try:
        return bool(retried(lambda: store.fs.exists(store.path(name)), name, ReadPolicy()))
    except Exception as exc:
        raise UserError(f"{store.url_of(name)}: {classify(name, exc).detail}") from None


def listed(store: Store) -> Iterator[str]:
    from ..storage.listing import ListingStats, iter_listed

    try:
        for obj in itertools.islice(iter_listed(store, ListingStats()), MAX_OBJECTS):
            if not obj.rel.endswith("/") and not any(p.startswith(".") for p in obj.rel.split("/")):
                yield obj.rel
    except Exception as exc:
        raise UserError(f"{store.url}: cannot list the prefix: {classify(store.url, exc).detail}") from None
