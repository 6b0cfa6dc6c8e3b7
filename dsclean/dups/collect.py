"""Gather, for every media file under the roots, what dups compares: content hash and perceptual hash.

Per root: the last scan's results (:func:`dsclean.locations.find_scan`, every part of
a job array, or the parts that ran of one whose other parts never did) give the facts of files unchanged since (same size and mtime); files the scan
marked bad are left out; everything else (new or changed files, results
without fact columns, a root never scanned) is computed in worker processes
(:mod:`dsclean.dups.worker`). Rows are kept as column arrays (no object per file),
built in batches of ``BATCH`` files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import locations, reasons
from ..errors import UserError
from ..formats import IMAGE, format_of_name, kind_of
from ..hashing import DIGEST_SIZE
from ..quality import flags as F
from ..quality.texture import is_unstable
from ..scanning.discover import DiscoverStats, iter_media
from ..scanning.verdict import encode_path
from .pool import run_chunks
from .worker import KIND_CODES, Limits, facts_chunk

BATCH = 65_536
CHUNK = 32  # files per worker task

_DEAD = (
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


class _Columns:
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
        if len(r["root"]) >= BATCH:
            self.flush()

    def flush(self) -> None:
        r = self.rows
        if not r["root"]:
            return
        p = self.parts
        p["root"].append(np.array(r["root"], np.int32))
        p["path"].append(pa.array(r["path"], pa.binary()))
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
                roots=roots, path=pa.array([], pa.binary()), content_hash=np.zeros((0, DIGEST_SIZE), np.uint8), **empty
            )
        cols = {n: np.concatenate(p[n]) for n in self.NAMES if n != "path"}
        path = pa.concat_arrays(p["path"]) if len(p["path"]) > 1 else p["path"][0]
        return Inventory(roots=roots, path=path, **cols)


def validate_root(root: str) -> str:
    if not os.path.isdir(root):
        raise UserError(f"{root}: no such folder" if not os.path.exists(root) else f"{root}: not a folder")
    if not os.access(root, os.R_OK | os.X_OK):
        raise UserError(f"{root}: cannot be listed: permission denied")
    return os.path.abspath(root)


def check_outside_roots(path: str, roots: list[str], what: str) -> None:
    """Refuse ``path`` (an output or the quarantine) inside any root: dsclean never writes into a dataset, and a
    new folder there would become a class of its own for ImageFolder (:func:`dsclean.locations.is_inside`)."""
    for root in roots:
        if os.path.isdir(root) and locations.is_inside(path, root):
            raise UserError(
                f"{what} {path} is inside the dataset {root}; dsclean never writes into a dataset: "
                "put it somewhere else"
            )


def check_distinct(roots: list[str], abs_roots: list[str]) -> None:
    """Refuse a folder given twice, or a root inside another: its files would be their own duplicates (and
    ``--drop-from`` would move every one). Folders are compared by (st_dev, st_ino) along each root's
    ancestors (:func:`dsclean.locations.is_inside`), so a bind mount or one NFS export mounted twice is
    recognised as well as a symlink."""
    ids: dict[tuple[int, int], str] = {}
    for given, real in zip(roots, abs_roots):
        key = locations.folder_id(real)
        if key in ids:
            raise UserError(f"{given} and {ids[key]} are the same folder; give each root once")
        ids[key] = given
    for i, (given, real) in enumerate(zip(roots, abs_roots)):
        for j, (other, other_real) in enumerate(zip(roots, abs_roots)):
            if i != j and locations.is_inside(real, other_real):
                raise UserError(f"{given} is inside {other}; give roots that do not nest (each root is one split)")


def collect(
    roots: list[str],
    *,
    limits: Limits = Limits(),
    workers: int = 1,
    exclude: tuple[str, ...] = (),
    use_results: bool = True,
    progress=None,
    state_dir: str | None = None,
) -> Inventory:
    """Facts of every media file under ``roots`` (paths as given), from scan results or computed."""
    abs_roots = [validate_root(r) for r in roots]
    check_distinct(roots, abs_roots)
    cols = _Columns()
    stats = {"bad": 0, "from_results": 0, "computed": 0, "undecodable": 0}
    failed: list[str] = []
    results_files, sources = [], []
    for index, (given, root) in enumerate(zip(roots, abs_roots)):
        paths, source = [], "not used (--no-results)"
        if use_results:
            found = locations.find_scan(root, state_dir=state_dir)
            paths, source = found.paths, found.source
            if found.partial is not None:  # the facts of the parts that ran; the others' files are computed here
                source += ": the files of the missing parts are hashed and decoded here (nothing is left out)"
        results_files.append(paths)
        results = _read_results(paths) if paths else None
        if results is not None and found.prefix:  # a scanned parent's results: this root's rows, paths made relative
            results = locations.subtree_rows(results, found.prefix)
        if results is not None and not _with_facts(paths[0]):
            source += " (scanned with --facts none: no hashes to reuse, every file is hashed here)"
        sources.append(source)
        todo = _from_results(index, root, results, cols, stats, exclude)
        for rels, rows in run_chunks(facts_chunk, root, _chunks(todo, CHUNK), limits, workers, lambda rel: _DEAD):
            for rel, row in zip(rels, rows):
                size, mtime, kind, w, h, chash, phash, low, shaky, error = row
                if chash is None:
                    failed.append(f"{os.path.join(given, rel)}: {error}")
                    continue
                stats["computed"] += 1
                if kind == KIND_CODES["image"] and phash is None:
                    stats["undecodable"] += 1
                cols.add(
                    index, encode_path(rel), size, mtime, kind, w, h, chash, phash, low, shaky, _file_id(root, rel)
                )
                if progress:
                    progress(1)
    inv = cols.inventory(list(roots))
    inv.excluded_bad, inv.from_results, inv.computed = stats["bad"], stats["from_results"], stats["computed"]
    inv.undecodable, inv.failed, inv.results_files = stats["undecodable"], failed, results_files
    inv.results_sources = sources
    mark_same_files(inv)
    return inv


def path_rank(inv: Inventory) -> np.ndarray:
    """Each file's position in (root as given, path bytes) order."""
    order = pc.sort_indices(
        pa.table({"root": inv.root, "path": inv.path}), sort_keys=[("root", "ascending"), ("path", "ascending")]
    ).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def _file_id(root: str, rel: str) -> tuple[int, int] | None:
    try:
        st = os.stat(os.path.join(root, rel))
    except OSError:
        return None
    return st.st_dev, st.st_ino


