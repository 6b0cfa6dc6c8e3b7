"""Write one shard (temp file, then rename), or read back the records of one already written.

:func:`write_shard` is the task a worker runs: it depends only on its
:class:`ShardJob` and the files, so any shard can be rebuilt alone, anywhere
the files are visible. Each source is checked against the index while it is
read (size and mtime before, the bytes read, size and mtime after); a changed,
missing or unreadable file abandons the shard (its temp file is removed) with
a message naming the file, or with ``skip_changed`` leaves that sample out.

Failures to *write* (a full disk, a read-only folder) abandon the shard the
same way: a shard name only ever holds a complete shard.
"""
from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass, field

import numpy as np

from ..atomic import atomic_output
from ..data.shards import release
from ..hashing import DIGEST_SIZE, content_hash, new_hasher
from ..index.store import KINDS, read_table
from ..jsonpaths import path_fields
from .samples import KEY_RE, json_record, media_ext, member_order, sample_key
from .tarformat import BLOCK, TarError, end_of_archive, header, iter_members, member_bytes, padding

#: files up to this size are read once into memory; bigger ones are streamed twice (hash, then copy)
INLINE_LIMIT = 64 << 20
#: reading a shard back, the pages behind are unmapped every this many bytes
_RELEASE_EVERY = 64 << 20
_BLOCK = 1 << 20


@dataclass(frozen=True)
class ShardJob:
    """Everything needed to build one shard. Small and picklable: it travels to workers."""

    number: int
    output: str  # the shard folder (absolute)
    name: str  # the shard's file name
    index: str  # the source index (absolute)
    root: str  # where the source files are
    rows: np.ndarray  # source-index positions, in pack order
    classes: tuple[str, ...]
    skip_changed: bool = False
    inline_limit: int = INLINE_LIMIT

    @property
    def path(self) -> str:
        return os.path.join(self.output, self.name)


@dataclass
class ShardResult:
    """What went into a shard: per kept sample its source row, media data offset and checksum."""

    number: int
    name: str
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    checksums: bytes = b""  # DIGEST_SIZE bytes per kept sample
    filesize: int = 0
    skipped: list[dict] = field(default_factory=list)  # path fields + "why"
    error: str | None = None  # the shard could not be written: why (it does not exist)
    written: bool = False  # written by this run (False: read back from an earlier one)


