"""Stage 5: build a compact, memory-mapped index of the files that survived the scan.

The build streams :func:`dsclean.scanning.discover.iter_media` into Arrow record
batches of at most ``CHUNK_ROWS`` rows (no Python list of all paths), then
filters, joins and sorts with Arrow compute on the compact columns, and writes
through :func:`dsclean.atomic.atomic_output` (temp + rename). The format itself
is :mod:`dsclean.index.store`.

Labels and sample order (torchvision ``ImageFolder``'s, or a CSV) are in :mod:`dsclean.index.labels`.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import formats, locations, reasons
from ..atomic import atomic_output
from ..errors import UserError
from ..scanning.discover import DiscoverStats, iter_media
from .labels import apply_csv_labels, folder_classes, read_labels_csv, sort_key
from .store import (
    FACTS,
    KIND_CODE,
    LARGE_PATH_BYTES,
    NPY_META,
    disk_size,
    make_meta,
    one_chunk,
    resolve_format,
    write_arrow,
    write_npy,
)

logger = logging.getLogger("dsclean")

#: rows per record batch while streaming the build (bounded memory)
CHUNK_ROWS = 65_536
@dataclass
class IndexSummary:
    """What a build did: written rows and everything left out, with the reason."""

    output: str
    format: str
    rows: int = 0
    classes: int = 0
    labels: str = "folder"  # folder / csv / none
    excluded_bad: int = 0  # marked bad by the scan results
    not_media: int = 0  # magic bytes do not match any media format (only checked without a verdict)
    unreadable: int = 0  # could not be stat'ed or read while indexing
    unlabeled: int = 0  # no class: a file directly in the root (folder labels) or not in the CSV
    unscanned: int = 0  # not in the scan results: checked by magic bytes only
    changed_since_scan: int = 0  # size differs from the scan's: its facts were not copied
    duplicates: int = 0  # --dedup: exact duplicates left out (the first by path order kept)
    hashed: int = 0  # --dedup: files hashed here because the scan results had no current content_hash
    scan_results: str | None = None
    media_bytes: int = 0
    index_bytes: int = 0
    large_paths: bool = False
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- build


def build_index(
    root: str,
    output: str,
    *,
    format: str | None = None,
    labels_csv: str | None = None,
    no_labels: bool = False,
    scan_results: str | Sequence[str] | None = None,
    exclude: Iterable[str] = (),
    progress: bool = False,
    large_path_bytes: int | None = None,
    dedup: bool = False,
) -> IndexSummary:
    """Index the media files under ``root`` into ``output`` (Arrow file or npy folder).

    ``progress=True`` (the CLI) prints progress and notes to stderr; otherwise
    notes are logged on the ``dsclean`` logger. ``large_path_bytes`` overrides
    the 2 GiB threshold for 64-bit path offsets (for tests). ``dedup=True`` leaves
    out exact duplicates (same content hash), keeping the first in index order.
    """
    t0 = time.monotonic()
    fmt = resolve_format(output, format)
    _check_root(root)
    _check_output(output, fmt)
    if labels_csv is not None and no_labels:
        raise UserError("--labels and --no-labels cannot be used together: pick one way to label")
    mode = "csv" if labels_csv is not None else "none" if no_labels else "folder"
    summary = IndexSummary(output=output, format=fmt, labels=mode)
    csv_labels = read_labels_csv(labels_csv) if labels_csv is not None else None  # fail before the walk

    if isinstance(scan_results, str):
        scan_results = [scan_results]
    results_paths = list(scan_results or []) or [p for p in [locations.find_scan_results(root)] if p]
    results = _read_scan_results(results_paths) if results_paths else None
    summary.scan_results = ", ".join(results_paths) or None
    if results is None:
        _note(summary, f"no scan results found for {root}; indexing by extension/magic bytes only (no decoding)", progress)

    exclude = (*exclude, output)  # an npy index written inside the root is not a class folder
    classes = folder_classes(root, exclude) if mode == "folder" else []
    table = _walk(root, exclude, classes, sniff_all=results is None, summary=summary, progress=progress)
    if results is not None:
        table = _apply_results(root, table, results, summary)
    if csv_labels is not None:
        table, summary.unlabeled = apply_csv_labels(root, table, csv_labels)
        classes = csv_labels.classes
    threshold = LARGE_PATH_BYTES if large_path_bytes is None else large_path_bytes
    table = _sort_and_finalize(table, by_label=mode == "folder", threshold=threshold, summary=summary)
    if dedup:
        table = _drop_exact_duplicates(root, table, results_paths if results is not None else [], summary)
    summary.rows = table.num_rows
    summary.classes = len(classes)
    summary.media_bytes = int(pc.sum(table.column("size")).as_py() or 0)
    meta = make_meta(root, classes, mode, table.num_rows, summary.scan_results)
    writer = write_arrow if fmt == "arrow" else write_npy
    with atomic_output(output, directory=fmt == "npy") as tmp:
        writer(table, tmp, meta)
    summary.index_bytes = disk_size(output)
    summary.elapsed = round(time.monotonic() - t0, 3)
    if summary.unscanned and results is not None:
        _note(summary, f"{summary.unscanned} files are not in the scan results {summary.scan_results} "
              "(new since the scan?); they were checked by magic bytes only", progress)
    return summary


def _check_root(root: str) -> None:
    if not os.path.exists(root):
        raise UserError(f"{root}: no such folder")
    if not os.path.isdir(root):
        raise UserError(f"{root}: not a folder (dsclean index takes the dataset's root folder)")


def _check_output(output: str, fmt: str) -> None:
    """Refuse to replace something that is not an index of the same format."""
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UserError(f"{output}: the folder {parent} does not exist")
    if fmt == "arrow" and os.path.isdir(output):
        raise UserError(f"{output}: is a folder; an arrow index is a single file (use --format npy for a folder)")
    if fmt == "npy" and os.path.lexists(output):
        if not os.path.isdir(output):
            raise UserError(f"{output}: exists and is not a folder; an npy index is a folder")
        if os.listdir(output) and not os.path.isfile(os.path.join(output, NPY_META)):
            raise UserError(f"{output}: exists, is not empty and is not a dsclean npy index; "
                            "refusing to replace it")


def _note(summary: IndexSummary, message: str, progress: bool) -> None:
    summary.notes.append(message)
    if progress:
        print(f"note: {message}", file=sys.stderr)
    else:
        logger.warning(message)


_BUILD_SCHEMA = pa.schema(
    [
        ("path", pa.binary()),
        ("key", pa.binary()),
        ("label", pa.int64()),
        ("kind", pa.int8()),
        ("size", pa.int64()),
        ("mtime_ns", pa.int64()),
    ]
)


def _walk(root: str, exclude: Iterable[str], classes: list[str], *, sniff_all: bool,
          summary: IndexSummary, progress: bool) -> pa.Table:
    """Stream discovery into record batches of compact columns; Python lists never exceed a chunk."""
    class_to_idx = {c: i for i, c in enumerate(classes)}
    folder_labels = summary.labels == "folder"
    stats = DiscoverStats()
    batches: list[pa.RecordBatch] = []
    cols: dict[str, list] = {name: [] for name in _BUILD_SCHEMA.names}
    seen = 0
    for rel, fmt in iter_media(root, exclude=exclude, stats=stats):
        seen += 1
        if progress and seen % 100_000 == 0:
            print(f"\rindexing: {seen} files", end="", file=sys.stderr, flush=True)
        label = -1
        if folder_labels:
            cls, sep, _ = rel.partition("/")
            if not sep or cls not in class_to_idx:
                summary.unlabeled += 1
                continue
            label = class_to_idx[cls]
        full = os.path.join(root, rel)
        try:
            st = os.stat(full)
        except OSError:
            summary.unreadable += 1
            continue
        kind = KIND_CODE[formats.kind_of(fmt)]
        if sniff_all:
            kind = _sniff_kind(full, summary)
            if kind < 0:
                continue
        cols["path"].append(os.fsencode(rel))
        cols["key"].append(sort_key(rel))
        cols["label"].append(label)
        cols["kind"].append(kind)
        cols["size"].append(st.st_size)
        cols["mtime_ns"].append(st.st_mtime_ns)
        if len(cols["path"]) >= CHUNK_ROWS:
            batches.append(pa.RecordBatch.from_pydict(cols, schema=_BUILD_SCHEMA))
            cols = {name: [] for name in _BUILD_SCHEMA.names}
    if cols["path"] or not batches:
        batches.append(pa.RecordBatch.from_pydict(cols, schema=_BUILD_SCHEMA))
    if progress and seen >= 100_000:
        print(file=sys.stderr)
    summary.unreadable += stats.dir_errors
    return pa.Table.from_batches(batches, schema=_BUILD_SCHEMA)


def _sniff_kind(full: str, summary: IndexSummary) -> int:
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


def _read_scan_results(paths: list[str]) -> pa.Table:
    """One scan's results file, or the N part results of a job array (validated, see dsclean.scanning.merge)."""
    from ..scanning.merge import read_parts
    from ..scanning.results import read_results

    columns = ["path", "status", "size", *FACTS]
    for path in paths:
        if not os.path.exists(path):
            raise UserError(f"{path}: scan results not found")
    try:
        if len(paths) > 1:
            return read_parts(paths).select(columns)
        return read_results(paths[0], columns=columns)
    except (pa.ArrowException, OSError, KeyError) as exc:
        raise UserError(f"{', '.join(paths)}: cannot read scan results ({exc})") from exc


