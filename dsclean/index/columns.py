"""Write an index of any size with bounded memory: columns streamed to temp files, then ONE record batch.

An index is one Arrow IPC record batch (one chunk per column, so a path is two
offset reads), but holding that batch in memory costs the whole index (~50 B a
row). Here the rows arrive in index order, block by block: :class:`ColumnSink`
appends each column's buffers (validity bits, offsets, data; nested for
``list<string>``) to one temp file per buffer. :func:`write_one_batch` then writes
the IPC file: pyarrow serialises the schema, the record-batch metadata and the
footer of a tiny template batch of the same schema and null layout; the template's
lengths and buffer positions in that metadata are patched to the real ones (each
found as an exact byte pattern, checked to occur once), and the body is copied from
the temp files with ``copy_file_range`` (kernel side: it never enters this process).
The result is read back and checked by :func:`dsclean.index.store.open_index`.

:func:`write_npy_columns` writes the npy format from the same temp files.
"""

from __future__ import annotations

import os
import shutil
import struct

import numpy as np
import pyarrow as pa

#: IPC body buffers start at multiples of this (the Arrow format asks for 8; 64 is its recommendation)
ALIGN = 64


class WriteError(Exception):
    """The template could not be patched (an internal error: the caller falls back to an in-memory write)."""


