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
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import locations, reasons
from ..errors import UserError
from ..scanning.discover import DiscoverStats, iter_media
from ..scanning.verdict import encode_path
from ..storage.urls import is_url
from .bucket import check_distinct_urls, collect_bucket, open_store
from .columns import (
    BATCH,
    DEAD_ROW,
    RESULT_COLUMNS,
    Columns,
    Inventory,
    add_facts_row,
    add_results_row,
    chunks,
    is_image,
    read_results,
    take,
    with_facts,
)
from .pool import run_chunks
from .worker import KIND_CODES, Limits, facts_chunk

CHUNK = 32  # files per worker task


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
    storage_options: dict | None = None,
    manifest: str | None = None,
) -> Inventory:
    """Facts of every media file under ``roots`` (paths as given), from scan results or computed. A root that
    is a storage URL (``s3://BUCKET/PREFIX``, opened with ``storage_options``) is a bucket prefix: its objects,
    named by key relative to it (:func:`dsclean.dups.bucket.collect_bucket`)."""
    stores = [open_store(r, storage_options or {}, limits.read_policy) if is_url(r) else None for r in roots]
    local = [r for r, s in zip(roots, stores) if s is None]
    abs_local = [validate_root(r) for r in local]
    check_distinct(local, abs_local)
    check_distinct_urls([r for r, s in zip(roots, stores) if s is not None])
    absolute = dict(zip(local, abs_local))
    cols = Columns()
    stats = {"bad": 0, "from_results": 0, "computed": 0, "undecodable": 0}
    failed: list[str] = []
    results_files, sources = [], []
    for index, (given, store) in enumerate(zip(roots, stores)):
        if store is not None:
            paths, source = collect_bucket(
                index,
                given,
                store,
                cols,
                stats,
                failed,
                limits=limits,
                workers=workers,
                use_results=use_results,
                state_dir=state_dir,
                progress=progress,
                manifest=manifest,
            )
            results_files.append(paths)
            sources.append(source)
            continue
        root = absolute[given]
        paths, source = [], "not used (--no-results)"
        if use_results:
            found = locations.find_scan(root, state_dir=state_dir)
            paths, source = found.paths, found.source
            if found.partial is not None:  # the facts of the parts that ran; the others' files are computed here
                source += ": the files of the missing parts are hashed and decoded here (nothing is left out)"
        results_files.append(paths)
        results = read_results(paths) if paths else None
        if results is not None and found.prefix:  # a scanned parent's results: this root's rows, paths made relative
            results = locations.subtree_rows(results, found.prefix)
        if results is not None and not with_facts(paths[0]):
            source += " (scanned with --facts none: no hashes to reuse, every file is hashed here)"
        sources.append(source)
        todo = _from_results(index, root, results, cols, stats, exclude)
        for rels, rows in run_chunks(facts_chunk, root, chunks(todo, CHUNK), limits, workers, lambda rel: DEAD_ROW):
            for rel, row in zip(rels, rows):
                error = add_facts_row(cols, stats, index, encode_path(rel), row, _file_id(root, rel))
                if error is not None:
                    failed.append(f"{os.path.join(given, rel)}: {error}")
                    continue
                if progress:
                    progress(1)
    inv = cols.inventory(list(roots))
    inv.excluded_bad, inv.from_results, inv.computed = stats["bad"], stats["from_results"], stats["computed"]
    inv.undecodable, inv.failed, inv.results_files = stats["undecodable"], failed, results_files
    inv.results_sources = sources
    inv.stores = stores
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


def _from_results(
    index: int, root: str, results: pa.Table | None, cols: Columns, stats: dict, exclude: tuple[str, ...]
) -> Iterator[str]:
    """Add the files whose facts the results hold; yield the relative paths that need computing."""
    media = iter_media(root, exclude=exclude, stats=DiscoverStats())
    while True:
        batch = [rel for rel, _ in take(media, BATCH)]
        if not batch:
            return
        if results is None:
            yield from batch
            continue
        yield from _match_batch(index, root, batch, results, cols, stats)


def _match_batch(
    index: int, root: str, batch: list[str], results: pa.Table, cols: Columns, stats: dict
) -> Iterator[str]:
    """One batch: rows of the results aligned with the batch by one hash lookup, then a stat per file."""
    encoded = [encode_path(rel) for rel in batch]
    where = pc.index_in(pa.array(encoded, pa.binary()), value_set=results.column("path").chunk(0))
    found = where.is_valid().to_pylist()
    rows = results.take(pc.fill_null(where, 0))
    py = {
        n: rows.column(n).to_pylist() if n in rows.column_names else [None] * len(batch)
        for n in RESULT_COLUMNS
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
        image = is_image(rel)
        unchanged = py["size"][i] == st.st_size and py["mtime_ns"][i] == st.st_mtime_ns
        kind = KIND_CODES["image" if image else "audio"]
        if not unchanged or not add_results_row(
            cols, index, raw, st.st_size, st.st_mtime_ns, kind, py, i, image, (st.st_dev, st.st_ino)
        ):
            yield rel
            continue
        stats["from_results"] += 1