def _apply_results(root: str, table: pa.Table, results: pa.Table, summary: IndexSummary) -> pa.Table:
    """Drop files the scan marked bad and copy its facts, with one vectorized lookup.

    ``index_in`` hashes the results' path column once; no Python set of paths.
    Files missing from the results are checked by magic bytes, like a build without results.
    """
    where = pc.index_in(table.column("path"), value_set=one_chunk(results.column("path")))
    status = results.column("status").take(where)
    bad = pc.fill_null(pc.equal(status, reasons.BAD), False)
    summary.excluded_bad = int(pc.sum(bad).as_py() or 0)
    same_size = pc.fill_null(pc.equal(results.column("size").take(where), table.column("size")), True)
    for name, typ in FACTS.items():
        values = results.column(name).take(where).cast(typ)
        values = pc.if_else(same_size, values, pa.scalar(None, typ))
        table = table.append_column(pa.field(name, typ), values)
    scanned = pc.is_valid(where)
    summary.changed_since_scan = int(pc.sum(pc.and_(scanned, pc.invert(same_size))).as_py() or 0)
    keep = pc.invert(bad)
    unscanned = pc.invert(scanned).to_numpy(zero_copy_only=False)
    summary.unscanned = int(unscanned.sum())
    if summary.unscanned:
        keep, kinds = _sniff_rows(root, table, unscanned, keep, summary)
        table = table.set_column(table.schema.get_field_index("kind"), "kind", kinds)
    return table.filter(keep)