def make_readable(path: str) -> None:
    """Give a temp output (mkstemp makes it 0600) the mode a plain new file gets (0666 minus the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


class SourceProblem(Exception):
    """A source file is missing, unreadable, or not what the index recorded."""


class _Abandon(Exception):
    pass


@dataclass
class _Source:
    data: bytes | None  # the whole file (small files), or None: stream from ``fd``
    fd: int | None
    size: int
    checksum: bytes
    ext: str
    where: str  # the full path, for messages


def _read_source(root: str, rel: bytes, size: int, mtime_ns: int, inline_limit: int) -> _Source:
    """Open and check one source file against the index; small files are read whole."""
    rel_s = os.fsdecode(rel)
    full = os.path.join(root, rel_s)
    if not rel or os.path.isabs(rel_s) or ".." in rel_s.split("/"):
        raise SourceProblem(f"{rel_s}: refused: the index path is absolute or escapes the root {root}")
    try:
        fd = os.open(full, os.O_RDONLY)
    except FileNotFoundError:
        raise SourceProblem(f"{full}: missing: the file is gone since it was indexed") from None
    except OSError as exc:
        raise SourceProblem(f"{full}: unreadable: {exc.strerror}") from None
    keep_open = False
    try:
        _same_as_indexed(full, os.fstat(fd), size, mtime_ns)
        if size <= inline_limit:
            data = os.pread(fd, size + 1, 0)  # one more byte: a file that grew is caught by the same call
            if len(data) != size:
                raise SourceProblem(f"{full}: changed while it was packed ({len(data)} bytes read, not {size})")
            _same_as_indexed(full, os.fstat(fd), size, mtime_ns)
            return _Source(data, None, size, content_hash(data), media_ext(rel_s, data[:16]), full)
        h = new_hasher()
        head = os.pread(fd, 16, 0)
        for block in _blocks(fd, size, full):
            h.update(block)
        _same_as_indexed(full, os.fstat(fd), size, mtime_ns)
        keep_open = True
        return _Source(None, fd, size, h.digest(), media_ext(rel_s, head), full)
    except OSError as exc:
        raise SourceProblem(f"{full}: unreadable: {exc.strerror}") from None
    finally:
        if not keep_open:
            os.close(fd)


def _same_as_indexed(full: str, st: os.stat_result, size: int, mtime_ns: int) -> None:
    if st.st_size != size or st.st_mtime_ns != mtime_ns:
        what = [f"size {size} -> {st.st_size} bytes"] if st.st_size != size else []
        what += [f"mtime {mtime_ns} -> {st.st_mtime_ns} ns"] if st.st_mtime_ns != mtime_ns else []
        raise SourceProblem(f"{full}: changed since it was indexed ({', '.join(what)})")


def _blocks(fd: int, size: int, full: str):
    """``size`` bytes from the start of the file, in blocks; a file that ends early has changed."""
    pos = 0
    while pos < size:
        block = os.pread(fd, min(_BLOCK, size - pos), pos)
        if not block:
            raise SourceProblem(f"{full}: changed while it was packed (ended at {pos} of {size} bytes)")
        pos += len(block)
        yield block
    if os.pread(fd, 1, size):
        raise SourceProblem(f"{full}: changed while it was packed (grew past {size} bytes)")


def write_shard(job: ShardJob) -> ShardResult:
    """Build ``job.path`` from the sources; on any failure no file of that name appears."""
    result = ShardResult(job.number, job.name, written=True)
    _remove_stale_temps(job)
    table = read_table(job.index, job.rows)
    rows, offsets, sums = [], [], bytearray()
    try:
        with atomic_output(job.path) as tmp, open(tmp, "wb", buffering=_BLOCK) as out:
            pos = 0
            for i, row in enumerate(_rows(table)):
                try:
                    src = _read_source(job.root, row["path"], row["size"], row["mtime_ns"], job.inline_limit)
                except SourceProblem as exc:
                    if not job.skip_changed:
                        result.error = f"{exc}; rebuild the index, or pack with --skip-changed to leave it out"
                        raise _Abandon from None
                    result.skipped.append({**path_fields(row["path"]), "why": str(exc)})
                    continue
                try:
                    media_at, pos = _write_sample(out, pos, row, src, job.classes)
                finally:
                    if src.fd is not None:
                        os.close(src.fd)
                rows.append(int(job.rows[i]))
                offsets.append(media_at)
                sums += src.checksum
            out.write(end_of_archive(pos))
            make_readable(tmp)
    except _Abandon:
        return result
    except SourceProblem as exc:  # a big file changed between its hash pass and its copy
        result.error = f"{exc}; rebuild the index, or pack with --skip-changed to leave it out"
        return result
    except OSError as exc:
        result.error = f"{job.path}: cannot write the shard: {exc.strerror or exc}"
        return result
    result.rows = np.asarray(rows, np.int64)
    result.offsets = np.asarray(offsets, np.int64)
    result.checksums = bytes(sums)
    result.filesize = os.path.getsize(job.path)
    return result


def _rows(table):
    """The table's rows as dicts, a few thousand at a time (a shard of tiny samples can hold 100,000s)."""
    for batch in table.to_batches(max_chunksize=4096):
        yield from batch.to_pylist()


def _write_sample(out, pos: int, row: dict, src: _Source, classes: tuple[str, ...]) -> tuple[int, int]:
    """Write one sample's members in name order; returns (media data offset, new position)."""
    rel = row["path"]
    key = sample_key(rel)
    label = row["label"]
    media_at = -1
    for ext in member_order(src.ext, label >= 0):
        if ext == src.ext:
            size = src.size
            out.write(header(f"{key}.{ext}", size))
            media_at = pos + BLOCK
            if src.data is None:
                _copy_checked(out, src)
            else:
                out.write(src.data)
        else:
            if ext == "cls":
                data = str(label).encode("ascii")
            else:
                facts = {k: row.get(k) for k in ("width", "height", "sample_rate", "frames", "channels")}
                data = json_record(rel, label=label, classes=list(classes), kind=KINDS[row["kind"]],
                                   size=src.size, checksum=src.checksum, facts=facts)
            size = len(data)
            out.write(header(f"{key}.{ext}", size))
            out.write(data)
        out.write(padding(size))
        pos += member_bytes(size)
    return media_at, pos