class ColumnSink:
    """One column's buffers, appended block by block to temp files (``buffers()`` order of an Arrow array).

    Bit-packed buffers (validity, booleans) keep their last partial byte until the next block.
    """

    def __init__(self, folder: str, name: str, typ: pa.DataType) -> None:
        self.type, self.length, self.nulls = typ, 0, 0
        self.folder, self.name = folder, name
        self.validity = _Bits(self._open("validity"))
        self.offsets = self.data = self.child = None
        self.end = 0  # the last offset written (binary / list)
        if pa.types.is_list(typ):
            self.offsets = self._open("offsets")
            self.child = ColumnSink(folder, name + ".item", typ.value_type)
        elif pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_string(typ):
            self.offsets = self._open("offsets")
            self.data = self._open("data")
        elif pa.types.is_boolean(typ):
            self.data = _Bits(self._open("data"))
        else:
            self.data = self._open("data")
        if self.offsets is not None:
            self.offsets.write(np.zeros(1, np.int64).tobytes())  # offsets are int64 in the temp file

    def _open(self, what: str):
        return open(os.path.join(self.folder, f"{self.name}.{what}"), "w+b")

    def append(self, arr: pa.Array) -> None:
        n = len(arr)
        if n == 0:
            return
        self.length += n
        self.nulls += arr.null_count
        valid = np.ones(n, bool) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
        self.validity.add(valid)
        typ = self.type
        if self.offsets is not None:
            off = _offsets(arr)
            self.offsets.write((off[1:] - off[0] + self.end).tobytes())
            self.end += int(off[-1] - off[0])
            if self.child is not None:
                self.child.append(arr.values.slice(int(off[0]), int(off[-1] - off[0])))
            else:
                buf = arr.buffers()[2]
                if off[-1] > off[0]:
                    self.data.write(memoryview(buf)[int(off[0]) : int(off[-1])])
        elif pa.types.is_boolean(typ):
            bits = arr.fill_null(False).to_numpy(zero_copy_only=False)
            self.data.add(bits)
        else:
            width = typ.byte_width
            buf = arr.buffers()[1]
            self.data.write(memoryview(buf)[arr.offset * width : (arr.offset + n) * width])

    def finish(self, offset_type: pa.DataType | None = None) -> None:
        """Flush; convert the int64 temp offsets to the column's offset width when it is 32-bit."""
        for f in (self.validity, self.offsets, self.data):
            if f is not None:
                f.flush()
        if self.child is not None:
            self.child.finish()
        if self.offsets is not None and not (pa.types.is_large_binary(self.type) or pa.types.is_large_list(self.type)):
            if self.end > 2**31 - 1:
                raise WriteError(f"{self.name}: {self.end} bytes overflow 32-bit offsets")
            narrow = self._open("offsets32")
            self.offsets.seek(0)
            while True:
                block = self.offsets.read(1 << 23)
                if not block:
                    break
                narrow.write(np.frombuffer(block, np.int64).astype(np.int32).tobytes())
            narrow.flush()
            self.offsets.close()
            self.offsets = narrow

    # -- what the IPC writer needs --------------------------------------------------------

    def nodes(self) -> list[tuple[int, int]]:
        """(length, null_count) of this array and its children, depth first."""
        return [(self.length, self.nulls)] + (self.child.nodes() if self.child is not None else [])

    def buffer_files(self) -> list[tuple[object, int]]:
        """(file, bytes) of each buffer in ``pa.Array.buffers()`` order; a validity without nulls has 0 bytes."""
        out = [(self.validity, (self.length + 7) // 8 if self.nulls else 0)]
        if self.offsets is not None:
            width = 8 if (pa.types.is_large_binary(self.type) or pa.types.is_large_list(self.type)) else 4
            out.append((self.offsets, (self.length + 1) * width))
        if self.child is not None:
            out += self.child.buffer_files()
        elif self.data is not None:
            size = (
                self.end
                if self.offsets is not None
                else ((self.length + 7) // 8 if pa.types.is_boolean(self.type) else self.length * self.type.byte_width)
            )
            out.append((self.data, size))
        return out

    def template(self, rows: int) -> list:
        """Python values for a tiny template column with the same null layout (nulls first, where there are nulls)."""
        return [None if (self.nulls and i == 0) else _sample_value(self.type, self.child) for i in range(rows)]

    def close(self) -> None:
        for f in (self.validity, self.offsets, self.data):
            if f is not None:
                f.close()
        if self.child is not None:
            self.child.close()


class _Bits:
    """A bit-packed buffer (LSB first, as Arrow's) written block by block; a partial byte waits for the next block."""

    def __init__(self, f) -> None:
        self.f, self.pending = f, np.zeros(0, bool)

    def add(self, bits: np.ndarray) -> None:
        bits = np.concatenate([self.pending, bits]) if len(self.pending) else bits
        whole = len(bits) // 8 * 8
        self.f.write(np.packbits(bits[:whole], bitorder="little").tobytes())
        self.pending = bits[whole:].copy()

    def flush(self) -> None:
        if len(self.pending):
            self.f.write(np.packbits(self.pending, bitorder="little").tobytes())
            self.pending = np.zeros(0, bool)
        self.f.flush()

    def fileno(self) -> int:
        return self.f.fileno()

    def seek(self, pos: int) -> None:
        self.f.seek(pos)

    def read(self, size: int = -1) -> bytes:
        return self.f.read(size)

    def close(self) -> None:
        self.f.close()


def _offsets(arr: pa.Array) -> np.ndarray:
    """The n+1 offsets of a (sliced) binary, string or list array, as int64."""
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_large_list(arr.type)
    raw = np.frombuffer(arr.buffers()[1], np.int64 if large else np.int32)
    return raw[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)


def _sample_value(typ: pa.DataType, child: "ColumnSink | None"):
    if pa.types.is_list(typ):
        return [None if child.nulls else "x"]
    if pa.types.is_fixed_size_binary(typ):
        return b"\0" * typ.byte_width
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return b"x"
    if pa.types.is_string(typ):
        return "x"
    if pa.types.is_boolean(typ):
        return False
    if pa.types.is_floating(typ):
        return 0.0
    return 0


#: rows of the template batch: a count that no buffer position or length of the template equals by chance
_TEMPLATE_ROWS = 24


def write_one_batch(path: str, schema: pa.Schema, sinks: list[ColumnSink]) -> None:
    """The IPC file of one record batch whose columns are ``sinks`` (finished), without holding them in memory."""
    rows = sinks[0].length if sinks else 0
    tiny = pa.RecordBatch.from_arrays(
        [pa.array(s.template(_TEMPLATE_ROWS), f.type) for s, f in zip(sinks, schema)], schema=schema
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression=None)) as w:
        w.write_batch(tiny)
    template = sink.getvalue().to_pybytes()
    head, meta, tiny_body, gap, footer = _split(template)
    tiny_nodes, tiny_buffers = _layout(template, len(head) + 8 + len(meta))

    nodes = [n for s in sinks for n in s.nodes()]
    files = [b for s in sinks for b in s.buffer_files()]
    if len(nodes) != len(tiny_nodes) or len(files) != len(tiny_buffers):
        raise WriteError("the template's layout differs from the columns'")
    buffers, pos = [], 0
    for _, size in files:
        buffers.append((pos, size))
        pos = _align(pos + size)
    body_len = pos

    meta = bytearray(meta)
    done = [(0, 0)]
    done.append(_replace(meta, _pairs(tiny_nodes), _pairs(nodes), done))
    done.append(_replace(meta, _pairs(tiny_buffers), _pairs(buffers), done))
    done.append(_replace(meta, struct.pack("<q", _TEMPLATE_ROWS), struct.pack("<q", rows), done))
    _replace(meta, struct.pack("<q", len(tiny_body)), struct.pack("<q", body_len), done)
    footer = bytearray(footer)
    _replace(footer, struct.pack("<q", len(tiny_body)), struct.pack("<q", body_len), [(0, 0)])

    with open(path, "wb") as out:
        out.write(head)
        out.write(b"\xff\xff\xff\xff" + struct.pack("<i", len(meta)) + bytes(meta))
        start = out.tell()
        for (src, size), (offset, _) in zip(files, buffers):
            out.seek(start + offset)
            _copy(src, out, size)
        out.seek(start + body_len)
        out.truncate()
        out.write(gap)
        out.write(bytes(footer))
        out.write(struct.pack("<i", len(footer)) + b"ARROW1")


def _split(template: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes]:
    """(magic + schema message, batch metadata, batch body, bytes before the footer, footer) of a one-batch file."""
    if template[:6] != b"ARROW1" or template[-6:] != b"ARROW1":
        raise WriteError("not an Arrow file")
    pos = 8
    if template[pos : pos + 4] != b"\xff\xff\xff\xff":
        raise WriteError("unexpected schema message framing")
    schema_len = struct.unpack_from("<i", template, pos + 4)[0]
    pos += 8 + schema_len
    if template[pos : pos + 4] != b"\xff\xff\xff\xff":
        raise WriteError("unexpected batch message framing")
    meta_len = struct.unpack_from("<i", template, pos + 4)[0]
    head = template[:pos]
    meta = template[pos + 8 : pos + 8 + meta_len]
    footer_len = struct.unpack_from("<i", template, len(template) - 10)[0]
    footer_start = len(template) - 10 - footer_len
    body_start = pos + 8 + meta_len
    body_len = _body_length(template, body_start)
    return (
        head,
        meta,
        template[body_start : body_start + body_len],
        template[body_start + body_len : footer_start],
        template[footer_start : len(template) - 10],
    )


def _body_length(template: bytes, body_start: int) -> int:
    reader = pa.ipc.open_file(pa.py_buffer(template))
    batch = reader.get_batch(0)
    base = pa.py_buffer(template).address
    end = 0
    for col in batch.columns:
        for buf in _all_buffers(col):
            if buf is not None:
                end = max(end, buf.address - base + buf.size)
    return _align(end - body_start, 8)


def _layout(template: bytes, body_start: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The template batch's nodes (length, nulls) and buffers (offset in the body, length), in IPC order."""
    data = pa.py_buffer(template)
    batch = pa.ipc.open_file(data).get_batch(0)
    nodes, buffers = [], []

    def walk(arr: pa.Array) -> None:
        nodes.append((len(arr), arr.null_count))
        own = arr.buffers()[: _own_buffer_count(arr.type)]
        for buf in own:
            buffers.append((None, 0) if buf is None else (buf.address - data.address - body_start, buf.size))
        if pa.types.is_list(arr.type):
            walk(arr.values)

    for col in batch.columns:
        walk(col)
    # a missing validity buffer is written as (position, 0): the position is the next buffer's
    fixed, nxt = [], None
    for off, size in reversed(buffers):
        if off is None:
            off = nxt if nxt is not None else 0
        fixed.append((off, size))
        nxt = off
    return nodes, list(reversed(fixed))


def _own_buffer_count(typ: pa.DataType) -> int:
    if pa.types.is_list(typ):
        return 2
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_string(typ):
        return 3
    return 2


def _all_buffers(arr: pa.Array) -> list:
    return arr.buffers()


def _pairs(values: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack("<qq", a, b) for a, b in values)


def _replace(buf: bytearray, old: bytes, new: bytes, exclude: list[tuple[int, int]]) -> tuple[int, int]:
    """Replace the one occurrence of ``old`` outside the ``exclude`` ranges; returns its range."""
    hits, start = [], 0
    while True:
        i = buf.find(old, start)
        if i < 0:
            break
        if not any(a <= i < b or a < i + len(old) <= b for a, b in exclude):
            hits.append(i)
        start = i + 1
    if len(hits) != 1:
        raise WriteError(f"a template value occurs {len(hits)} times")
    buf[hits[0] : hits[0] + len(old)] = new
    return hits[0], hits[0] + len(new)


def _align(n: int, to: int = ALIGN) -> int:
    return (n + to - 1) // to * to


def _copy(src, dst, size: int) -> None:
    """``size`` bytes from the start of ``src`` to ``dst``'s position, in the kernel where it can."""
    src.flush()
    dst.flush()
    done = 0
    try:
        while done < size:
            n = os.copy_file_range(src.fileno(), dst.fileno(), size - done, done, dst.tell())
            if n == 0:
                break
            done += n
            dst.seek(dst.tell() + n)
    except OSError:
        pass  # a file system without copy_file_range: copy through a small buffer
    if done < size:
        src.seek(done)
        shutil.copyfileobj(_Limited(src, size - done), dst, 1 << 20)


class _Limited:
    def __init__(self, f, n: int) -> None:
        self.f, self.n = f, n

    def read(self, size: int = -1) -> bytes:
        size = self.n if size < 0 else min(size, self.n)
        data = self.f.read(size)
        self.n -= len(data)
        return data


def write_npy_columns(folder: str, sinks: dict[str, ColumnSink], names: dict[str, str]) -> None:
    """The npy format from finished sinks: ``paths``/``offsets`` from the path column, one file per other column."""
    path = sinks["path"]
    _npy(folder, "paths", np.uint8, path.end, path.data, path.end)
    _npy(
        folder,
        "offsets",
        np.int64,
        path.length + 1,
        path.offsets,
        (path.length + 1) * path.buffer_files()[1][1] // (path.length + 1),
    )
    for npy_name, column in names.items():
        s = sinks[column]
        dtype = np.dtype(s.type.to_pandas_dtype())
        _npy(folder, npy_name, dtype, s.length, s.data, s.length * dtype.itemsize)


def _npy(folder: str, name: str, dtype, count: int, src, size: int) -> None:
    with open(os.path.join(folder, f"{name}.npy"), "wb") as out:
        np.lib.format.write_array_header_1_0(
            out, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (count,)}
        )
        if name == "offsets" and size != count * 8:  # 32-bit temp offsets: widen block by block
            src.seek(0)
            while True:
                block = src.read(1 << 22)
                if not block:
                    break
                out.write(np.frombuffer(block, np.int32).astype(np.int64).tobytes())
            return
        _copy(src, out, size)
