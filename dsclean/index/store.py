"""The index's on-disk format: writing, mapping and describing an index.

One row per file: ``path`` (exact file-name bytes relative to the root),
``label`` (int8/int16/int32: the narrowest that holds the class ids and -1),
``kind`` (int8), ``size`` (uint32 when every file is below 4 GiB, else int64) and
``mtime_ns`` (int64; size and mtime detect stale entries). With ``--facts`` the
scan's facts follow (``FACTS``: media facts, ``content_hash`` and the quality facts
of docs/reference/facts.md); without it there are none, so a row costs ~22 bytes beside its path.
Two on-disk formats, both mappable with zero copies so every DataLoader worker
shares the same page-cache pages:

- ``arrow``: one uncompressed Arrow IPC *file* holding ONE record batch (a single
  chunk per column, so a path is two offset reads and a slice of the data buffer);
  metadata is JSON under the schema-metadata key ``dsclean``.
- ``npy``: a folder of ``.npy`` files (``paths.npy`` uint8 blob, ``offsets.npy``
  int64 with rows+1 entries, ``labels.npy``, ...) and ``meta.json``. Nullable
  facts are stored with ``-1`` for "unknown". Never pickled (``allow_pickle=False``).

Building an index is :mod:`dsclean.index.build`; reading one in a Dataset is
:class:`MappedIndex` via :func:`open_index`, which validates the file once per
process and file identity (:func:`validate`): a hostile or damaged index is a
:class:`~dsclean.errors.UserError` naming the file and the first bad row, never a
raw numpy/Arrow error. Format 1 (int64 labels, always-present media facts) is still
read. Never imports torch.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import formats
from ..errors import UserError
from ..openfile import map_regular, open_regular, open_regular_file
from ..schema import FACT_NAMES, arrow_types
from ..schema import MEDIA_FACTS as MEDIA_FACT_NAMES

#: 2: narrow label/size types, facts only with --facts, validated at open; 1 is still read
FORMAT_VERSION = 2
#: the oldest format this dsclean reads
OLDEST_FORMAT = 1
META_KEY = b"dsclean"
#: kind codes stored in the int8 ``kind`` column
KINDS: tuple[str, ...] = (formats.IMAGE, formats.AUDIO)
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
#: path bytes above which the Arrow path column needs 64-bit offsets (large_binary)
LARGE_PATH_BYTES = 2**31 - 1
#: media facts copied from the scan results: name -> Arrow type (dsclean.schema.MEDIA_FACTS, typed as in results.SCHEMA)
MEDIA_FACTS: dict[str, pa.DataType] = arrow_types(MEDIA_FACT_NAMES)
#: the quality facts and the content hash of the facts schema (dsclean.schema.FACTS, docs/reference/facts.md)
#: (scan results columns; absent in older results)
SCAN_FACTS: dict[str, pa.DataType] = arrow_types(FACT_NAMES)
#: every column ``index --facts`` copies from the scan results (nullable: null = unknown)
FACTS: dict[str, pa.DataType] = {**MEDIA_FACTS, **SCAN_FACTS}
#: the label types, narrowest first (signed: -1 marks an unlabelled row)
LABEL_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
#: the size types: uint32 when every file is below 4 GiB, else int64
SIZE_TYPES = (pa.uint32(), pa.int64())
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
        raise UserError(
            f"{output}: an index is NAME.arrow (one Arrow file) or NAME.npy (a folder of arrays), "
            f"not {ext}; rename the output, or pass --format arrow|npy to keep this name"
        )
    if fmt is not None and by_name is not None and fmt != by_name:
        raise UserError(
            f"{output}: the name says an {by_name} index but --format {fmt} was given; "
            "rename the output or drop --format"
        )
    return fmt or by_name or "arrow"


def label_type(classes: int) -> pa.DataType:
    """The narrowest signed integer type holding ``-1 .. classes - 1``."""
    return next(t for t in LABEL_TYPES if classes <= 2 ** (t.bit_width - 1) - 1)


def size_type(max_size: int) -> pa.DataType:
    return pa.uint32() if max_size < 2**32 else pa.int64()


def index_schema(*, classes: int, max_size: int, large: bool, facts: bool) -> pa.Schema:
    """The schema of a new index: narrow label and size types; facts columns only when asked for."""
    path_type = pa.large_binary() if large else pa.binary()
    return pa.schema(
        [
            pa.field("path", path_type, nullable=False),
            pa.field("label", label_type(classes), nullable=False),
            pa.field("kind", pa.int8(), nullable=False),
            pa.field("size", size_type(max_size), nullable=False),
            pa.field("mtime_ns", pa.int64(), nullable=False),
            *(pa.field(n, t) for n, t in (FACTS.items() if facts else ())),
        ]
    )


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
    _save(tmp, "paths", data[offsets[0] : offsets[-1]])
    _save(tmp, "offsets", offsets - offsets[0])
    for name, column in _NPY_COLUMNS.items():
        _save(tmp, name, _np_col(table, column, table.schema.field(column).type.to_pandas_dtype()))
    for name, typ in MEDIA_FACTS.items():  # the numeric facts only (-1 = unknown); --facts needs arrow for the rest
        if name in table.column_names:
            _save(tmp, name, _np_col(table, name, typ.to_pandas_dtype()))
    with open(os.path.join(tmp, NPY_META), "w", encoding="ascii") as f:
        json.dump(meta, f, indent=1)


#: npy file name -> index column
_NPY_COLUMNS = {"labels": "label", "kinds": "kind", "sizes": "size", "mtimes": "mtime_ns"}


def _np_col(table: pa.Table, name: str, dtype) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        col = pc.fill_null(col, -1)
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
        offsets = np.frombuffer(off_buf, dtype)[arr.offset : arr.offset + len(arr) + 1]
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
    #: :func:`file_identity` of the validated file (set by :func:`open_index`)
    identity: tuple = ()

    def __len__(self) -> int:
        return len(self.labels)

    def path_bytes(self, i: int) -> bytes:
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()


def index_format(path: str) -> str:
    return "npy" if os.path.isdir(path) else "arrow"


def read_meta(path: str) -> dict:
    """The index's metadata only (no column is read)."""
    if not os.path.exists(path):
        raise UserError(f"{path}: index not found")
    if index_format(path) == "npy":
        return _npy_meta(path)
    try:
        with _arrow_source(path) as source:
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
    version = meta["format_version"]
    if version > FORMAT_VERSION:
        raise UserError(
            f"{path}: index format {version} is newer than this dsclean understands ({FORMAT_VERSION}); upgrade dsclean"
        )
    if version < OLDEST_FORMAT:
        raise UserError(
            f"{path}: index format {version} is older than this dsclean reads "
            f"({OLDEST_FORMAT}..{FORMAT_VERSION}); rebuild it with dsclean index"
        )
    for key in ("classes", "rows", "root"):
        if key not in meta:
            raise UserError(f"{path}: corrupt dsclean metadata (no {key})")
    if not isinstance(meta["classes"], list) or not all(isinstance(c, str) for c in meta["classes"]):
        raise UserError(f"{path}: corrupt dsclean metadata (classes is not a list of names)")
    if not isinstance(meta["rows"], int) or isinstance(meta["rows"], bool) or meta["rows"] < 0:
        raise UserError(f"{path}: corrupt dsclean metadata (rows is {meta['rows']!r})")
    if not isinstance(meta["root"], str):
        raise UserError(f"{path}: corrupt dsclean metadata (root is not a path)")
    return meta