def _copy_checked(out, src: _Source) -> None:
    """Second pass over a big file: copy it and make sure it is the bytes that were hashed."""
    h = new_hasher()
    for block in _blocks(src.fd, src.size, src.where):
        h.update(block)
        out.write(block)
    if h.digest() != src.checksum:
        raise SourceProblem(f"{src.where}: changed while it was packed (its bytes differ between the "
                            "checksum pass and the copy)")


def _remove_stale_temps(job: ShardJob) -> None:
    """A killed run's temp file for this shard (``.NAME.*.tmp``); only this shard's writer removes it."""
    prefix = f".{job.name}."
    with os.scandir(job.output) as it:
        for entry in it:
            if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                os.unlink(entry.path)


# --------------------------------------------------------------------------- read back


def read_back(job: ShardJob) -> ShardResult:
    """The records of an existing shard, from its tar headers and ``.json`` members (no media read).

    Its samples must be the job's planned samples, in order, possibly with some left
    out (an earlier run with ``--skip-changed``); anything else is a foreign shard.
    """
    result = ShardResult(job.number, job.name, written=False)
    table = read_table(job.index, job.rows)
    paths = table.column("path").to_pylist()
    planned = [sample_key(p) for p in paths]
    rows, offsets, sums = [], [], bytearray()
    p = 0
    with open(job.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        released = 0
        try:
            for key, members in _samples(mm, job.path):
                first = min(m.offset for m in members.values())
                if first - released > _RELEASE_EVERY:  # keep this process's resident size flat
                    release(mm, released, first - _RELEASE_EVERY // 2)
                    released = first - _RELEASE_EVERY // 2
                while p < len(planned) and planned[p] != key:
                    result.skipped.append({**path_fields(paths[p]), "why": "left out by an earlier run"})
                    p += 1
                if p == len(planned):
                    raise TarError(f"{job.path}: sample {key} is not planned for this shard (or out of order): "
                                   "the shard belongs to another pack")
                media = [m for ext, m in members.items() if ext not in ("cls", "json")]
                if len(media) != 1 or "json" not in members:
                    raise TarError(f"{job.path}: sample {key} has members {sorted(members)}")
                meta = json.loads(mm[members["json"].offset:members["json"].offset + members["json"].size])
                checksum = bytes.fromhex(meta["checksum"])
                if len(checksum) != DIGEST_SIZE:
                    raise TarError(f"{job.path}: sample {key} has a bad checksum in its json")
                rows.append(int(job.rows[p]))
                offsets.append(media[0].offset)
                sums += checksum
                p += 1
        except (ValueError, KeyError) as exc:
            raise TarError(f"{job.path}: unreadable sample json ({exc})") from None
        finally:
            if size:
                mm.close()
    result.skipped += [{**path_fields(q), "why": "left out by an earlier run"} for q in paths[p:]]
    result.rows = np.asarray(rows, np.int64)
    result.offsets = np.asarray(offsets, np.int64)
    result.checksums = bytes(sums)
    result.filesize = size
    return result


def _samples(buf, where: str):
    """``(key, {ext: Member})`` per sample of a tar, in order; members of a key must be adjacent."""
    seen: set[str] = set()
    key, members = None, {}
    for m in iter_members(buf):
        k, dot, ext = m.name.partition(".")
        if not dot or not KEY_RE.fullmatch(k):
            raise TarError(f"{where}: member {m.name!r} is not named <16 hex digits>.<ext>")
        if k != key:
            if key is not None:
                yield key, members
            if k in seen:
                raise TarError(f"{where}: the members of sample {k} are not adjacent")
            seen.add(k)
            key, members = k, {}
        members[ext] = m
    if key is not None:
        yield key, members
