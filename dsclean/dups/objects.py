"""What dups' worker processes do for a bucket prefix: facts, thumbnails or anti-aliased hashes of a chunk of
objects, read through the worker's bounded pool of reader threads.

The reads are the bucket scan's (:func:`dsclean.storage.workers.fetch`: retried with backoff on throttling
and 5xx, 403/404 named, an object past the in-memory threshold through a temp file removed after use); the
facts are local dups' (:func:`dsclean.quality.files.facts_from_bytes`: the same hash, the same decode), under
the same per-object time limit and memory ceiling as a local file (:mod:`.worker`). A chunk is a list of
:class:`~dsclean.storage.listing.Obj` (key relative to the prefix, size, ETag, time as listed).
"""

from __future__ import annotations

import io
import os
from typing import Callable, TypeVar

import numpy as np

from ..quality.files import facts_from_bytes
from ..quality.image import thumbnail_from_path
from ..quality.texture import antialiased_hashes_from_path
from ..scanning.worker import time_limit
from ..storage.fs import Store
from ..storage.listing import Obj
from ..storage.workers import read_ahead
from .worker import Limits, Row, enter, facts_row, failed_row, fault, file_row

T = TypeVar("T")


def facts_objects(store: Store, objs: list[Obj], limits: Limits) -> list[Row]:
    """:func:`dsclean.dups.worker.facts_chunk` for objects: each one's row; a read that failed gives a row
    without facts whose error names the key and why (403, 404, still throttled after the retries)."""
    enter(limits)
    out = []
    for got in read_ahead(store, objs, limits.read_policy, limits.read_threads):
        if got.error is not None:
            out.append(failed_row(got.error.detail))
            continue
        obj = got.obj
        with time_limit(limits.timeout):
            fault(obj.rel)
            if got.temp is not None:
                try:
                    row = facts_row(got.temp, limits.flag_options)
                finally:
                    os.unlink(got.temp)
                if row[0] is not None:  # the object's size and time as listed, not the temp file's
                    row = (obj.size if obj.size is not None else row[0], obj.mtime_ns, *row[2:])
            else:
                assert got.data is not None
                ff = facts_from_bytes(got.data, limits.flag_options, mtime_ns=obj.mtime_ns)
                row = file_row(ff)
        out.append(row)
    return out


def _each_object(store: Store, objs: list[Obj], limits: Limits, decode: Callable[..., T]) -> list[T | None]:
    """``decode`` of each object (from memory, or its temp file) under the limits; None if it cannot be read
    or decoded now (changed since, gone, refused)."""
    enter(limits)
    out: list[T | None] = []
    for got in read_ahead(store, objs, limits.read_policy, limits.read_threads):
        if got.error is not None:
            out.append(None)
            continue
        with time_limit(limits.timeout):
            fault(got.obj.rel)
            try:
                out.append(decode(got.temp if got.temp is not None else io.BytesIO(got.data or b"")))
            except (Exception, MemoryError):  # undecodable now: the pair is not confirmed / no second signal
                out.append(None)
            finally:
                if got.temp is not None:
                    os.unlink(got.temp)
    return out


def thumbs_objects(store: Store, objs: list[Obj], limits: Limits) -> list[np.ndarray | None]:
    """The canonical 64x64 grey thumbnail of each object (the fine check's input), None if not decodable."""
    return _each_object(store, objs, limits, thumbnail_from_path)


def second_hashes_objects(store: Store, objs: list[Obj], limits: Limits) -> list[list[int] | None]:
    """The anti-aliased hashes of each object (:mod:`dsclean.quality.texture`), None if not decodable."""
    return _each_object(store, objs, limits, antialiased_hashes_from_path)
