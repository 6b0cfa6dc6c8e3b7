"""Read back a shard an earlier run wrote: its records, each checked against the shard's bytes.

A shard named as finished is trusted only once its samples are the job's planned ones, in
order (some possibly left out by ``--skip-changed``), and its media bytes hash to the
checksums its ``.json`` members record: that finds a shard whose data a crash after
``--no-fsync`` lost.
"""

from __future__ import annotations

import json
import mmap
import os

import numpy as np

from ..data.shards import release
from ..hashing import DIGEST_SIZE, content_hash
from ..index.store import read_table
from ..jsonpaths import path_fields
from ..openfile import NotRegularFile, open_regular_file
from .bulk import EXTS
from .extnames import POLICIES, member_ext
from .samples import KEY_RE, sample_key
from .shardjob import ShardJob, ShardResult
from .tarformat import BLOCK, TarError, end_of_archive, iter_members, sidecar_bytes

#: reading a shard back, the pages behind are unmapped every this many bytes
_RELEASE_EVERY = 64 << 20


#: the media member extensions each ``--ext-policy`` writes
_NAMES = {policy: frozenset(member_ext(e, policy) for e in EXTS) for policy in POLICIES}


def left_out_earlier(shard: str) -> str:
    """Why a planned sample is not in the finished shard that should hold it."""
    return f"left out by an earlier run (--skip-changed: its file had changed or vanished); it belongs in {shard}"


def read_back(job: ShardJob) -> ShardResult:
    """The records of an existing shard, from its tar headers and ``.json`` members, each checked
    against the shard's bytes: the media bytes hash to the ``.json``'s checksum, the ``.cls`` is the
    index's label.

    Its samples must be the job's planned samples, in order, possibly with some left
    out (an earlier run with ``--skip-changed``); anything else is a foreign shard. Hashing
    the media is what finds a shard named as finished whose data a crash after ``--no-fsync``
    lost (zeros where a page was): the cost is one read and hash of the finished shards
    (measured in docs/how-to/shards.md, "Reliability": about half the time writing them took).
    """
    result = ShardResult(job.number, job.name, written=False)
    table = read_table(job.index, job.rows)
    paths = table.column("path").to_pylist()
    labels = table.column("label").to_pylist()
    planned = [sample_key(p) for p in paths]
    rows, offsets, sums = [], [], bytearray()
    exts: set[str] = set()
    p = end = 0  # end: of the last member read, padding included
    try:
        f = open_regular_file(job.path)
    except NotRegularFile as exc:
        raise TarError(f"{job.path}: {exc.strerror}: not a shard pack wrote") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if not size:  # a crash after --no-fsync can leave the name with no data
            raise TarError(f"{job.path}: empty (0 bytes): not a shard pack finished")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        released = 0
        try:
            for key, members in _samples(mm, job.path):
                end = max(m.offset + m.size + (-m.size % BLOCK) for m in members.values())
                first = min(m.offset for m in members.values())
                if first - released > _RELEASE_EVERY:  # keep this process's resident size flat
                    release(mm, released, first - _RELEASE_EVERY // 2)
                    released = first - _RELEASE_EVERY // 2
                while p < len(planned) and planned[p] != key:
                    result.skipped.append({**path_fields(paths[p]), "why": left_out_earlier(job.name)})
                    p += 1
                if p == len(planned):
                    raise TarError(
                        f"{job.path}: sample {key} is not planned for this shard (or out of order): "
                        "the shard belongs to another pack"
                    )
                media = [m for ext, m in members.items() if ext not in ("cls", "json")]
                if len(media) != 1 or "json" not in members:
                    raise TarError(f"{job.path}: sample {key} has members {sorted(members)}")
                meta = json.loads(_sidecar(mm, members["json"], job.path))
                checksum = bytes.fromhex(meta["checksum"])
                if len(checksum) != DIGEST_SIZE:
                    raise TarError(f"{job.path}: sample {key} has a bad checksum in its json")
                m = media[0]
                if m.name.partition(".")[2] not in _NAMES[job.ext_policy]:
                    raise TarError(
                        f"{job.path}: sample {key}: its media member {m.name} is not named as this pack "
                        f"(--ext-policy {job.ext_policy}) names them: not a shard of this pack"
                    )
                if content_hash(memoryview(mm)[m.offset : m.offset + m.size]) != checksum:
                    raise TarError(
                        f"{job.path}: sample {key}: its media bytes ({m.name}) do not hash to the "
                        "checksum its json records (data lost in a crash after --no-fsync?): "
                        "not a shard pack finished"
                    )
                cls = members.get("cls")
                text = _sidecar(mm, cls, job.path) if cls else None
                if text != (None if labels[p] < 0 else str(labels[p]).encode()):
                    raise TarError(
                        f"{job.path}: sample {key}: its .cls member is {text!r}, the index's label "
                        f"{labels[p]}: not a shard pack finished"
                    )
                rows.append(int(job.rows[p]))
                exts.add(m.name.partition(".")[2])
                offsets.append(media[0].offset)
                sums += checksum
                p += 1
            if size != end + len(end_of_archive(end)):  # zeros where samples were: a crash after --no-fsync
                raise TarError(
                    f"{job.path}: {size - end} bytes after its last sample where the end-of-archive "
                    f"takes {len(end_of_archive(end))}: not a shard pack finished"
                )
        except (ValueError, KeyError) as exc:
            raise TarError(f"{job.path}: unreadable sample json ({exc})") from None
        finally:
            mm.close()
    result.skipped += [{**path_fields(q), "why": left_out_earlier(job.name)} for q in paths[p:]]
    result.rows = np.asarray(rows, np.int64)
    result.offsets = np.asarray(offsets, np.int64)
    result.checksums = bytes(sums)
    result.filesize = size
    result.exts = tuple(sorted(exts))
    return result


def _samples(buf, where: str):
    """``(key, {ext: Member})`` per sample of a tar, in order; members of a key must be adjacent.

    Every :class:`TarError` names ``where`` (the shard), the tar layer's own ones too."""
    seen: set[str] = set()
    key, members = None, {}
    for m in _named_errors(iter_members(buf), where):
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


def _named_errors(members, where: str):
    """``members`` as they come; a :class:`TarError` of the tar layer (which knows only byte
    positions) raised again with ``where`` in front."""
    while True:
        try:
            m = next(members)
        except StopIteration:
            return
        except TarError as exc:
            raise TarError(f"{where}: {exc}") from None
        yield m


def _sidecar(mm, member, path: str) -> bytes:
    """A ``.json``/``.cls`` member's bytes, or TarError naming the shard when it is too big to be pack's."""
    try:
        return sidecar_bytes(mm, member)
    except TarError as exc:
        raise TarError(f"{path}: {exc}") from None
