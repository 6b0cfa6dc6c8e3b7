"""A shard's sources read from a bucket: a batch of objects fetched on the worker's bounded read pool.

The counterpart of :func:`.source.read_batch` for an index whose root is a storage URL
(:mod:`.bucketsource`): each object read whole (retried on throttling and 5xx, 403/404 named,
:mod:`dsclean.storage.reads`), or past the inline limit into a temp file that is unlinked at once and
streamed into the shard from its descriptor. Each is checked against the index: the bytes read are the
size the listing gave. A failed object is a :class:`.source.SourceProblem` naming its URL.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..hashing import content_hash, new_hasher
from ..storage.fs import Store
from ..storage.reads import DEFAULT_READ_THREADS, ObjectError, ReadPolicy, classify, quiet_store_retries, retried
from .samples import media_ext
from .source import BatchRows, Source, SourceProblem, read_blocks

_STORES: dict[str, Store] = {}  # per process: the store of each root URL (its filesystem opened once)
_POOL: ThreadPoolExecutor | None = None
_TMPDIR: str | None = None


@dataclass(frozen=True)
class Fetched:
    rel: str
    size: int
    mtime_ns: int
    data: bytes | None = None
    temp: str | None = None  # past the inline limit: a temp file of the object
    error: ObjectError | None = None


def fetch(store: Store, rel: str, size: int, mtime_ns: int, policy: ReadPolicy) -> Fetched:
    """One object's bytes (a temp file past ``policy.max_in_memory``), or why not (403/404 named)."""
    fs, path = store.fs, store.path(rel)
    try:
        if size > policy.max_in_memory:
            fd, temp = tempfile.mkstemp(dir=_tmpdir(), suffix=".part")
            os.close(fd)
            try:
                retried(lambda: fs.get_file(path, temp), rel, policy)
            except BaseException:
                os.unlink(temp)
                raise
            return Fetched(rel, size, mtime_ns, temp=temp)
        extra = {"max_concurrency": 1} if store.scheme in ("s3", "s3a") else {}  # one GET, no HEAD first
        if size == 0 and not int(retried(lambda: fs.info(path), rel, policy).get("size") or 0):
            return Fetched(rel, size, mtime_ns, data=b"")  # (a range of an empty object is refused)
        # at most the indexed size + 1 byte: an object grown since indexing is "changed", never read whole
        data = retried(lambda: fs.cat_file(path, start=0, end=size + 1, **extra), rel, policy)
        return Fetched(rel, size, mtime_ns, data=data)
    except Exception as exc:
        return Fetched(rel, size, mtime_ns, error=classify(rel, exc))


def _tmpdir() -> str:
    """This process's folder for objects past the inline limit (each unlinked once open; the folder at exit)."""
    global _TMPDIR
    if _TMPDIR is None or not os.path.isdir(_TMPDIR):
        _TMPDIR = tempfile.mkdtemp(prefix="dsclean-pack-objects-")
        atexit.register(_rmdir, _TMPDIR)
    return _TMPDIR


def _rmdir(path: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _store(root: str, options: dict) -> Store:
    store = _STORES.get(root)
    if store is None or store.options != options:
        store = _STORES[root] = Store(root, options)
        quiet_store_retries(store.fs, store.scheme)
    return store


def read_batch_objects(root: str, options: dict, rows: BatchRows, inline_limit: int) -> list:
    """The batch's sources, in order; a :class:`SourceProblem` in place of an object that failed."""
    global _POOL
    store = _store(root, options)
    policy = ReadPolicy(max_in_memory=inline_limit)
    if _POOL is None:
        _POOL = ThreadPoolExecutor(DEFAULT_READ_THREADS, thread_name_prefix="dsclean-pack-read")
    objs = [(os.fsdecode(rel), int(size), int(mtime)) for rel, size, mtime in zip(rows.path, rows.size, rows.mtime_ns)]
    got = list(_POOL.map(lambda o: fetch(store, *o, policy), objs))  # bounded: the pool's threads
    return [_source(store, g, known) for g, known in zip(got, rows.known)]


def _source(store: Store, got: Fetched, known: bytes | None) -> Source | SourceProblem:
    where = store.url_of(got.rel)
    size = got.size
    if got.error is not None:
        return SourceProblem(f"{where}: {got.error.detail}")
    if got.data is not None:
        if len(got.data) != size:
            now = f"more than {size}" if len(got.data) > size else str(len(got.data))
            return SourceProblem(f"{where}: changed since it was indexed ({size} -> {now} bytes)")
        checksum = known if known is not None else content_hash(got.data)
        return Source(
            got.data,
            None,
            size,
            checksum,
            media_ext(got.rel, got.data[:16]),
            where.encode(),
            got.mtime_ns,
            known is None,
        )
    assert got.temp is not None
    fd = os.open(got.temp, os.O_RDONLY)
    os.unlink(got.temp)  # the descriptor keeps it until the shard has it; nothing left behind by a kill after this
    try:
        st = os.fstat(fd)
        if st.st_size != size:
            raise SourceProblem(f"{where}: changed since it was indexed ({size} -> {st.st_size} bytes)")
        h = new_hasher()
        for block in read_blocks(fd, size, where):
            h.update(block)
        head = os.pread(fd, 16, 0)
        # the temp copy's own mtime: the copy into the shard checks it (the object's time is the listing's)
        return Source(None, fd, size, h.digest(), media_ext(got.rel, head), where.encode(), st.st_mtime_ns, True)
    except SourceProblem as exc:
        os.close(fd)
        return exc
