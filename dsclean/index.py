"""Stage 5: a compact, memory-mapped index of the files that survived the scan.

One row per file: ``path`` (exact file-name bytes relative to the root),
``label``, ``kind``, ``size`` and ``mtime_ns`` (to detect stale entries) and the
media facts the scan recorded. Two on-disk formats, both mappable with zero
copies so every DataLoader worker shares the same page-cache pages:

- ``arrow``: one uncompressed Arrow IPC *file* holding ONE record batch (a single
  chunk per column, so a path is two offset reads and a slice of the data buffer);
  metadata is JSON under the schema-metadata key ``dsclean``.
- ``npy``: a folder of ``.npy`` files (``paths.npy`` uint8 blob, ``offsets.npy``
  int64 with rows+1 entries, ``labels.npy``, ...) and ``meta.json``. Nullable
  facts are stored with ``-1`` for "unknown". Never pickled (``allow_pickle=False``).

The build streams :func:`dsclean.discover.iter_media` into Arrow record batches
of at most ``CHUNK_ROWS`` rows (no Python list of all paths), then filters,
joins and sorts with Arrow compute on the compact columns, and writes through
:func:`dsclean.atomic.atomic_output` (temp + rename).

Labels and sample order (torchvision ``ImageFolder``'s, or a CSV) are in :mod:`dsclean.labels`.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import formats, locations, reasons
from .atomic import atomic_output
from .discover import DiscoverStats, iter_media
from .errors import UserError
from .labels import apply_csv_labels, folder_classes, read_labels_csv, sort_key

logger = logging.getLogger("dsclean")

FORMAT_VERSION = 1
META_KEY = b"dsclean"
#: kind codes stored in the int8 ``kind`` column
KINDS: tuple[str, ...] = (formats.IMAGE, formats.AUDIO)
_KIND_CODE = {k: i for i, k in enumerate(KINDS)}
#: rows per record batch while streaming the build (bounded memory)
CHUNK_ROWS = 65_536
#: path bytes above which the Arrow path column needs 64-bit offsets (large_binary)
LARGE_PATH_BYTES = 2**31 - 1
#: media facts copied from the scan results: name -> Arrow type (as in results.SCHEMA)
FACTS: dict[str, pa.DataType] = {
    "width": pa.int32(),
    "height": pa.int32(),
    "sample_rate": pa.int32(),
    "frames": pa.int64(),
    "channels": pa.int32(),
}
NPY_META = "meta.json"
_ARROW_SUFFIXES = (".arrow", ".ipc", ".feather")
_NPY_SUFFIXES = (".npy", ".npyidx")


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
) -> IndexSummary:
    """Index the media files under ``root`` into ``output`` (Arrow file or npy folder).

    ``progress=True`` (the CLI) prints progress and notes to stderr; otherwise
    notes are logged on the ``dsclean`` logger. ``large_path_bytes`` overrides
    the 2 GiB threshold for 64-bit path offsets (for tests).
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
    summary.rows = table.num_rows
    summary.classes = len(classes)
    summary.media_bytes = int(pc.sum(table.column("size")).as_py() or 0)
    meta = _make_meta(root, classes, mode, table.num_rows, summary.scan_results)
    writer = _write_arrow if fmt == "arrow" else _write_npy
    with atomic_output(output, directory=fmt == "npy") as tmp:
        writer(table, tmp, meta)
    summary.index_bytes = _disk_size(output)
    summary.elapsed = round(time.monotonic() - t0, 3)
    if summary.unscanned and results is not None:
        _note(summary, f"{summary.unscanned} files are not in the scan results {summary.scan_results} "
              "(new since the scan?); they were checked by magic bytes only", progress)
    return summary