def _sniff_rows(root: str, table: pa.Table, rows: np.ndarray, keep: pa.ChunkedArray,
                summary: IndexSummary) -> tuple[pa.Array, pa.Array]:
    """Magic-byte check of the rows flagged in ``rows``; returns the updated keep mask and kinds."""
    keep_np = keep.to_numpy(zero_copy_only=False).copy()
    kinds = table.column("kind").to_numpy().copy()
    positions = np.flatnonzero(rows)
    paths = table.column("path").filter(pa.array(rows))
    done = 0
    for chunk in paths.chunks:
        for start in range(0, len(chunk), CHUNK_ROWS):  # only one slice becomes Python objects at a time
            for raw in chunk.slice(start, CHUNK_ROWS).to_pylist():
                code = _sniff_kind(os.path.join(root, os.fsdecode(raw)), summary)
                pos = positions[done]
                done += 1
                if code < 0:
                    keep_np[pos] = False
                else:
                    kinds[pos] = code
    return pa.array(keep_np), pa.array(kinds, pa.int8())


def _sort_and_finalize(table: pa.Table, *, by_label: bool, threshold: int, summary: IndexSummary) -> pa.Table:
    """Switch to 64-bit path offsets if needed (before take() concatenates the column), sort, finalize."""
    path_bytes = int(pc.sum(pc.binary_length(table.column("path"))).as_py() or 0)
    summary.large_paths = path_bytes > threshold
    if summary.large_paths:
        table = table.set_column(0, "path", table.column("path").cast(pa.large_binary()))
    return _finalize(_sort(table, by_label=by_label), large=summary.large_paths)


