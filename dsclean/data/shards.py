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
import tarfile
from collections import OrderedDict

import numpy as np
import pyarrow as pa

from .. import denylist, locations
from ..errors import UserError
from ..hashing import DIGEST_SIZE
from ..index.store import MappedIndex, open_index
from ..openfile import NotRegularFile, open_regular_file

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
    return os.path.isdir(path) and all(
        os.path.isfile(os.path.join(path, n)) for n in (locations.SHARD_LIST_FILE, locations.PACKED_INDEX_FILE)
    )


def refuse_unfinished_pack(folder: str) -> None:
    """A :class:`UserError` for a shard folder whose pack has not finished (its ``pack.json`` is there,
    its shard list or packed index not yet: a pack killed before publishing), so every command that takes
    a shard set (verify, info, probe, IndexedDataset) says the same thing. Nothing for any other path."""
    if (
        not os.path.isdir(folder)
        or not os.path.isfile(os.path.join(folder, locations.PACK_STATE_FILE))
        or is_packed_set(folder)
    ):
        return
    missing = [
        n
        for n in (locations.SHARD_LIST_FILE, locations.PACKED_INDEX_FILE)
        if not os.path.isfile(os.path.join(folder, n))
    ]
    raise UserError(
        f"{folder}: an unfinished pack (no {' or '.join(missing)} yet): run the same dsclean pack "
        "command again to finish it"
    )


def packed_index(folder: str) -> str:
    return os.path.join(folder, locations.PACKED_INDEX_FILE)