def _npy_meta(path: str) -> dict:
    meta_path = os.path.join(path, NPY_META)
    try:
        with open_regular_file(meta_path, "r", encoding="ascii") as f:
            meta = json.load(f)
    except FileNotFoundError as exc:
        raise UserError(f"{path}: not a dsclean npy index (no {NPY_META})") from exc
    except (OSError, ValueError) as exc:
        raise UserError(f"{meta_path}: unreadable index metadata ({exc})") from exc
    return _check_meta(path, meta)


def open_index(path: str, extra: dict[str, pa.DataType] | None = None, *, trusted: tuple | None = None) -> MappedIndex:
    """Memory-map an index (Arrow file or npy folder) and validate it; refuses what cannot be mapped zero-copy.

    ``extra``: more columns to map (name -> Arrow type; Arrow files only), in ``MappedIndex.extra``.
    A ``fixed_size_binary(w)`` column maps as a ``(rows, w)`` uint8 array.
    Validation (:func:`validate`) runs once per process and file identity
    (:func:`file_identity`); ``trusted``: an identity another process validated
    (``IndexedDataset`` passes it to its workers), skipped when the file still has it.
    """
    if not os.path.exists(path):
        raise UserError(f"{path}: index not found")
    if index_format(path) == "npy":
        if extra:
            raise UserError(f"{path}: an npy index has no {', '.join(extra)} column")
        idx = _open_npy(path)
    else:
        idx = _open_arrow(path, extra or {})
    identity = file_identity(path)
    key = os.path.realpath(path)
    if identity not in (trusted, _VALIDATED.get(key)):
        validate(idx)
        _VALIDATED[key] = identity
    idx.identity = identity
    return idx