def resolve_format(output: str, fmt: str | None) -> str:
    """The index format: ``fmt`` if given (checked against the name), else from the output name."""
    if fmt is not None and fmt not in ("arrow", "npy"):
        raise UserError(f"unknown index format {fmt!r}: use arrow or npy")
    name = output.rstrip("/\\").lower()
    by_name = "arrow" if name.endswith(_ARROW_SUFFIXES) else "npy" if name.endswith(_NPY_SUFFIXES) else None
    if by_name is None and os.path.isdir(output):
        by_name = "npy"
    if fmt is not None and by_name is not None and fmt != by_name:
        raise UserError(f"{output}: the name says an {by_name} index but --format {fmt} was given; "
                        "rename the output or drop --format")
    return fmt or by_name or "arrow"


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
        kind = _KIND_CODE[formats.kind_of(fmt)]
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
    return _KIND_CODE[formats.kind_of(real)]


def _read_scan_results(paths: list[str]) -> pa.Table:
    """One scan's results file, or the N shard results of a job array (validated, see dsclean.merge)."""
    from .merge import read_shards
    from .results import read_results

    columns = ["path", "status", "size", *FACTS]
    for path in paths:
        if not os.path.exists(path):
            raise UserError(f"{path}: scan results not found")
    try:
        if len(paths) > 1:
            return read_shards(paths).select(columns)
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


def _make_meta(root: str, classes: list[str], mode: str, rows: int, results: str | None) -> dict:
    from . import __version__

    return {
        "format_version": FORMAT_VERSION,
        "dsclean_version": __version__,
        "classes": classes,
        "kinds": list(KINDS),
        "labels": mode,
        "root": os.path.abspath(root),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "rows": rows,
        "scan_results": results,
    }


def _write_arrow(table: pa.Table, tmp: str, meta: dict) -> None:
    """Uncompressed IPC file, one record batch: it maps with zero copies."""
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode("ascii")})
    batches = table.to_batches()
    batch = batches[0] if len(batches) == 1 else pa.RecordBatch.from_pylist([], schema=table.schema)
    options = pa.ipc.IpcWriteOptions(compression=None)
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_batch(batch)


def _write_npy(table: pa.Table, tmp: str, meta: dict) -> None:
    """``.npy`` per column (pickle-free) plus ``meta.json``; nulls become -1."""
    offsets, data = binary_buffers(table.column("path").chunk(0) if table.num_rows else pa.array([], pa.binary()))
    offsets = offsets.astype(np.int64)
    _save(tmp, "paths", data[offsets[0]:offsets[-1]])
    _save(tmp, "offsets", offsets - offsets[0])
    _save(tmp, "labels", _np_col(table, "label", np.int64))
    _save(tmp, "kinds", _np_col(table, "kind", np.int8))
    _save(tmp, "sizes", _np_col(table, "size", np.int64))
    _save(tmp, "mtimes", _np_col(table, "mtime_ns", np.int64))
    for name, typ in FACTS.items():
        _save(tmp, name, _np_col(table, name, typ.to_pandas_dtype()))
    with open(os.path.join(tmp, NPY_META), "w", encoding="ascii") as f:
        json.dump(meta, f, indent=1)


def _np_col(table: pa.Table, name: str, dtype) -> np.ndarray:
    col = pc.fill_null(table.column(name), -1)
    return col.to_numpy().astype(dtype, copy=False)


def _save(folder: str, name: str, arr: np.ndarray) -> None:
    np.save(os.path.join(folder, f"{name}.npy"), np.ascontiguousarray(arr), allow_pickle=False)


def _disk_size(path: str) -> int:
    if os.path.isdir(path):
        return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
    return os.path.getsize(path)


# --------------------------------------------------------------------------- read


def one_chunk(col: pa.ChunkedArray) -> pa.Array:
    """A binary column as one array (large_binary when its bytes overflow 32-bit offsets)."""
    try:
        return col.combine_chunks()
    except pa.ArrowInvalid:  # offset overflow: more than 2 GiB of bytes
        return col.cast(pa.large_binary()).combine_chunks()


