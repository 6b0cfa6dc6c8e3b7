"""What one shard's task is given (:class:`ShardJob`) and what came of it (:class:`ShardResult`).

A job depends only on itself and the files, so any shard can be built (:mod:`.write`) or read
back (:mod:`.readback`) alone, anywhere the files are visible; it is small and picklable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

#: files up to this size are read once into memory; bigger ones are streamed twice (hash, then copy)
INLINE_LIMIT = 64 << 20


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
    #: per row, the scan's content_hash of the file when it is current (same size and mtime as the
    #: index), as ``(rows, DIGEST_SIZE)`` uint8; ``known[i]`` False: hash the bytes as they are read
    checksums: np.ndarray | None = None
    known: np.ndarray | None = None
    #: per row, the 64-bit sample key (the plan has them); None: computed from the paths
    keys: np.ndarray | None = None
    #: shards are built one at a time in this process, the last one's fsync overlapping the next (``--jobs 1``)
    one_at_a_time: bool = False
    #: fsync the shard before its rename (False: ``--no-fsync``, the OS writes it back in its own time)
    fsync: bool = True
    #: leave the finished shard in its temp file (``ShardResult.temp``) for the caller to fsync and rename
    #: (:func:`finish_shard`): a loky worker goes on to its next shard while the parent waits for the disk
    deferred: bool = False
    #: how media members are named (:mod:`.extnames`): ``keep`` the real format's extension, ``by-kind`` one per kind
    ext_policy: str = "keep"
    #: the storage options of a root that is a bucket URL (:mod:`.objsource`; None: a local folder). They may
    #: hold secrets: they travel to the workers with the job, never to a file
    storage_options: dict | None = field(default=None, repr=False)

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
    hashed: int = 0  # samples whose bytes were hashed here (the others' checksum came from the scan)
    temp: str | None = None  # with ``ShardJob.deferred``: the complete shard, not yet fsynced nor renamed
    exts: tuple[str, ...] = ()  # the media members' extensions in the shard (sorted, distinct)
