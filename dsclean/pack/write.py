"""Write one shard: temp file, then rename.

:func:`write_shard` is the task a worker runs: it depends only on its
:class:`~.shardjob.ShardJob` and the files, so any shard can be rebuilt alone, anywhere
the files are visible. Each source is checked against the index while it is
read (:mod:`.source`); a changed, missing or unreadable file abandons the shard
(its temp file is removed) with a message naming the file, or with ``skip_changed``
leaves that sample out.

Failures to *write* (a full disk, a read-only folder) abandon the shard the
same way: a shard name only ever holds a complete shard. Reading back a shard an
earlier run wrote is :mod:`.readback`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..atomic import atomic_output, temp_next_to
from ..formats import FORMATS
from ..hashing import DIGEST_SIZE, content_hash, new_hasher
from ..index.store import KINDS, read_table
from ..jsonpaths import path_fields
from .bulk import CLS, EXT_CODE, EXTS, JSON, MEDIA, Layout, headers, json_members, layout, place, split_lines
from .extnames import POLICIES, member_ext
from .runner import ABANDONED
from .samples import int_facts_record, member_order, sample_key
from .shardjob import ShardJob, ShardResult
from .source import (
    BatchRows,
    ShardColumns,
    Source,
    SourceProblem,
    close_all,
    read_batch,
    read_blocks,
    read_into,
    same_as_indexed,
    sniffed_exts,
)
from .tarformat import BLOCK, end_of_archive, header, padding


def make_readable(path: str) -> None:
    """Give a temp output (mkstemp makes it 0600) the mode a plain new file gets (0666 minus the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


@contextlib.contextmanager
def output_file(final: str, *, fsync: bool = True, sync_dir: bool = True, keep: bool = False) -> Iterator[str]:
    """A temp file next to ``final``, renamed over it when the block succeeds (removed when it fails).

    ``fsync`` (the default): :func:`dsclean.atomic.atomic_output`, the file fsynced before the
    rename (and the folder after it unless ``sync_dir`` is False). ``fsync=False``
    (``pack --no-fsync``): the same without any fsync, like ``tar`` or ``cp``: a killed process
    still never leaves a partial file under ``final``, but after a power loss or an OS crash
    the file may not be on disk yet. ``keep``: neither fsync nor rename; the caller does
    (:func:`finish_shard`).
    """
    if fsync and not keep:
        with atomic_output(final, sync_dir=sync_dir) as tmp:
            yield tmp
        return
    tmp = temp_next_to(final)
    try:
        yield tmp
        if not keep:
            os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class _Abandon(Exception):
    pass


# --------------------------------------------------------------------------- batches
#
# A shard's rows go in batches, bounded in rows and bytes. A batch of files up to the inline
# limit is laid out in bulk (:mod:`.bulk`): each file is read straight into its place in one
# reused buffer (no new bytes object per file: on this kernel, reading into fresh memory cost
# 2-3x the system time of reading into memory already mapped), headers and JSON are filled in
# around them, and the batch is written with one call. A bigger file is a batch of its own,
# streamed; and a batch with any source that fails its checks is done again sample by sample
# (:func:`.source.read_batch`), which names the file and the reason, or leaves it out with
# ``skip_changed``.

_BATCH_ROWS = 512
_BATCH_BYTES = 8 << 20


def _batches(sizes: np.ndarray, inline_limit: int):
    """``(lo, hi, bulk)``: the job's rows in batches; ``bulk`` False for a single file over the
    batch size (read whole by itself) or the inline limit (streamed)."""
    big = np.flatnonzero(sizes > min(inline_limit, _BATCH_BYTES))
    ends = np.cumsum(sizes)
    n, lo, b = len(sizes), 0, 0
    while lo < n:
        while b < len(big) and big[b] < lo:
            b += 1
        if b < len(big) and big[b] == lo:
            yield lo, lo + 1, False
            lo += 1
            continue
        hi = min(n, lo + _BATCH_ROWS, int(big[b]) if b < len(big) else n)
        base = int(ends[lo - 1]) if lo else 0
        hi = max(lo + 1, min(hi, int(np.searchsorted(ends, base + _BATCH_BYTES, side="right"))))
        yield lo, hi, True
        lo = hi


# --------------------------------------------------------------------------- a batch in bulk


class _Buffer:
    """One batch's bytes, reused from batch to batch (its pages stay mapped), grown when a batch needs more."""

    def __init__(self) -> None:
        self.array = np.zeros(0, np.uint8)
        self.view = memoryview(self.array)

    def fit(self, size: int) -> None:
        if size > len(self.array):
            self.view.release()
            self.array = np.zeros(max(size, len(self.array) * 5 // 4), np.uint8)
            self.view = memoryview(self.array)


_FREE: list[_Buffer] = []  # batch buffers not in use, kept for the next shard
_FREE_LOCK = threading.Lock()


@contextlib.contextmanager
def _batch_buffer():
    """A batch buffer for one shard, kept in the process after it (a fresh one costs a page fault per
    4 KiB): shards built one after the other, on whichever thread, reuse the same ones."""
    with _FREE_LOCK:
        buf = _FREE.pop() if _FREE else _Buffer()
    try:
        yield buf
    finally:
        with _FREE_LOCK:
            _FREE.append(buf)


@dataclass
class _Bulk:
    size: int  # bytes of the batch, in ``buffer.view[:size]``
    media_at: np.ndarray  # per row, the media data's offset from the batch's start
    checksums: np.ndarray  # (rows, 16) uint8
    hashed: int
    exts: frozenset[str]  # the media members' extensions


def _bulk_batch(job: ShardJob, cols: ShardColumns, lo: int, hi: int, buf: _Buffer, classes: list[str]) -> _Bulk | None:
    """Rows ``lo:hi`` (files up to the inline limit) read and laid out as tar bytes in ``buf``.

    None when a source is not exactly what the index says (or its path is unusual): the
    caller then does the batch sample by sample, which says what is wrong.
    """
    n = hi - lo
    paths = cols.path.slice(lo, n).to_pylist()
    size, labels = cols.size[lo:hi], cols.label[lo:hi]
    labelled = labels >= 0
    known = np.zeros(n, bool) if job.known is None else job.known[lo:hi]
    sums = np.zeros((n, DIGEST_SIZE), np.uint8) if job.checksums is None else job.checksums[lo:hi].copy()
    kinds = cols.kind[lo:hi]
    facts = {k: (v[lo:hi], ok[lo:hi]) for k, (v, ok) in cols.facts.items()}
    text, starts, lengths = json_members(paths, labels, classes, kinds, KINDS, size, sums, facts)
    cls_text, cls_starts, cls_lengths = split_lines("\n".join(map(str, labels[labelled].tolist())).encode())
    sizes = np.zeros((n, 3), np.int64)
    sizes[:, MEDIA], sizes[:, JSON] = size, lengths
    sizes[labelled, CLS] = cls_lengths if labelled.any() else 0
    named = _NAMED[job.ext_policy]  # the real format's extension code -> the member's (--ext-policy)
    ext = named[np.array([_BY_NAME.get(p.rpartition(b".")[2].lower(), 0) for p in paths], np.int64)]  # a guess
    lay = layout(ext, labelled, sizes)
    buf.fit(lay.total + BLOCK)  # a block more: the one-byte-longer read of the last file may land there
    blocks = buf.array[: lay.total // BLOCK * BLOCK].reshape(-1, BLOCK)
    ends = lay.header_at + BLOCK + lay.member_size
    blocks[(ends[lay.member_size > 0] - 1) // BLOCK] = 0  # padding: each member's last block, before its data lands
    if not read_into(
        buf.view,
        os.path.join(os.fsencode(job.root), b""),
        paths,
        size.tolist(),
        cols.mtime_ns[lo:hi].tolist(),
        lay.data_at[:, MEDIA].tolist(),
    ):
        return None
    real = named[sniffed_exts(buf.array, lay.data_at[:, MEDIA], size, paths)]
    if (real != ext).any():  # a name that does not say the format: the members' order may differ
        lay = _relayout(buf, lay, ext, real, labelled, sizes)
        ext = real
    hashed = np.flatnonzero(~known)
    if hashed.size:
        at = lay.data_at[:, MEDIA]
        for i in hashed.tolist():
            sums[i] = np.frombuffer(content_hash(buf.view[at[i] : at[i] + size[i]]), np.uint8)
        text, starts, again = json_members(paths, labels, classes, kinds, KINDS, size, sums, facts)
        assert (again == lengths).all()  # a checksum is always 32 hex digits
    place(buf.view, lay.data_at[labelled, CLS], cls_text, cls_starts, cls_lengths)
    place(buf.view, lay.data_at[:, JSON], text, starts, lengths)
    blocks[lay.header_at // BLOCK] = headers(cols.stems[lo:hi], lay, ext)
    return _Bulk(
        lay.total, lay.data_at[:, MEDIA], sums, int(hashed.size), frozenset(EXTS[c] for c in set(ext.tolist()))
    )


#: canonical extension code by a file name's extension (lower case, bytes), to guess the layout before reading
_BY_NAME = {e[1:].encode("ascii"): EXT_CODE[exts[0][1:]] for _, exts in FORMATS.values() for e in exts}
#: per ``--ext-policy``, the member's extension code by the real format's extension code
_NAMED = {policy: np.array([EXT_CODE[member_ext(e, policy)] for e in EXTS], np.int64) for policy in POLICIES}


def _relayout(
    buf: _Buffer, lay: Layout, ext: np.ndarray, real: np.ndarray, labelled: np.ndarray, sizes: np.ndarray
) -> Layout:
    """The layout for the real extensions; media data whose place changed is moved (a sample's span is the same)."""
    new = layout(real, labelled, sizes)
    for i in np.flatnonzero(new.data_at[:, MEDIA] != lay.data_at[:, MEDIA]).tolist():
        old, to, size = int(lay.data_at[i, MEDIA]), int(new.data_at[i, MEDIA]), int(sizes[i, MEDIA])
        data = bytes(buf.view[old : old + size])
        buf.array[new.sample_at[i] : new.sample_at[i + 1]] = 0
        buf.view[to : to + size] = data
    return new


# --------------------------------------------------------------------------- writing


class _Out:
    """The shard's bytes, gathered and written with ``writev`` a few MiB at a time (no copy into a buffer).

    A batch laid out in bulk is written by a helper thread while the caller reads and lays
    out the next batch into a second buffer (the copy into the page cache runs beside the
    copies out of it). Write-behind: every ``_SYNC_EVERY`` bytes an ``fdatasync`` runs on
    another helper thread while the next samples are gathered, so the disk works during the
    pack and the shard's final fsync (before its rename) has little left to wait for.
    """

    def __init__(self, fd: int, sync: bool = True) -> None:
        self.fd = fd
        self.sync = sync  # False (``--no-fsync``): no background fdatasync either
        self.parts: list = []
        self.pending = 0
        self.pos = 0  # bytes of the shard so far (written + gathered)
        self._unsynced = 0
        self._sync: Future | None = None
        self._syncer: ThreadPoolExecutor | None = None
        self._write: Future | None = None  # the batch being written by the writer thread
        self._writer: ThreadPoolExecutor | None = None

    def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.pending += len(data)
        self.pos += len(data)
        if self.pending >= _FLUSH_BYTES or len(self.parts) >= _MAX_PARTS:
            self.flush()

    def flush(self) -> None:
        """Write what is gathered, after the batch being written (waited for: writes stay in order)."""
        self.wait()
        if not self.parts:
            return
        done = os.writev(self.fd, self.parts)
        if done != self.pending:  # a short write (a signal, a nearly full disk): write the rest plainly
            rest = memoryview(b"".join(self.parts))[done:]
            while rest:
                rest = rest[os.write(self.fd, rest) :]
        self.wrote(self.pending)
        self.parts, self.pending = [], 0

    def write(self, data) -> None:
        """``data`` written after what is gathered, by the writer thread: a batch laid out in bulk.

        The caller must leave ``data`` alone until its next call here (or to ``flush``/``close``),
        which waits for it: it lays out the next batch in another buffer meanwhile.
        """
        self.flush()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="pack-write")
        self._write = self._writer.submit(_write_all, self.fd, data)
        self.pos += len(data)

    def wait(self) -> None:
        """Wait for the batch being written; raises what its write raised (ENOSPC, EIO)."""
        if self._write is not None:
            write, self._write = self._write, None
            self.wrote(write.result())

    def wrote(self, n: int) -> None:
        """``n`` more bytes are in the file: start a background sync when enough are."""
        self._unsynced += n
        if not self.sync or self._unsynced < _SYNC_EVERY or (self._sync is not None and not self._sync.done()):
            return
        if self._sync is not None:
            self._sync.result()  # a failed sync (EIO, ENOSPC) fails the shard
        if self._syncer is None:
            self._syncer = ThreadPoolExecutor(1, thread_name_prefix="pack-sync")
        self._sync = self._syncer.submit(os.fdatasync, self.fd)
        self._unsynced = 0

    def close(self) -> None:
        """Wait for the writer and the background sync (before the descriptor closes); raises what they raised."""
        try:
            self.wait()
        finally:  # the helper threads are done with the descriptor however the writing ended
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None
            if self._syncer is not None:
                self._syncer.shutdown(wait=True)
                self._syncer = None
                sync, self._sync = self._sync, None
                if sync is not None:
                    sync.result()


def _write_all(fd: int, data) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return len(data)


_FLUSH_BYTES = 4 << 20
_SYNC_EVERY = 8 << 20
_MAX_PARTS = 900  # under IOV_MAX (1024), a sample's members at most added after the check


#: with ``one_at_a_time``, one shard is built at a time in the process; the lock is let go before
#: the shard's final fsync and rename, so with two shards in flight on threads
#: (:func:`.runner.run_tasks` with ``overlap``) the next one is built while the disk catches up
_BUILDING = threading.Lock()


def write_shard(job: ShardJob) -> ShardResult:
    """Build ``job.path`` from the sources; on any failure no file of that name appears."""
    result = ShardResult(job.number, job.name, written=True)
    _remove_stale_temps(job)
    cols = ShardColumns.of(read_table(job.index, job.rows), job.keys)
    kept, offsets, sums = [], [], []  # per batch: positions in job.rows, media offsets, checksums
    classes = list(job.classes)
    in_hand: list = []
    exts: set[str] = set()
    try:
        with (
            output_file(job.path, fsync=job.fsync, sync_dir=False, keep=job.deferred) as tmp,
            _batch_buffer() as buf,
            _batch_buffer() as other,
        ):  # one batch is laid out in a buffer while the other is written
            fd = os.open(tmp, os.O_WRONLY)
            out = _Out(fd, sync=job.fsync)
            try:
                with _BUILDING if job.one_at_a_time else contextlib.nullcontext():
                    for lo, hi, bulk in _batches(cols.size, job.inline_limit):
                        if ABANDONED.is_set():
                            result.error = f"{job.path}: not written: the pack was interrupted"
                            raise _Abandon
                        remote = job.storage_options is not None
                        done = _bulk_batch(job, cols, lo, hi, buf, classes) if bulk and not remote else None
                        if done is not None:
                            kept.append(np.arange(lo, hi))
                            offsets.append(out.pos + done.media_at)
                            sums.append(done.checksums.tobytes())
                            result.hashed += done.hashed
                            exts |= done.exts
                            out.write(buf.view[: done.size])
                            buf, other = other, buf  # (out.write waits for ``other``'s write first)
                            continue
                        batch = cols.rows(lo, hi, job.checksums, job.known)
                        if job.storage_options is not None:
                            from .objsource import read_batch_objects  # a bucket's objects (only then: storage)
                        sources = in_hand = (
                            read_batch_objects(job.root, job.storage_options, batch, job.inline_limit)
                            if job.storage_options is not None
                            else read_batch(job.root, batch, job.inline_limit)
                        )
                        for j, src in enumerate(sources):
                            in_hand = sources[j + 1 :]
                            if isinstance(src, SourceProblem):
                                if not job.skip_changed:
                                    result.error = (
                                        f"{src}; rebuild the index, or pack with --skip-changed to leave it out"
                                    )
                                    raise _Abandon
                                result.skipped.append(
                                    {**path_fields(batch.path[j]), "why": f"{src}; it belongs in {job.name}"}
                                )
                                continue
                            named = member_ext(src.ext, job.ext_policy)
                            exts.add(named)
                            try:
                                media_at = _write_sample(out, batch, j, src, classes, named)
                            finally:
                                if src.fd is not None:
                                    os.close(src.fd)
                            kept.append([batch.start + j])
                            offsets.append([media_at])
                            sums.append(src.checksum)
                            result.hashed += src.hashed
                        in_hand = []
                    out.add(end_of_archive(out.pos))
                    out.flush()
            finally:  # waiting for the disk (here and in the fsync before the rename) is outside the lock
                try:
                    out.close()
                finally:
                    os.close(fd)
            make_readable(tmp)
    except _Abandon:
        return result
    except SourceProblem as exc:  # a big file changed between its hash pass and its copy
        result.error = f"{exc}; rebuild the index, or pack with --skip-changed to leave it out"
        return result
    except OSError as exc:
        result.error = f"{job.path}: cannot write the shard: {exc.strerror or exc}"
        return result
    finally:
        close_all(in_hand)
    result.rows = np.asarray(job.rows, np.int64)[np.concatenate([np.zeros(0, np.int64), *kept]).astype(np.int64)]
    result.offsets = np.concatenate([np.zeros(0, np.int64), *offsets]).astype(np.int64)
    result.checksums = b"".join(sums)
    result.exts = tuple(sorted(exts))
    if job.deferred:
        result.temp = tmp
    result.filesize = os.path.getsize(result.temp or job.path)
    return result


def finish_shard(result: ShardResult, output: str, fsync: bool) -> str | None:
    """Fsync a deferred shard's temp file (unless ``fsync`` is False) and rename it to its name;
    None when done, else why not (the temp file is then removed)."""
    try:
        if fsync:
            fd = os.open(result.temp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(result.temp, os.path.join(output, result.name))
        return None
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(result.temp)
        return f"{os.path.join(output, result.name)}: cannot write the shard: {exc.strerror or exc}"


def _write_sample(out: _Out, batch: BatchRows, j: int, src: Source, classes: list[str], named: str) -> int:
    """Gather one sample's members in name order (the media member ``<key>.<named>``); returns the media
    data's offset in the shard."""
    rel = batch.path[j]
    key = sample_key(rel)
    label = batch.label[j]
    media_at = -1
    parts, pos = out.parts, out.pos
    for ext in _member_order(named, label >= 0):
        if ext == named:
            if src.data is None:  # a big file: streamed straight into the shard
                out.pos = pos
                out.add(header(f"{key}.{ext}", src.size))
                out.flush()
                media_at = out.pos
                _copy_checked(out, src)
                out.add(padding(src.size))
                parts, pos = out.parts, out.pos
                continue
            data = src.data
            media_at = pos + BLOCK
        elif ext == "cls":
            data = b"%d" % label
        else:
            facts = {k: v[j] for k, v in batch.facts.items()}
            fields = {"path": rel.decode("ascii")} if rel.isascii() else path_fields(rel)
            data = int_facts_record(fields, label, classes, KINDS[batch.kind[j]], src.size, src.checksum, facts)
        size = len(data)
        pad = padding(size)
        parts += (header(f"{key}.{ext}", size), data, pad)
        pos += BLOCK + size + len(pad)
    out.pending += pos - out.pos
    out.pos = pos
    if out.pending >= _FLUSH_BYTES or len(parts) >= _MAX_PARTS:
        out.flush()
    return media_at


_ORDERS: dict[tuple[str, bool], list[str]] = {}


def _member_order(ext: str, labelled: bool) -> list[str]:
    order = _ORDERS.get((ext, labelled))
    if order is None:
        order = _ORDERS[(ext, labelled)] = member_order(ext, labelled)
    return order


def _copy_checked(out: _Out, src: Source) -> None:
    """A big file, streamed into the shard: the bytes must be the ones hashed (or the scan's size)."""
    h = new_hasher() if src.hashed else None
    where = os.fsdecode(src.full)
    for block in read_blocks(src.fd, src.size, where):
        if h is not None:
            h.update(block)
        view = memoryview(block)
        while view:
            view = view[os.write(out.fd, view) :]
        out.wrote(len(block))
    out.pos += src.size
    try:
        same_as_indexed(where, os.fstat(src.fd), src.size, src.mtime_ns)
    except OSError as exc:
        raise SourceProblem(f"{where}: unreadable: {exc.strerror}") from None
    if h is not None and h.digest() != src.checksum:
        raise SourceProblem(
            f"{where}: changed while it was packed (its bytes differ between the checksum pass and the copy)"
        )


def _remove_stale_temps(job: ShardJob) -> None:
    """A killed run's temp file for this shard (``.NAME.*.tmp``); only this shard's writer removes it."""
    prefix = f".{job.name}."
    with os.scandir(job.output) as it:
        for entry in it:
            if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                os.unlink(entry.path)