def _sort(table: pa.Table, *, by_label: bool) -> pa.Table:
    """ImageFolder order with Arrow's sort on the compact key column, then drop the key."""
    keys = [("label", "ascending"), ("key", "ascending")] if by_label else [("key", "ascending")]
    order = pc.sort_indices(table, sort_keys=keys)
    return table.drop_columns(["key"]).take(order)


_INDEX_COLUMNS = ["path", "label", "kind", "size", "mtime_ns", *FACTS]


def _finalize(table: pa.Table, *, large: bool) -> pa.Table:
    """Index schema, one chunk per column (so it becomes ONE record batch)."""
    for name, typ in FACTS.items():
        if name not in table.column_names:
            table = table.append_column(pa.field(name, typ), pa.nulls(table.num_rows, typ))
    path_type = pa.large_binary() if large else pa.binary()
    table = table.set_column(0, pa.field("path", path_type, nullable=False), table.column("path").cast(path_type))
    schema = pa.schema([pa.field("path", path_type, nullable=False),
                        pa.field("label", pa.int64(), nullable=False),
                        pa.field("kind", pa.int8(), nullable=False),
                        pa.field("size", pa.int64(), nullable=False),
                        pa.field("mtime_ns", pa.int64(), nullable=False),
                        *(pa.field(n, t) for n, t in FACTS.items())])
    return table.select(_INDEX_COLUMNS).cast(schema).combine_chunks()




def _drop_exact_duplicates(root: str, table: pa.Table, results_paths: list[str], summary: IndexSummary) -> pa.Table:
    """Keep the first row (index order) of each content hash: from the scan results where current, else hashed here."""
    from ..hashing import DIGEST_SIZE, content_hash_file
    from ..scanning.results import read_results

    n = table.num_rows
    digests = np.zeros((n, DIGEST_SIZE), dtype=np.uint8)
    known = np.zeros(n, dtype=bool)
    for path in results_paths:
        try:
            res = read_results(path, columns=["path", "size", "content_hash"])
        except (KeyError, pa.ArrowInvalid):  # results written before content hashes were recorded
            continue
        where = pc.index_in(table.column("path").cast(pa.binary()), value_set=one_chunk(res.column("path")))
        hit = pc.and_(pc.is_valid(where), pc.fill_null(pc.equal(res.column("size").take(where), table.column("size")), False))
        hashes = res.column("content_hash").take(where).cast(pa.binary(DIGEST_SIZE)).combine_chunks()
        hit = pc.and_(hit, pc.is_valid(hashes)).to_numpy(zero_copy_only=False) & ~known
        if not hit.any():
            continue
        data = np.frombuffer(hashes.buffers()[1], np.uint8)[hashes.offset * DIGEST_SIZE:]
        digests[hit] = data[: n * DIGEST_SIZE].reshape(n, DIGEST_SIZE)[hit]
        known |= hit
    for i in np.flatnonzero(~known):
        rel = os.fsdecode(table.column("path")[int(i)].as_py())
        try:
            digests[i] = np.frombuffer(content_hash_file(os.path.join(root, rel)), np.uint8)
        except OSError:
            continue  # unreadable now: kept, it cannot be shown to be a copy
        summary.hashed += 1
        known[i] = True
    keys = np.ascontiguousarray(digests).view(np.dtype((np.void, DIGEST_SIZE))).ravel()
    _, first = np.unique(keys, return_index=True)
    keep = ~known
    keep[first] = True
    summary.duplicates = int(n - keep.sum())
    return table.filter(pa.array(keep)).combine_chunks() if summary.duplicates else table