def binary_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, data)`` of a binary/large_binary array as numpy views (zero copy).

    ``offsets`` has ``len(arr) + 1`` entries (the array's own slice offset applied);
    row ``i`` is ``data[offsets[i]:offsets[i + 1]]``.
    """
    if arr.null_count:
        raise ValueError("path column has nulls")
    _, off_buf, data_buf = arr.buffers()
    dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    if off_buf is None:
        offsets = np.zeros(1, dtype)
    else:
        offsets = np.frombuffer(off_buf, dtype)[arr.offset: arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return offsets, data


@dataclass
class MappedIndex:
    """The columns a Dataset needs, as read-only numpy views over a memory mapping.

    ``owner`` holds the Arrow table / memmaps so the mapping stays alive.
    """

    path: str
    format: str
    meta: dict
    offsets: np.ndarray
    data: np.ndarray
    labels: np.ndarray
    kinds: np.ndarray
    sizes: np.ndarray
    mtimes: np.ndarray
    owner: object = None

    def __len__(self) -> int:
        return len(self.labels)

    def path_bytes(self, i: int) -> bytes:
        return self.data[self.offsets[i]: self.offsets[i + 1]].tobytes()


def index_format(path: str) -> str:
    return "npy" if os.path.isdir(path) else "arrow"


def read_meta(path: str) -> dict:
    """The index's metadata only (no column is read)."""
    if not os.path.exists(path):
        raise UserError(f"{path}: index not found")
    if index_format(path) == "npy":
        return _npy_meta(path)
    try:
        with pa.memory_map(path, "r") as source:
            schema = pa.ipc.open_file(source).schema
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"{path}: not a readable Arrow index ({exc}); rebuild it with dsclean index") from exc
    return _parse_meta(path, schema.metadata)


def _parse_meta(path: str, metadata: dict | None) -> dict:
    raw = (metadata or {}).get(META_KEY)
    if raw is None:
        raise UserError(f"{path}: not a dsclean index (no dsclean metadata)")
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        raise UserError(f"{path}: corrupt dsclean metadata ({exc})") from exc
    return _check_meta(path, meta)


def _check_meta(path: str, meta) -> dict:
    if not isinstance(meta, dict) or not isinstance(meta.get("format_version"), int):
        raise UserError(f"{path}: corrupt dsclean metadata (no format_version)")
    if meta["format_version"] > FORMAT_VERSION:
        raise UserError(f"{path}: index format {meta['format_version']} is newer than this dsclean "
                        f"understands ({FORMAT_VERSION}); upgrade dsclean")
    for key in ("classes", "rows", "root"):
        if key not in meta:
            raise UserError(f"{path}: corrupt dsclean metadata (no {key})")
    return meta


def _npy_meta(path: str) -> dict:
    meta_path = os.path.join(path, NPY_META)
    try:
        with open(meta_path, encoding="ascii") as f:
            meta = json.load(f)
    except FileNotFoundError as exc:
        raise UserError(f"{path}: not a dsclean npy index (no {NPY_META})") from exc
    except (OSError, ValueError) as exc:
        raise UserError(f"{meta_path}: unreadable index metadata ({exc})") from exc
    return _check_meta(path, meta)


def open_index(path: str) -> MappedIndex:
    """Memory-map an index (Arrow file or npy folder); refuses what cannot be mapped zero-copy."""
    if not os.path.exists(path):
        raise UserError(f"{path}: index not found")
    return _open_npy(path) if index_format(path) == "npy" else _open_arrow(path)


def _open_arrow(path: str) -> MappedIndex:
    try:
        source = pa.memory_map(path, "r")
        reader = pa.ipc.open_file(source)
        meta = _parse_meta(path, reader.schema.metadata)
        if reader.num_record_batches != 1:
            raise UserError(f"{path}: the index holds {reader.num_record_batches} record batches, "
                            "not one; rebuild it with dsclean index")
        batch = reader.get_batch(0)
        source.seek(0)
        whole = source.read_buffer()  # zero-copy view of the mapping: its address range
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"{path}: not a readable Arrow index ({exc}); rebuild it with dsclean index") from exc
    _check_columns(path, batch)
    _check_mapped(path, batch, whole)
    try:
        offsets, data = binary_buffers(batch.column("path"))
    except ValueError as exc:
        raise UserError(f"{path}: corrupt index ({exc})") from exc
    cols = {n: _primitive_view(batch.column(n), dt)
            for n, dt in (("label", np.int64), ("kind", np.int8), ("size", np.int64), ("mtime_ns", np.int64))}
    return MappedIndex(path, "arrow", meta, offsets, data, cols["label"], cols["kind"], cols["size"],
                       cols["mtime_ns"], owner=(source, batch))


