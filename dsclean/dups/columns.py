"""The columns dups compares, one entry per file or object, and the scan results they are taken from.

:class:`Inventory` holds them as column arrays (no Python object per file); :class:`Columns` builds it a
row at a time, flushed to arrays every ``BATCH`` rows. Shared by the local collection (:mod:`.collect`)
and a bucket prefix's (:mod:`.bucket`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, TypeVar

import numpy as np
import pyarrow as pa

from ..errors import UserError
from ..formats import IMAGE, format_of_name, kind_of
from ..hashing import DIGEST_SIZE
from .worker import KIND_CODES

BATCH = 65_536
T = TypeVar("T")

#: the row of a file that killed its worker (a crash, or --timeout)
DEAD_ROW = (
    None,
    None,
    -1,
    None,
    None,
    None,
    None,
    False,
    False,
    "checking this file killed its worker (crash or --timeout)",
)


@dataclass
class Inventory:
    """Column arrays, one entry per file; ``roots[root[i]]`` and ``path[i]`` name file i."""

    roots: list[str]
    root: np.ndarray  # int32 index into roots
    path: pa.Array  # binary: exact name bytes relative to the root
    size: np.ndarray  # int64
    mtime_ns: np.ndarray  # int64
    kind: np.ndarray  # int8: 0 image, 1 audio, -1 not media / unknown
    pixels: np.ndarray  # int64 width * height, -1 unknown
    content_hash: np.ndarray  # (N, 16) uint8
    has_hash: np.ndarray  # bool
    phash: np.ndarray  # uint64
    has_phash: np.ndarray  # bool
    low_information: np.ndarray  # bool
    dev: np.ndarray | None = None  # uint64 st_dev, with ino: which file on disk (0, 0: unknown)
    ino: np.ndarray | None = None  # uint64 st_ino
    unstable: np.ndarray | None = None  # bool: a texture, whose perceptual hash is unstable (quality.texture)
    alias_of: np.ndarray | None = None  # int64: an earlier file (root, path order) that is the same file, or -1
    etag: pa.Array | None = None  # string: an object's ETag as listed (null for local files)
    stores: list = field(default_factory=list)  # per root: its Store (dsclean.storage.fs) if a URL, else None
    excluded_bad: int = 0  # marked bad by the scan: not compared
    from_results: int = 0  # facts taken from scan results
    computed: int = 0  # facts computed here
    failed: list[str] = field(default_factory=list)  # files that could not be read / killed a worker
    undecodable: int = 0  # hashed but not decoded (no perceptual hash)
    results_files: list[list[str]] = field(default_factory=list)  # per root: the results files read
    results_sources: list[str] = field(default_factory=list)  # per root: where they came from (find_scan)
    same_file: list[str] = field(default_factory=list)  # "B/x is the same file as A/x": names not compared

    def __len__(self) -> int:
        return len(self.root)

    def rel(self, i: int) -> bytes:
        return self.path[i].as_py()


class Columns:
    """Rows appended one at a time, flushed to numpy arrays every BATCH rows."""

    NAMES = (
        "root",
        "path",
        "size",
        "mtime_ns",
        "kind",
        "pixels",
        "content_hash",
        "has_hash",
        "phash",
        "has_phash",
        "low_information",
        "unstable",
        "dev",
        "ino",
        "etag",
    )

    def __init__(self) -> None:
        self.parts: dict[str, list] = {n: [] for n in self.NAMES}
        self.rows: dict[str, list] = {n: [] for n in self.NAMES}

    def add(
        self,
        root: int,
        path: bytes,
        size,
        mtime,
        kind,
        width,
        height,
        chash,
        phash,
        low,
        shaky: bool = False,
        file_id: tuple[int, int] | None = None,
        etag: str | None = None,
    ) -> None:
        r = self.rows
        r["root"].append(root)
        r["path"].append(path)
        r["size"].append(-1 if size is None else size)
        r["mtime_ns"].append(-1 if mtime is None else mtime)
        r["kind"].append(kind)
        r["pixels"].append(width * height if width and height else -1)
        r["content_hash"].append(chash if chash else bytes(DIGEST_SIZE))
        r["has_hash"].append(chash is not None)
        r["phash"].append(0 if phash is None else phash)
        r["has_phash"].append(phash is not None)
        r["low_information"].append(bool(low))
        r["unstable"].append(bool(shaky))
        r["dev"].append(file_id[0] if file_id else 0)
        r["ino"].append(file_id[1] if file_id else 0)
        r["etag"].append(etag)
        if len(r["root"]) >= BATCH:
            self.flush()

    def flush(self) -> None:
        r = self.rows
        if not r["root"]:
            return
        p = self.parts
        p["root"].append(np.array(r["root"], np.int32))
        p["path"].append(pa.array(r["path"], pa.binary()))
        p["etag"].append(pa.array(r["etag"], pa.string()))
        for name, typ in (
            ("size", np.int64),
            ("mtime_ns", np.int64),
            ("kind", np.int8),
            ("pixels", np.int64),
            ("has_hash", bool),
            ("has_phash", bool),
            ("low_information", bool),
            ("unstable", bool),
        ):
            p[name].append(np.array(r[name], typ))
        p["content_hash"].append(np.frombuffer(b"".join(r["content_hash"]), np.uint8).reshape(-1, DIGEST_SIZE))
        for name in ("phash", "dev", "ino"):
            p[name].append(np.array(r[name], np.uint64))
        self.rows = {n: [] for n in self.NAMES}

    def inventory(self, roots: list[str]) -> Inventory:
        self.flush()
        p = self.parts
        if not p["root"]:
            empty = {
                n: np.zeros(0, t)
                for n, t in (
                    ("root", np.int32),
                    ("size", np.int64),
                    ("mtime_ns", np.int64),
                    ("kind", np.int8),
                    ("pixels", np.int64),
                    ("has_hash", bool),
                    ("phash", np.uint64),
                    ("has_phash", bool),
                    ("low_information", bool),
                    ("unstable", bool),
                    ("dev", np.uint64),
                    ("ino", np.uint64),
                )
            }
            return Inventory(
                roots=roots,
                path=pa.array([], pa.binary()),
                etag=pa.array([], pa.string()),
                content_hash=np.zeros((0, DIGEST_SIZE), np.uint8),
                **empty,
            )
        cols = {n: np.concatenate(p[n]) for n in self.NAMES if n not in ("path", "etag")}
        path, etag = (pa.concat_arrays(p[n]) if len(p[n]) > 1 else p[n][0] for n in ("path", "etag"))
        return Inventory(roots=roots, path=path, etag=etag, **cols)


RESULT_COLUMNS = (
    "path",
    "status",
    "size",
    "mtime_ns",
    "width",
    "height",
    "content_hash",
    "phash",
    "flags",
    "sharpness",
    "contrast",
)


def read_results(paths: list[str]) -> pa.Table | None:
    """The useful columns of a scan's results files (one, or every part of a job array), as one table.

    Any subset of the fact columns may be missing; a column only some parts have is null in the others.
    """
    import pyarrow.parquet as pq

    tables = []
    for path in paths:
        try:
            names = pq.read_schema(path).names
            if "path" not in names or "status" not in names:
                raise UserError(f"{path}: not a dsclean scan results file (no path/status columns)")
            tables.append(pq.read_table(path, columns=[c for c in RESULT_COLUMNS if c in names]))
        except (pa.ArrowException, OSError) as exc:
            raise UserError(f"{path}: cannot read scan results ({exc})") from exc
    table = pa.concat_tables(tables, promote_options="default").combine_chunks()
    return table if table.num_rows else None


def with_facts(results_path: str) -> bool:
    """Whether the scan that wrote these results recorded facts (``scan --facts none`` records none, not even
    the content hash: every file of such a root is hashed here)."""
    from ..scanning.cache import options_from_key
    from ..scanning.results import read_results_meta

    try:
        return options_from_key(read_results_meta(results_path).get("options")).facts
    except (pa.ArrowException, OSError, ValueError):
        return True  # unreadable metadata: the rows themselves say which facts are there


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size``."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def take(it: Iterator[T], n: int) -> Iterator[T]:
    """The next ``n`` items of ``it`` (fewer at its end)."""
    for _ in range(n):
        nxt = next(it, None)
        if nxt is None:
            return
        yield nxt


def is_image(rel: str) -> bool:
    fmt = format_of_name(rel)
    return fmt is not None and kind_of(fmt) == IMAGE


def add_results_row(
    cols: Columns,
    root: int,
    path: bytes,
    size: int,
    mtime: int,
    kind: int,
    py: dict,
    i: int,
    image: bool,
    file_id: tuple[int, int] | None = None,
    etag: str | None = None,
) -> bool:
    """Add row ``i`` of a scan's results (``py``: its columns as lists) as the facts of one file or object, for
    local and bucket roots alike; False, adding nothing, when the row lacks a fact dups needs (a content hash;
    a perceptual hash, for an image that is not low-information)."""
    from ..quality import flags as F
    from ..quality.texture import is_unstable

    low = F.LOW_INFORMATION in (py["flags"][i] or [])
    if py["content_hash"][i] is None or (py["phash"][i] is None and image and not low):
        return False
    shaky = image and is_unstable(py["sharpness"][i], py["contrast"][i])
    cols.add(
        root,
        path,
        size,
        mtime,
        kind,
        py["width"][i],
        py["height"][i],
        py["content_hash"][i],
        py["phash"][i],
        low,
        shaky,
        file_id,
        etag,
    )
    return True


def add_facts_row(
    cols: Columns,
    stats: dict,
    root: int,
    path: bytes,
    row: tuple,
    file_id: tuple[int, int] | None = None,
    etag: str | None = None,
) -> str | None:
    """Add the facts a worker computed for one file or object (``row``: a :data:`.worker.Row`, or
    :data:`DEAD_ROW`), for local and bucket roots alike, counted in ``stats``; the error, adding nothing, when
    the worker could not hash it."""
    size, mtime, kind, w, h, chash, phash, low, shaky, error = row
    if chash is None:
        return str(error)
    stats["computed"] += 1
    if kind == KIND_CODES[IMAGE] and phash is None:
        stats["undecodable"] += 1
    cols.add(root, path, size, mtime, kind, w, h, chash, phash, low, shaky, file_id, etag)
    return None