#: realpath -> file identity of the indexes this process validated (inherited by forked workers)
_VALIDATED: dict[str, tuple] = {}
#: rows validated per step (bounds the temporary arrays: ~8 MB each)
_VALIDATE_ROWS = 1 << 20


def file_identity(path: str) -> tuple:
    """(dev, inode, size, mtime_ns) of the index file, or of each file of an npy folder: changes when it is rewritten."""
    if os.path.isdir(path):
        files = sorted(e.path for e in os.scandir(path) if e.is_file())
    else:
        files = [path]
    out = []
    for f in files:
        st = os.stat(f)
        out.append((os.path.basename(f), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def validate(idx: MappedIndex) -> None:
    """Refuse a damaged or hostile index, vectorised (~0.1 s per 10M rows): a UserError naming the first bad row.

    Every column has ``meta["rows"]`` rows; path offsets start at 0 (or inside the
    data), never decrease and end inside the data; labels lie in ``[0, len(classes))``
    (``-1`` only when the metadata says the index is unlabelled); kinds are known;
    sizes are not negative.
    """
    path, meta, rows = idx.path, idx.meta, idx.meta["rows"]
    cols = {"label": idx.labels, "kind": idx.kinds, "size": idx.sizes, "mtime_ns": idx.mtimes, **idx.extra}
    lengths = {name: len(col) for name, col in cols.items()}
    lengths["path offsets"] = len(idx.offsets) - 1
    for name, n in lengths.items():
        if n != rows:
            raise UserError(
                f"{path}: corrupt index: the metadata says {rows:,} rows but the {name} column has "
                f"{max(n, 0):,}; rebuild it with dsclean index"
            )
    classes = len(meta["classes"])
    low = -1 if meta.get("labels") == "none" else 0
    kinds = len(meta.get("kinds", KINDS))
    if kinds > len(KINDS) or list(meta.get("kinds", KINDS)) != list(KINDS[:kinds]):
        raise UserError(f"{path}: corrupt index: unknown kinds {meta.get('kinds')!r} in its metadata")
    data_len = len(idx.data)
    if rows and not 0 <= int(idx.offsets[0]) <= data_len:
        _bad_row(path, 0, f"its path starts at byte {int(idx.offsets[0])}, outside the {data_len:,} path bytes")
    for start in range(0, rows, _VALIDATE_ROWS):
        stop = min(start + _VALIDATE_ROWS, rows)
        off = idx.offsets[start : stop + 1]
        steps = np.diff(off)
        bad = np.flatnonzero(steps < 0)
        if len(bad):
            _bad_row(path, start + int(bad[0]), "its path offsets decrease")
        if int(off[-1]) > data_len:
            row = start + int(np.argmax(off[1:] > data_len))
            _bad_row(
                path, row, f"its path ends at byte {int(idx.offsets[row + 1]):,}, past the {data_len:,} path bytes"
            )
        _range(
            path,
            idx.labels[start:stop],
            start,
            low,
            classes - 1,
            f"label outside 0..{classes - 1} (the {classes} classes)" + (" or -1" if low < 0 else ""),
        )
        _range(path, idx.kinds[start:stop], start, 0, kinds - 1, f"unknown kind (known: {', '.join(KINDS)})")
        if idx.sizes.dtype.kind == "i":
            _range(path, idx.sizes[start:stop], start, 0, np.iinfo(np.int64).max, "negative size")


def _range(path: str, values: np.ndarray, start: int, low: int, high: int, what: str) -> None:
    if len(values) and (values.min() < low or values.max() > high):
        row = int(np.flatnonzero((values < low) | (values > high))[0])
        _bad_row(path, start + row, f"{what}: {int(values[row])}")


def _bad_row(path: str, row: int, what: str) -> None:
    raise UserError(f"{path}: corrupt index at row {row:,}: {what}; rebuild it with dsclean index")


def _arrow_source(path: str) -> pa.BufferReader:
    """A zero-copy reader over a read-only map of the Arrow file at ``path``, opened by
    :func:`dsclean.openfile.open_regular` (a FIFO or device in its place is refused, never blocks)."""
    mm = map_regular(path)
    if mm is None:
        raise OSError(errno.EINVAL, "the file is empty", path)
    return pa.BufferReader(pa.py_buffer(mm))


def _open_arrow(path: str, extra: dict[str, pa.DataType]) -> MappedIndex:
    try:
        source = _arrow_source(path)
        reader = pa.ipc.open_file(source)
        meta = _parse_meta(path, reader.schema.metadata)
        if reader.num_record_batches != 1:
            raise UserError(
                f"{path}: the index holds {reader.num_record_batches} record batches, "
                "not one; rebuild it with dsclean index"
            )
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
    cols = {
        n: _primitive_view(batch.column(n), batch.column(n).type.to_pandas_dtype())
        for n in ("label", "kind", "size", "mtime_ns")
    }
    more = {}
    for name, typ in extra.items():
        if name not in batch.schema.names or batch.column(name).type != typ or batch.column(name).null_count:
            raise UserError(f"{path}: corrupt index (no {name} column of type {typ} without nulls)")
        more[name] = (
            _fixed_binary_view(batch.column(name))
            if pa.types.is_fixed_size_binary(typ)
            else _primitive_view(batch.column(name), typ.to_pandas_dtype())
        )
    return MappedIndex(
        path,
        "arrow",
        meta,
        offsets,
        data,
        cols["label"],
        cols["kind"],
        cols["size"],
        cols["mtime_ns"],
        owner=(source, batch),
        extra=more,
    )


#: column -> the types a readable index may give it (format 1: int64 labels and sizes)
_REQUIRED = {"label": LABEL_TYPES, "kind": (pa.int8(),), "size": SIZE_TYPES, "mtime_ns": (pa.int64(),)}


def _check_columns(path: str, batch: pa.RecordBatch) -> None:
    names = set(batch.schema.names)
    for name, types in {"path": None, **_REQUIRED}.items():
        if name not in names:
            raise UserError(f"{path}: corrupt index (no {name} column); rebuild it with dsclean index")
        col = batch.column(name)
        ok = (
            (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)) if types is None else col.type in types
        )
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
                    "(it writes an uncompressed file)"
                )