def read_shard_list(folder: str) -> list[dict]:
    """The ``shardlist`` entries of ``shardindex.json`` (``url``, ``nsamples``, ``filesize``), checked."""
    path = os.path.join(folder, locations.SHARD_LIST_FILE)
    try:
        with open_regular_file(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable shard list ({exc})") from exc
    shards = data.get("shardlist") if isinstance(data, dict) else None
    if not isinstance(shards, list):
        raise UserError(f"{path}: not a wids shard index (no shardlist)")
    for i, s in enumerate(shards):
        url = s.get("url") if isinstance(s, dict) else None
        if not isinstance(url, str) or not url or "/" in url or url.startswith("."):
            raise UserError(
                f"{path}: shard {i} has url {url!r}; a packed set names its shards by file name relative to the folder"
            )
        if not isinstance(s.get("nsamples"), int) or not isinstance(s.get("filesize"), int):
            raise UserError(f"{path}: shard {i} ({url}) has no integer nsamples/filesize")
    return shards


def open_packed_index(folder: str) -> MappedIndex:
    """The packed index with its shard columns mapped; refuses a plain index in its place."""
    idx = open_index(packed_index(folder), extra=SHARD_COLUMNS)
    if not idx.meta.get("packed"):
        raise UserError(f"{packed_index(folder)}: not a packed index (no 'packed' metadata)")
    return idx


#: (realpath of the packed index, its identity, the shard list's sizes) this process checked (see check_layout)
_LAID_OUT: dict[str, tuple] = {}
#: rows checked per step (bounded temporaries)
_LAYOUT_ROWS = 1 << 20
_BLOCK = tarfile.BLOCKSIZE


def check_layout(idx: MappedIndex, shards: list[dict]) -> None:
    """Refuse a packed index whose rows cannot be the members of its shards, vectorised (numpy over the
    shard, offset and size columns, in bounded steps): a UserError naming the first bad row and its shard.

    A row's shard is in the shard list and the shard column never decreases; a row's bytes start on a
    tar block after a header (offset a multiple of 512, at least 512) and end inside the shard's file;
    within a shard, each row starts after the previous row's bytes, their padding and a header: rows
    never overlap nor go back (a row copying another's offset and size would serve that sample's bytes
    under its own path and label). This is a check of the index against itself and the shard list; the
    bytes themselves are ``dsclean verify``'s (measured: scripts/bench_shards_open.py)."""
    path = idx.path
    n, count = len(idx), len(shards)
    filesize = np.array([s["filesize"] for s in shards] + [0], np.int64)
    name = [u["url"] for u in shards]
    shard_col, offset_col, size_col = idx.extra["shard"], idx.extra["offset"], idx.sizes
    for start in range(0, n, _LAYOUT_ROWS):
        lo, hi = max(start - 1, 0), min(start + _LAYOUT_ROWS, n)  # (one row of overlap: pairs across steps)
        s = np.asarray(shard_col[lo:hi], np.int64)
        o = np.asarray(offset_col[lo:hi], np.int64)
        z = np.asarray(size_col[lo:hi], np.int64)
        bad = (s < 0) | (s >= count)
        if bad.any():
            row = lo + int(np.argmax(bad))
            _bad_layout(path, row, f"it names shard {int(shard_col[row])}; the shard list has {count}")
        ends = o + z
        bad = (o < _BLOCK) | ((o & (_BLOCK - 1)) != 0) | (ends > filesize[s])  # (& not %: 5x faster)
        if bad.any():
            i = int(np.argmax(bad))
            _bad_layout(
                path,
                lo + i,
                f"its bytes {int(o[i])}..{int(o[i] + z[i])} are not a member's data in "
                f"{name[s[i]]} ({int(filesize[s[i]])} bytes)",
            )
        if len(s) < 2:
            continue
        back = s[1:] < s[:-1]
        if back.any():
            i = int(np.argmax(back)) + 1
            _bad_layout(
                path,
                lo + i,
                f"its shard {name[s[i]]} comes before the previous row's {name[s[i - 1]]}: rows are in shard order",
            )
        ends += _BLOCK - 1 + _BLOCK  # the earliest the next member's data can start: padding, then a header
        ends &= ~(_BLOCK - 1)
        overlap = (o[1:] < ends[:-1]) & (s[1:] == s[:-1])
        if overlap.any():
            i = int(np.argmax(overlap)) + 1
            what = "the same bytes as" if o[i] == o[i - 1] else "bytes that overlap or come before those of"
            _bad_layout(
                path,
                lo + i,
                f"in {name[s[i]]}, its bytes {int(o[i])}..{int(o[i] + z[i])} are {what} "
                f"row {lo + i - 1:,} ({int(o[i - 1])}..{int(o[i - 1] + z[i - 1])})",
            )


def _bad_layout(path: str, row: int, what: str) -> None:
    raise UserError(
        f"{path}: corrupt packed index at row {row:,}: {what}; the index does not describe its "
        "shards (dsclean verify says more)"
    )


class PackedSet:
    """Process-local reader of one packed set: the mapped index and a bounded set of shard maps."""

    def __init__(self, folder: str, max_open: int = DEFAULT_MAX_OPEN) -> None:
        self.folder = folder
        self.idx = open_packed_index(folder)
        self.shards = read_shard_list(folder)
        checked = (self.idx.identity, tuple((s["url"], s["filesize"]) for s in self.shards))
        key = os.path.realpath(self.idx.path)
        if _LAID_OUT.get(key) != checked:  # once per process and file identity (forked workers inherit it)
            check_layout(self.idx, self.shards)
            _LAID_OUT[key] = checked
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
            raise ValueError(
                f"sample bytes {offset}..{offset + size} lie outside {self.shard_path(shard)} "
                f"({len(mm)} bytes): the packed index does not match the shard"
            )
        data = mm[offset : offset + size]
        if size:
            release(mm, offset, offset + size)
        return data

    def _map(self, shard: int) -> mmap.mmap:
        mm = self._maps.get(shard)
        if mm is not None:
            self._maps.move_to_end(shard)
            return mm
        path = self.shard_path(shard)
        try:
            f = open_regular_file(path)
        except NotRegularFile as exc:
            raise ValueError(f"{path}: {exc.strerror}: a shard must be a regular file") from None
        with f:
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
