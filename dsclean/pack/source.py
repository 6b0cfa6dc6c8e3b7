"""Reading a shard's source files, each checked against the index while it is read.

A source is read (the bytes read, one more asked for) and checked: its size and mtime before
and after are the index's, it held exactly ``size`` bytes. A changed, missing or unreadable
file is a :class:`SourceProblem` naming the file. :func:`read_source` does one file (small
ones read whole, big ones hashed in blocks and kept open to be streamed); :func:`read_into`
reads a batch of small files straight into their places in one buffer, for the bulk layout of
:mod:`.write`; :class:`ShardColumns` are the index columns those reads are checked against.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..formats import FORMATS, SNIFF_BYTES, sniff
from ..hashing import content_hash, new_hasher
from ..openfile import open_regular
from .bulk import EXT_CODE, FACT_NAMES, key_stems
from .samples import key_numbers_of, media_ext

#: the block size of a big file's reads (its hash pass, its copy)
_READ_BLOCK = 1 << 20


class SourceProblem(Exception):
    """A source file is missing, unreadable, or not what the index recorded."""


@dataclass
class Source:
    data: bytes | None  # the whole file (small files), or None: stream from ``fd``
    fd: int | None
    size: int
    checksum: bytes
    ext: str
    full: bytes  # the full path (for messages: os.fsdecode)
    mtime_ns: int
    hashed: bool  # the checksum was computed from these bytes (False: the scan's, reused)


def read_source(
    root: bytes, rel: bytes, size: int, mtime_ns: int, inline_limit: int, known: bytes | None = None
) -> Source:
    """Open and check one source file against the index; small files are read whole.

    ``root``: the root folder's bytes ending in ``/``. ``known``: the scan's checksum of this
    file (same size and mtime): used instead of hashing. Per file, so kept to plain calls.
    """
    if not rel or rel.startswith(b"/") or b".." in rel.split(b"/"):
        raise SourceProblem(
            f"{os.fsdecode(rel)}: refused: the index path is absolute or escapes the root {os.fsdecode(root)}"
        )
    full = root + rel
    try:
        fd = open_regular(full)  # a FIFO or device swapped in since the scan: refused, never waited on
    except FileNotFoundError:
        raise SourceProblem(f"{os.fsdecode(full)}: missing: the file is gone since it was indexed") from None
    except OSError as exc:
        raise SourceProblem(f"{os.fsdecode(full)}: unreadable: {exc.strerror}") from None
    keep_open = False
    try:
        st = os.fstat(fd)
        if st.st_size != size or st.st_mtime_ns != mtime_ns:
            same_as_indexed(os.fsdecode(full), st, size, mtime_ns)
        if size <= inline_limit:
            data = os.pread(fd, size + 1, 0)  # one more byte: a file that grew is caught by the same call
            if len(data) != size:
                raise SourceProblem(
                    f"{os.fsdecode(full)}: changed while it was packed ({len(data)} bytes read, not {size})"
                )
            st = os.fstat(fd)
            if st.st_size != size or st.st_mtime_ns != mtime_ns:
                same_as_indexed(os.fsdecode(full), st, size, mtime_ns)
            checksum = known if known is not None else content_hash(data)
            return Source(
                data, None, size, checksum, media_ext(os.fsdecode(rel), data[:16]), full, mtime_ns, known is None
            )
        where = os.fsdecode(full)
        head = os.pread(fd, 16, 0)
        if known is None:
            h = new_hasher()
            for block in read_blocks(fd, size, where):
                h.update(block)
            same_as_indexed(where, os.fstat(fd), size, mtime_ns)
        keep_open = True
        return Source(
            None,
            fd,
            size,
            known if known is not None else h.digest(),
            media_ext(os.fsdecode(rel), head),
            full,
            mtime_ns,
            known is None,
        )
    except OSError as exc:
        raise SourceProblem(f"{os.fsdecode(full)}: unreadable: {exc.strerror}") from None
    finally:
        if not keep_open:
            os.close(fd)


def same_as_indexed(full: str, st: os.stat_result, size: int, mtime_ns: int) -> None:
    if st.st_size != size or st.st_mtime_ns != mtime_ns:
        what = [f"size {size} -> {st.st_size} bytes"] if st.st_size != size else []
        what += [f"mtime {mtime_ns} -> {st.st_mtime_ns} ns"] if st.st_mtime_ns != mtime_ns else []
        raise SourceProblem(f"{full}: changed since it was indexed ({', '.join(what)})")


def read_blocks(fd: int, size: int, full: str):
    """``size`` bytes from the start of the file, in blocks; a file that ends early has changed."""
    pos = 0
    while pos < size:
        block = os.pread(fd, min(_READ_BLOCK, size - pos), pos)
        if not block:
            raise SourceProblem(f"{full}: changed while it was packed (ended at {pos} of {size} bytes)")
        pos += len(block)
        yield block
    if os.pread(fd, 1, size):
        raise SourceProblem(f"{full}: changed while it was packed (grew past {size} bytes)")


@dataclass
class ShardColumns:
    """A shard's index columns as arrays (paths stay in Arrow: a batch's are made bytes when it is read)."""

    path: object  # the path column (pyarrow) of the shard's rows of the index, in pack order
    size: np.ndarray
    mtime_ns: np.ndarray
    label: np.ndarray
    kind: np.ndarray
    facts: dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (values, valid); only in an index built with --facts
    stems: np.ndarray  # (rows, 16) uint8: the sample keys in hex

    @classmethod
    def of(cls, table, keys: np.ndarray | None = None) -> "ShardColumns":
        """The columns of ``table`` (the shard's rows of the index); ``keys``: the rows' 64-bit sample keys
        (None: computed from the paths)."""

        def ints(name):
            return np.asarray(table.column(name).to_numpy(), np.int64)

        facts = {}
        for name in FACT_NAMES:
            if name in table.column_names:
                col = table.column(name)
                facts[name] = (
                    np.asarray(col.fill_null(0).to_numpy(), np.int64),
                    np.asarray(col.is_valid().to_numpy(), bool),
                )
        path = table.column("path")
        keys = keys if keys is not None else key_numbers_of(path.to_pylist())
        return cls(path, ints("size"), ints("mtime_ns"), ints("label"), ints("kind"), facts, key_stems(keys))

    def rows(self, lo: int, hi: int, checksums: np.ndarray | None, known: np.ndarray | None) -> "BatchRows":
        """Rows ``lo:hi`` as Python lists, for the sample-by-sample path; ``checksums``/``known``:
        the scan's checksum per row where it is current (:attr:`.shardjob.ShardJob.checksums`)."""
        if known is None:
            sums = [None] * (hi - lo)
        else:
            sums = [bytes(checksums[i]) if known[i] else None for i in range(lo, hi)]
        facts = {
            k: [v if ok else None for v, ok in zip(self.facts[k][0][lo:hi].tolist(), self.facts[k][1][lo:hi])]
            if k in self.facts
            else [None] * (hi - lo)
            for k in FACT_NAMES
        }
        return BatchRows(
            lo,
            self.path.slice(lo, hi - lo).to_pylist(),
            self.label[lo:hi].tolist(),
            self.kind[lo:hi].tolist(),
            self.size[lo:hi].tolist(),
            self.mtime_ns[lo:hi].tolist(),
            facts,
            sums,
        )


@dataclass
class BatchRows:
    """The index columns of one batch of a shard's rows, as Python lists."""

    start: int  # position of the first row in the job's rows
    path: list
    label: list
    kind: list
    size: list
    mtime_ns: list
    facts: dict[str, list]
    known: list  # per row: the scan's checksum (bytes) or None


def read_batch(root: str, rows: BatchRows, inline_limit: int) -> list:
    """The batch's sources, in order; a :class:`SourceProblem` in place of a source that failed its checks."""
    root = os.path.join(os.fsencode(root), b"")  # ends in /
    out: list = []
    for rel, size, mtime_ns, known in zip(rows.path, rows.size, rows.mtime_ns, rows.known):
        try:
            out.append(read_source(root, rel, size, mtime_ns, inline_limit, known))
        except SourceProblem as exc:
            out.append(exc)
    return out


def close_all(pending_sources) -> None:
    for src in pending_sources:
        if isinstance(src, Source) and src.fd is not None:
            os.close(src.fd)


def read_into(view: memoryview, root: bytes, paths: list, sizes: list, mtimes: list, at: list) -> bool:
    """Each file read into ``view[at:]``, checked: its size and mtime after the read are the index's,
    and it held exactly ``size`` bytes (one more is asked for). False at the first that is not.

    Per file, so kept to the system calls (open, preadv, fstat, close) and little else.
    """
    open_, preadv, fstat, close, rdonly = os.open, os.preadv, os.fstat, os.close, os.O_RDONLY
    for rel, size, mtime_ns, pos in zip(paths, sizes, mtimes, at):
        if not rel or rel[:1] == b"/" or b".." in rel:
            return False  # the sample-by-sample path refuses it (or packs a name like a..b.jpg)
        try:
            fd = open_(root + rel, rdonly)
        except OSError:
            return False
        try:
            got = preadv(fd, [view[pos : pos + size + 1]], 0)
            st = fstat(fd)
        except OSError:
            return False
        finally:
            close(fd)
        if got != size or st.st_size != size or st.st_mtime_ns != mtime_ns:
            return False
    return True


_SNIFFED: dict[bytes, int] = {}  # first bytes -> extension code (-1: no magic), since many files share them


def sniffed_exts(array: np.ndarray, at: np.ndarray, size: np.ndarray, paths: list) -> np.ndarray:
    """Each sample's real extension code, from its magic bytes (by name when they say nothing), as media_ext.

    Files of a batch mostly share their first bytes: each distinct head is sniffed once.
    """
    heads = np.ascontiguousarray(array[at[:, None] + np.arange(SNIFF_BYTES)])
    distinct, which = np.unique(heads.view(f"V{SNIFF_BYTES}").ravel(), return_inverse=True)
    if len(_SNIFFED) > 4096:
        _SNIFFED.clear()
    codes = np.empty(len(distinct), np.int64)
    for j, head in enumerate(distinct.tolist()):
        code = _SNIFFED.get(head)
        if code is None:
            fmt = sniff(head)
            code = _SNIFFED[head] = EXT_CODE[FORMATS[fmt][1][0][1:]] if fmt else -1
        codes[j] = code
    out = codes[which.ravel()]
    # a file shorter than the head (bytes of the next member follow it) or without magic: one at a time
    for i in np.flatnonzero((out < 0) | (size < SNIFF_BYTES)).tolist():
        head = heads[i, : min(int(size[i]), SNIFF_BYTES)].tobytes()
        fmt = sniff(head)
        out[i] = EXT_CODE[FORMATS[fmt][1][0][1:]] if fmt else EXT_CODE[media_ext(os.fsdecode(paths[i]), head)]
    return out
