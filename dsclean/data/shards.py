"""Reading samples out of a packed shard set (``dsclean pack``), for :class:`IndexedDataset`.

A packed set is a folder with ``shardindex.json`` (wids' shard list), the
packed index ``index.arrow`` (a dsclean index with ``shard``, ``offset`` and
``checksum`` columns) and the tar shards. Everything is found relative to the
folder, so moving it changes nothing.

Per process, :class:`PackedSet` maps the index (numpy views, no per-sample
Python object) and ``mmap``s shards on demand, keeping at most ``max_open``
maps (least recently used closed first). A sample's bytes are sliced out of
its shard's map; then the pages around that range are dropped from this
process's page tables (``MADV_DONTNEED``: they stay in the shared page cache),
so reading a whole epoch does not grow a worker's resident memory (measured in
scripts/bench_pack.py, with the cost: ~30 us per sample to map the pages again).

Never imports torch (``dsclean.pack`` and ``dsclean verify`` share the names here).
"""
from __future__ import annotations

import json
import mmap
import os
from collections import OrderedDict

import pyarrow as pa

from .. import denylist, locations
from ..errors import UserError
from ..hashing import DIGEST_SIZE
from ..index.store import MappedIndex, open_index

#: the packed index's columns beyond a plain index's
SHARD_COLUMNS = {"shard": pa.int32(), "offset": pa.int64(), "checksum": pa.binary(DIGEST_SIZE)}
#: shard maps a process keeps open at most (each holds one file descriptor)
DEFAULT_MAX_OPEN = 16
#: A read fault maps more than the page it touched: "fault-around" pages and, with large
#: page-cache folios, the whole folio (measured: ~1 MiB mapped for a 300-byte read). Folios and
#: fault-around never cross a 2 MiB (PMD) boundary, so dropping the 2 MiB-aligned window around
#: a sample unmaps everything its read mapped.
_DROP_WINDOW = 2 << 20
#: advice given for a sample's pages once its bytes are copied out (None: keep them mapped;
#: scripts/bench_pack.py measures both)
MADV_AFTER_READ: int | None = mmap.MADV_DONTNEED


def release(mm: mmap.mmap, start: int, end: int) -> None:
    """Unmap the pages around ``[start, end)`` from this process (they stay in the page cache).

    Widened to the 2 MiB windows a read of that range may have mapped, so a process that
    reads a shard through a map keeps a flat resident size. No-op when MADV_AFTER_READ is None.
    """
    if MADV_AFTER_READ is None or end <= start:
        return
    lo = start - start % _DROP_WINDOW
    hi = min(len(mm), end + (-end % _DROP_WINDOW))
    mm.madvise(MADV_AFTER_READ, lo, hi - lo)


def is_packed_set(path: str) -> bool:
    """A folder holding ``shardindex.json`` and the packed ``index.arrow``."""
    return os.path.isdir(path) and all(os.path.isfile(os.path.join(path, n))
                                       for n in (locations.SHARD_LIST_FILE, locations.PACKED_INDEX_FILE))


def refuse_unfinished_pack(folder: str) -> None:
    """A :class:`UserError` for a shard folder whose pack has not finished (its ``pack.json`` is there,
    its shard list or packed index not yet: a pack killed before publishing), so every command that takes
    a shard set (verify, info, probe, IndexedDataset) says the same thing. Nothing for any other path."""
    if not os.path.isdir(folder) or not os.path.isfile(os.path.join(folder, locations.PACK_STATE_FILE)) \
            or is_packed_set(folder):
        return
    missing = [n for n in (locations.SHARD_LIST_FILE, locations.PACKED_INDEX_FILE)
               if not os.path.isfile(os.path.join(folder, n))]
    raise UserError(f"{folder}: an unfinished pack (no {' or '.join(missing)} yet): run the same dsclean pack "
                    "command again to finish it")


def packed_index(folder: str) -> str:
    return os.path.join(folder, locations.PACKED_INDEX_FILE)


def read_shard_list(folder: str) -> list[dict]:
    """The ``shardlist`` entries of ``shardindex.json`` (``url``, ``nsamples``, ``filesize``), checked."""
    path = os.path.join(folder, locations.SHARD_LIST_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable shard list ({exc})") from exc
    shards = data.get("shardlist") if isinstance(data, dict) else None
    if not isinstance(shards, list):
        raise UserError(f"{path}: not a wids shard index (no shardlist)")
    for i, s in enumerate(shards):
        url = s.get("url") if isinstance(s, dict) else None
        if not isinstance(url, str) or not url or "/" in url or url.startswith("."):
            raise UserError(f"{path}: shard {i} has url {url!r}; a packed set names its shards by file name "
                            "relative to the folder")
        if not isinstance(s.get("nsamples"), int) or not isinstance(s.get("filesize"), int):
            raise UserError(f"{path}: shard {i} ({url}) has no integer nsamples/filesize")
    return shards


def open_packed_index(folder: str) -> MappedIndex:
    """The packed index with its shard columns mapped; refuses a plain index in its place."""
    idx = open_index(packed_index(folder), extra=SHARD_COLUMNS)
    if not idx.meta.get("packed"):
        raise UserError(f"{packed_index(folder)}: not a packed index (no 'packed' metadata)")
    return idx


class PackedSet:
    """Process-local reader of one packed set: the mapped index and a bounded set of shard maps."""

    def __init__(self, folder: str, max_open: int = DEFAULT_MAX_OPEN) -> None:
        self.folder = folder
        self.idx = open_packed_index(folder)
        self.shards = read_shard_list(folder)
        self.shard_of = self.idx.extra["shard"]
        self.offset_of = self.idx.extra["offset"]
        self.max_open = max(1, max_open)
        self._maps: OrderedDict[int, mmap.mmap] = OrderedDict()
        # samples on the deny-list beside the shards (dsclean quarantine --from-log): refused on read
        self.denied = denylist.denied_rows(folder, [s["url"] for s in self.shards], self.shard_of, self.idx.path_bytes)

    def shard_path(self, shard: int) -> str:
        if not 0 <= shard < len(self.shards):
            raise ValueError(f"the packed index names shard {shard}; the shard list has {len(self.shards)}")
        return os.path.join(self.folder, self.shards[shard]["url"])

    def read(self, j: int) -> bytes:
        """The original bytes of sample ``j``; a sample on the deny-list is refused (ValueError)."""
        if self.denied is not None and self.denied[j]:
            raise ValueError(f"sample {j} is on the deny-list {denylist.denylist_path(self.folder)}: not read")
        shard, offset, size = int(self.shard_of[j]), int(self.offset_of[j]), int(self.idx.sizes[j])
        mm = self._map(shard)
        if offset < 0 or offset + size > len(mm):
            raise ValueError(f"sample bytes {offset}..{offset + size} lie outside {self.shard_path(shard)} "
                             f"({len(mm)} bytes): the packed index does not match the shard")
        data = mm[offset:offset + size]
        if size:
            release(mm, offset, offset + size)
        return data

    def _map(self, shard: int) -> mmap.mmap:
        mm = self._maps.get(shard)
        if mm is not None:
            self._maps.move_to_end(shard)
            return mm
        path = self.shard_path(shard)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            want = self.shards[shard]["filesize"]
            if size != want:
                raise ValueError(f"{path} is {size} bytes, the shard list recorded {want}: the shard changed")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        while len(self._maps) >= self.max_open:
            self._maps.popitem(last=False)[1].close()
        self._maps[shard] = mm
        return mm

    @property
    def open_maps(self) -> int:
        return len(self._maps)

    def close(self) -> None:
        while self._maps:
            self._maps.popitem()[1].close()
