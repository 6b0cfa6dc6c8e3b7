"""The index's on-disk format: writing, mapping and describing an index.

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

Building an index is :mod:`dsclean.index.build`; reading one in a Dataset is
:class:`MappedIndex` via :func:`open_index`. Never imports torch.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import formats
from ..errors import UserError

FORMAT_VERSION = 1
META_KEY = b"dsclean"
#: kind codes stored in the int8 ``kind`` column
KINDS: tuple[str, ...] = (formats.IMAGE, formats.AUDIO)
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
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


def resolve_format(output: str, fmt: str | None) -> str:
    """The index format: ``fmt`` if given (checked against the name), else from the output name."""
    if fmt is not None and fmt not in ("arrow", "npy"):
        raise UserError(f"unknown index format {fmt!r}: use arrow or npy")
    name = output.rstrip("/\\").lower()
    by_name = "arrow" if name.endswith(_ARROW_SUFFIXES) else "npy" if name.endswith(_NPY_SUFFIXES) else None
    if by_name is None and os.path.isdir(output):
        by_name = "npy"
    ext = os.path.splitext(os.path.basename(output.rstrip("/\\")))[1]
    if by_name is None and fmt is None and ext:
        raise UserError(f"{output}: an index is NAME.arrow (one Arrow file) or NAME.npy (a folder of arrays), "
                        f"not {ext}; rename the output, or pass --format arrow|npy to keep this name")
    if fmt is not None and by_name is not None and fmt != by_name:
        raise UserError(f"{output}: the name says an {by_name} index but --format {fmt} was given; "
                        "rename the output or drop --format")
    return fmt or by_name or "arrow"


def make_meta(root: str, classes: list[str], mode: str, rows: int, results: str | None) -> dict:
    from .. import __version__

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


def write_arrow(table: pa.Table, tmp: str, meta: dict) -> None:
    """Uncompressed IPC file, one record batch: it maps with zero copies."""
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode("ascii")})
    batches = table.to_batches()
    batch = batches[0] if len(batches) == 1 else pa.RecordBatch.from_pylist([], schema=table.schema)
    options = pa.ipc.IpcWriteOptions(compression=None)
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_batch(batch)


def write_npy(table: pa.Table, tmp: str, meta: dict) -> None:
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


def disk_size(path: str) -> int:
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
    #: extra columns asked for by name (e.g. a packed index's shard/offset/checksum), as numpy views
    extra: dict = field(default_factory=dict)

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


def open_index(path: str, extra: dict[str, pa.DataType] | None = None) -> MappedIndex:
    """Memory-map an index (Arrow file or npy folder); refuses what cannot be mapped zero-copy.

    ``extra``: more columns to map (name -> Arrow type; Arrow files only), in ``MappedIndex.extra``.
    A ``fixed_size_binary(w)`` column maps as a ``(rows, w)`` uint8 array.
    """
    if not os.path.exists(path):
        raise UserError(f"{path}: index not found")
    if index_format(path) == "npy":
        if extra:
            raise UserError(f"{path}: an npy index has no {', '.join(extra)} column")
        return _open_npy(path)
    return _open_arrow(path, extra or {})


def _open_arrow(path: str, extra: dict[str, pa.DataType]) -> MappedIndex:
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
    more = {}
    for name, typ in extra.items():
        if name not in batch.schema.names or batch.column(name).type != typ or batch.column(name).null_count:
            raise UserError(f"{path}: corrupt index (no {name} column of type {typ} without nulls)")
        more[name] = _fixed_binary_view(batch.column(name)) if pa.types.is_fixed_size_binary(typ) else \
            _primitive_view(batch.column(name), typ.to_pandas_dtype())
    return MappedIndex(path, "arrow", meta, offsets, data, cols["label"], cols["kind"], cols["size"],
                       cols["mtime_ns"], owner=(source, batch), extra=more)


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


def _fixed_binary_view(arr: pa.Array) -> np.ndarray:
    width = arr.type.byte_width
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros((0, width), np.uint8)
    view = np.frombuffer(buf, np.uint8).reshape(-1, width)[arr.offset: arr.offset + len(arr)]
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


def read_table(path: str, rows: np.ndarray | None = None) -> pa.Table:
    """The index's columns (path, label, kind, size, mtime_ns and the facts) as an Arrow table.

    ``rows``: only these row positions, in this order (``take``); the whole index otherwise.
    Both formats (an npy index's ``-1`` facts come back as nulls). Zero-copy views until ``take``.
    """
    idx = open_index(path)
    if idx.format == "arrow":
        batch = idx.owner[1]
        table = pa.Table.from_batches([batch]).select(["path", "label", "kind", "size", "mtime_ns", *FACTS])
    else:
        offsets = np.asarray(idx.offsets, np.int64)
        paths = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(idx), [
            None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(idx.data))])
        cols = {"path": paths, "label": np.asarray(idx.labels), "kind": np.asarray(idx.kinds),
                "size": np.asarray(idx.sizes), "mtime_ns": np.asarray(idx.mtimes)}
        for name, typ in FACTS.items():
            values = np.asarray(_load_npy(path, name))
            cols[name] = pa.array(values, typ, mask=values < 0)
        table = pa.table(cols)
    if rows is not None:
        table = table.take(pa.array(rows, pa.int64()))
    if pa.types.is_large_binary(table.schema.field("path").type) and \
            int(pc.sum(pc.binary_length(table.column("path"))).as_py() or 0) <= LARGE_PATH_BYTES:
        table = table.set_column(0, "path", table.column("path").cast(pa.binary()))
    return table


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
        "index_bytes": disk_size(path),
        "large_paths": idx.offsets.dtype == np.int64 and idx.format == "arrow",
        "metadata": meta,
    }