def mark_same_files(inv: Inventory) -> None:
    """Set ``inv.alias_of``: names of one file on disk (hard links, a file seen through two mounts or a
    symlink) are one file, not copies of each other. Each later name (in (root, path) order) points at the
    first; grouping leaves it out, so ``--drop-from`` can never move one name as the copy of the other."""
    n = len(inv)
    inv.alias_of = np.full(n, -1, dtype=np.int64)
    if n < 2 or inv.dev is None:
        return
    known = np.flatnonzero((inv.dev != 0) | (inv.ino != 0))
    rank = path_rank(inv)
    order = known[np.lexsort((rank[known], inv.ino[known], inv.dev[known]))]
    same = (inv.dev[order][1:] == inv.dev[order][:-1]) & (inv.ino[order][1:] == inv.ino[order][:-1])
    first = order[0] if len(order) else -1
    for k in range(1, len(order)):
        if same[k - 1]:
            inv.alias_of[order[k]] = first
            inv.same_file.append(
                f"{os.path.join(inv.roots[inv.root[order[k]]], os.fsdecode(inv.rel(order[k])))} "
                f"is the same file as {os.path.join(inv.roots[inv.root[first]], os.fsdecode(inv.rel(first)))}"
                " (a hard link, or one file seen through two mounts): not compared as a copy"
            )
        else:
            first = order[k]


_RESULT_COLUMNS = (
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


def _read_results(paths: list[str]) -> pa.Table | None:
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
            tables.append(pq.read_table(path, columns=[c for c in _RESULT_COLUMNS if c in names]))
        except (pa.ArrowException, OSError) as exc:
            raise UserError(f"{path}: cannot read scan results ({exc})") from exc
    table = pa.concat_tables(tables, promote_options="default").combine_chunks()
    return table if table.num_rows else None


def _with_facts(results_path: str) -> bool:
    """Whether the scan that wrote these results recorded facts (``scan --facts none`` records none, not even
    the content hash: every file of such a root is hashed here)."""
    from ..scanning.cache import options_from_key
    from ..scanning.results import read_results_meta

    try:
        return options_from_key(read_results_meta(results_path).get("options")).facts
    except (pa.ArrowException, OSError, ValueError):
        return True  # unreadable metadata: the rows themselves say which facts are there


def _chunks(items: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _from_results(
    index: int, root: str, results: pa.Table | None, cols: _Columns, stats: dict, exclude: tuple[str, ...]
) -> Iterator[str]:
    """Add the files whose facts the results hold; yield the relative paths that need computing."""
    media = iter_media(root, exclude=exclude, stats=DiscoverStats())
    while True:
        batch = [rel for rel, _ in _take(media, BATCH)]
        if not batch:
            return
        if results is None:
            yield from batch
            continue
        yield from _match_batch(index, root, batch, results, cols, stats)


def _take(it, n):
    for _ in range(n):
        nxt = next(it, None)
        if nxt is None:
            return
        yield nxt


def _match_batch(
    index: int, root: str, batch: list[str], results: pa.Table, cols: _Columns, stats: dict
) -> Iterator[str]:
    """One batch: rows of the results aligned with the batch by one hash lookup, then a stat per file."""
    encoded = [encode_path(rel) for rel in batch]
    where = pc.index_in(pa.array(encoded, pa.binary()), value_set=results.column("path").chunk(0))
    found = where.is_valid().to_pylist()
    rows = results.take(pc.fill_null(where, 0))
    py = {
        n: rows.column(n).to_pylist() if n in rows.column_names else [None] * len(batch)
        for n in _RESULT_COLUMNS
        if n != "path"
    }
    for i, (rel, raw) in enumerate(zip(batch, encoded)):
        if not found[i]:
            yield rel
            continue
        if py["status"][i] == reasons.BAD:
            stats["bad"] += 1
            continue
        try:
            st = os.stat(os.path.join(root, rel))
        except OSError:
            yield rel  # the worker reports it
            continue
        flags = py["flags"][i] or []
        image = _is_image(rel)
        usable = (
            py["size"][i] == st.st_size
            and py["mtime_ns"][i] == st.st_mtime_ns
            and py["content_hash"][i] is not None
            and (py["phash"][i] is not None or F.LOW_INFORMATION in flags or not image)
        )
        if not usable:
            yield rel
            continue
        stats["from_results"] += 1
        cols.add(
            index,
            raw,
            st.st_size,
            st.st_mtime_ns,
            KIND_CODES["image" if image else "audio"],
            py["width"][i],
            py["height"][i],
            py["content_hash"][i],
            py["phash"][i],
            F.LOW_INFORMATION in flags,
            image and is_unstable(py["sharpness"][i], py["contrast"][i]),
            (st.st_dev, st.st_ino),
        )


def _is_image(rel: str) -> bool:
    fmt = format_of_name(rel)
    return fmt is not None and kind_of(fmt) == IMAGE
