"""The walk of an index build: the tree's media files as record batches of compact columns, and its fingerprint.

:func:`walk` streams :func:`dsclean.scanning.discover.iter_media` into batches of at most
``CHUNK_ROWS`` rows (no Python list of all paths), with each file's class label, kind (from
its extension, or its magic bytes when nothing will check it) and stat; what cannot be indexed
(unreadable, not a regular file, without a class) is counted in the summary. The tree's
fingerprint (:func:`tree_fingerprint`) is how :func:`dsclean.index.folder.index_folder` tells
an up-to-date index.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import sys
from typing import Iterable, Iterator

import pyarrow as pa

from .. import formats
from ..scanning.discover import DiscoverStats, iter_media
from .labels import sort_key
from .store import KIND_CODE
from .summary import IndexSummary

#: rows per record batch while streaming the build (bounded memory)
CHUNK_ROWS = 65_536


#: the columns of the walk's batches (``key``: the path's sort key, :func:`dsclean.index.labels.sort_key`)
WALK_SCHEMA = pa.schema(
    [
        ("path", pa.binary()),
        ("key", pa.binary()),
        ("label", pa.int64()),
        ("kind", pa.int8()),
        ("size", pa.int64()),
        ("mtime_ns", pa.int64()),
    ]
)


def walk(
    root: str,
    exclude: Iterable[str],
    classes: list[str],
    *,
    sniff_all: bool,
    summary: IndexSummary,
    progress: bool,
    prints: Fingerprint,
) -> Iterator[pa.RecordBatch]:
    """Stream discovery into record batches of compact columns; Python lists never exceed a chunk.

    Also adds every discovered media file's path, size and mtime to ``prints`` (the tree's
    fingerprint), so :func:`dsclean.index.folder.index_folder` can tell an up-to-date index.
    """
    class_to_idx = {c: i for i, c in enumerate(classes)}
    folder_labels = summary.labels == "folder"
    stats = summary.discovery
    cols: dict[str, list] = {name: [] for name in WALK_SCHEMA.names}
    seen = 0
    for rel, fmt in discover(root, exclude, summary.files, summary.symlinks, stats):
        seen += 1
        if progress and seen % 100_000 == 0:
            print(f"\rindexing: {seen} files", end="", file=sys.stderr, flush=True)
        full = os.path.join(root, rel)
        try:
            st = os.stat(full)
        except OSError:
            prints.add(rel, -1, -1)
            summary.unreadable += 1
            continue
        prints.add(rel, st.st_size, st.st_mtime_ns)
        if not stat.S_ISREG(st.st_mode):  # a FIFO/socket/device named like media: never opened (could block)
            summary.not_regular += 1
            continue
        label = -1
        if folder_labels:
            cls, sep, _ = rel.partition("/")
            if not sep or cls not in class_to_idx:
                summary.unlabeled += 1
                continue
            label = class_to_idx[cls]
        kind = KIND_CODE[formats.kind_of(fmt)] if fmt else KIND_CODE[formats.IMAGE]
        if sniff_all:
            kind = sniff_kind(full, summary)
            if kind < 0:
                continue
        cols["path"].append(os.fsencode(rel))
        cols["key"].append(sort_key(rel))
        cols["label"].append(label)
        cols["kind"].append(kind)
        cols["size"].append(st.st_size)
        cols["mtime_ns"].append(st.st_mtime_ns)
        if len(cols["path"]) >= CHUNK_ROWS:
            yield pa.RecordBatch.from_pydict(cols, schema=WALK_SCHEMA)
            cols = {name: [] for name in WALK_SCHEMA.names}
    if cols["path"]:
        yield pa.RecordBatch.from_pydict(cols, schema=WALK_SCHEMA)
    if progress and seen >= 100_000:
        print(file=sys.stderr)
    summary.unreadable += stats.dir_errors


class Fingerprint:
    """An order-independent digest of a tree's media files: count and sum of per-file hashes (mod 2**64)."""

    def __init__(self) -> None:
        self.files, self.total = 0, 0

    def add(self, rel: str, size: int, mtime_ns: int) -> None:
        h = hashlib.blake2b(os.fsencode(rel) + b"\0" + struct.pack("<qq", size, mtime_ns), digest_size=8)
        self.total = (self.total + int.from_bytes(h.digest(), "little")) & 0xFFFF_FFFF_FFFF_FFFF
        self.files += 1

    def to_json(self) -> dict:
        return {"files": self.files, "fingerprint": f"{self.total:016x}"}


def tree_fingerprint(root: str, files: str, symlinks: str, exclude: Iterable[str] = ()) -> dict:
    """The fingerprint :func:`dsclean.index.build.build_index` records for ``root`` under this file rule (a stat per file)."""
    prints = Fingerprint()
    for rel, _ in discover(root, exclude, files, symlinks, DiscoverStats()):
        try:
            st = os.stat(os.path.join(root, rel))
            prints.add(rel, st.st_size, st.st_mtime_ns)
        except OSError:
            prints.add(rel, -1, -1)
    return prints.to_json()


def sniff_kind(full: str, summary: IndexSummary) -> int:
    """Kind code from the first bytes of the file, or -1 (counted) if it is not media or unreadable."""
    try:
        with open(full, "rb") as f:
            head = f.read(formats.SNIFF_BYTES)
    except OSError:
        summary.unreadable += 1
        return -1
    real = formats.sniff(head)
    if real is None:
        summary.not_media += 1
        return -1
    return KIND_CODE[formats.kind_of(real)]


def extensions(files: str) -> tuple[str, ...]:
    """The file extensions an index of this rule takes (``IndexedDataset.extensions``)."""
    return formats.IMAGEFOLDER_EXTENSIONS if files == "imagefolder" else tuple(sorted(formats.MEDIA_EXTENSIONS))


def discover(root: str, exclude: Iterable[str], files: str, symlinks: str, stats: DiscoverStats):
    """The media files an index of this file rule takes: ``(rel, format)`` from :func:`iter_media`."""
    imagefolder = files == "imagefolder"
    return iter_media(
        root,
        exclude=exclude,
        include_hidden=imagefolder,
        symlinks=symlinks,
        stats=stats,
        extensions=frozenset(formats.IMAGEFOLDER_EXTENSIONS) if imagefolder else None,
    )