def _primitive_view(arr: pa.Array, dtype) -> np.ndarray:
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(0, dtype)
    view = np.frombuffer(buf, dtype)[arr.offset : arr.offset + len(arr)]
    view.flags.writeable = False
    return view


def _fixed_binary_view(arr: pa.Array) -> np.ndarray:
    width = arr.type.byte_width
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros((0, width), np.uint8)
    view = np.frombuffer(buf, np.uint8).reshape(-1, width)[arr.offset : arr.offset + len(arr)]
    view.flags.writeable = False
    return view


def _load_npy(folder: str, name: str) -> np.ndarray:
    path = os.path.join(folder, f"{name}.npy")
    try:
        fd = open_regular(path)  # a FIFO or device refused without blocking
        try:
            # np.load maps a path, not a descriptor: map the checked descriptor's own file through
            # /proc/self/fd, so nothing swapped in at ``path`` after the check is ever opened
            proc = f"/proc/self/fd/{fd}"
            return np.load(proc if os.path.exists(proc) else path, mmap_mode="r", allow_pickle=False)
        finally:
            os.close(fd)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable index column ({exc}); rebuild it with dsclean index") from exc


def _open_npy(path: str) -> MappedIndex:
    meta = _npy_meta(path)
    cols = {n: _load_npy(path, n) for n in ("paths", "offsets", "labels", "kinds", "sizes", "mtimes")}
    for name, col in cols.items():  # integer vectors only: anything else would fail later as a raw numpy error
        if col.ndim != 1 or col.dtype.kind not in "iu":
            raise UserError(
                f"{path}: corrupt index ({name}.npy is {col.dtype} of shape {col.shape}); rebuild it with dsclean index"
            )
    return MappedIndex(
        path,
        "npy",
        meta,
        cols["offsets"],
        cols["paths"],
        cols["labels"],
        cols["kinds"],
        cols["sizes"],
        cols["mtimes"],
        owner=None,
    )