_REQUIRED = {"label": pa.int64(), "kind": pa.int8(), "size": pa.int64(), "mtime_ns": pa.int64()}


def _check_columns(path: str, batch: pa.RecordBatch) -> None:
    names = set(batch.schema.names)
    for name, typ in {"path": None, **_REQUIRED}.items():
        if name not in names:
            raise UserError(f"{path}: corrupt index (no {name} column); rebuild it with dsclean index")
        col = batch.column(name)
        ok = (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)) if typ is None else col.type == typ
        if not ok or col.null_count:
            raise UserError(f"{path}: corrupt index ({name} column is {col.type} with {col.null_count} nulls)")


def _check_mapped(path: str, batch: pa.RecordBatch, whole: pa.Buffer) -> None:
    """Buffers outside the mapping were decompressed into private memory: refuse."""
    lo, hi = whole.address, whole.address + whole.size
    for name in ("path", "label"):
        for buf in batch.column(name).buffers():
            if buf is not None and buf.size and not lo <= buf.address < hi:
                raise UserError(
                    f"{path}: the index is compressed, so every process would need its own decompressed "
                    "copy instead of sharing one memory mapping; rebuild it with dsclean index "
                    "(it writes an uncompressed file)")


def _primitive_view(arr: pa.Array, dtype) -> np.ndarray:
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(0, dtype)
    view = np.frombuffer(buf, dtype)[arr.offset: arr.offset + len(arr)]
    view.flags.writeable = False
    return view


def _load_npy(folder: str, name: str) -> np.ndarray:
    path = os.path.join(folder, f"{name}.npy")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable index column ({exc}); rebuild it with dsclean index") from exc


def _open_npy(path: str) -> MappedIndex:
    meta = _npy_meta(path)
    cols = {n: _load_npy(path, n) for n in ("paths", "offsets", "labels", "kinds", "sizes", "mtimes")}
    rows = len(cols["labels"])
    if len(cols["offsets"]) != rows + 1 or any(len(cols[n]) != rows for n in ("kinds", "sizes", "mtimes")):
        raise UserError(f"{path}: corrupt index (column lengths disagree); rebuild it with dsclean index")
    return MappedIndex(path, "npy", meta, cols["offsets"], cols["paths"], cols["labels"], cols["kinds"],
                       cols["sizes"], cols["mtimes"], owner=None)


def index_info(path: str) -> dict:
    """Rows, classes with counts, kinds, media bytes, index size and metadata, as a JSON-able dict."""
    idx = open_index(path)
    meta = idx.meta
    labels = np.asarray(idx.labels)
    classes = meta.get("classes", [])
    labelled = labels[labels >= 0]
    counts = np.bincount(labelled, minlength=len(classes)) if len(labelled) else np.zeros(len(classes), np.int64)
    kind_names = meta.get("kinds", list(KINDS))
    kind_counts = np.bincount(np.asarray(idx.kinds, dtype=np.int64), minlength=len(kind_names))
    return {
        "index": path,
        "format": idx.format,
        "rows": len(idx),
        "classes": [{"label": i, "name": name, "count": int(counts[i]) if i < len(counts) else 0}
                    for i, name in enumerate(classes)],
        "unlabeled": int((labels < 0).sum()),
        "kinds": {name: int(kind_counts[i]) for i, name in enumerate(kind_names)},
        "media_bytes": int(np.asarray(idx.sizes).sum()),
        "index_bytes": _disk_size(path),
        "large_paths": idx.offsets.dtype == np.int64 and idx.format == "arrow",
        "metadata": meta,
    }