def read_table(path: str, rows: np.ndarray | None = None) -> pa.Table:
    """The index's columns (path, label, kind, size, mtime_ns and the facts it has) as an Arrow table.

    ``rows``: only these row positions, in this order (``take``); the whole index otherwise.
    Both formats (an npy index's ``-1`` facts come back as nulls). Zero-copy views until ``take``.
    """
    idx = open_index(path)
    if idx.format == "arrow":
        batch = idx.owner[1]
        table = pa.Table.from_batches([batch])
        table = table.select(
            ["path", "label", "kind", "size", "mtime_ns", *(n for n in FACTS if n in table.column_names)]
        )
    else:
        offsets = np.asarray(idx.offsets, np.int64)
        paths = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(idx), [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(idx.data))]
        )
        cols = {
            "path": paths,
            "label": np.asarray(idx.labels),
            "kind": np.asarray(idx.kinds),
            "size": np.asarray(idx.sizes),
            "mtime_ns": np.asarray(idx.mtimes),
        }
        for name, typ in MEDIA_FACTS.items():
            if os.path.exists(os.path.join(path, f"{name}.npy")):
                values = np.asarray(_load_npy(path, name))
                cols[name] = pa.array(values, typ, mask=values < 0)
        table = pa.table(cols)
    if rows is not None:
        table = table.take(pa.array(rows, pa.int64()))
    if (
        pa.types.is_large_binary(table.schema.field("path").type)
        and int(pc.sum(pc.binary_length(table.column("path"))).as_py() or 0) <= LARGE_PATH_BYTES
    ):
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
        "classes": [
            {"label": i, "name": name, "count": int(counts[i]) if i < len(counts) else 0}
            for i, name in enumerate(classes)
        ],
        "unlabeled": int((labels < 0).sum()),
        "kinds": {name: int(kind_counts[i]) for i, name in enumerate(kind_names)},
        "media_bytes": int(np.asarray(idx.sizes).sum()),
        "index_bytes": disk_size(path),
        "large_paths": idx.offsets.dtype == np.int64 and idx.format == "arrow",
        "metadata": meta,
    }
