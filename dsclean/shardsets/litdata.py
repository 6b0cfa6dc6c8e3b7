"""litdata optimized chunk sets (``index.json`` with ``chunks`` and ``config``, ``chunk-*.bin``).

litdata's reader (``StreamingDataset``, ``PyTreeLoader``) hands out decoded samples only, so the raw
bytes of each field are taken from the chunk as litdata lays it out (``litdata.streaming.writer``'s
``_create_chunk``: a ``uint32`` item count, ``count + 1`` ``uint32`` offsets, then per item a
``uint32`` size per field of ``config.data_format`` followed by the fields' serialized bytes), and the
field formats are checked against litdata's own serializer table. Everything is untrusted: plain chunk
names, counts and offsets checked against the file before anything is read into memory. Fields in
``jpeg`` format, ``bytes`` fields holding media (or the field ``--column NAME``) go to the checker. A
sample's ``row`` (and key) is its index in the whole set, as ``litdata.StreamingDataset`` numbers it
(chunks in index order). Compressed or encrypted chunks are refused with a clear error.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
from typing import Iterator

from .. import reasons as R
from ..errors import UserError
from ..formats import FORMATS, sniff
from ..openfile import open_regular_file
from .detect import ShardSet
from .events import Problem, Sample, ShardDone, listed_shard_events

#: chunks an index.json may list, and fields a sample may have, at most
MAX_CHUNKS = 1_000_000
MAX_FIELDS = 10_000


def require():
    """litdata's serializer table, or a UserError naming the extra to install."""
    try:
        from litdata.streaming.serializers import _SERIALIZERS
    except ImportError as exc:
        raise UserError(f"reading litdata chunks needs litdata: pip install 'dsclean[litdata]' ({exc})") from None
    return _SERIALIZERS


def field_names(config: dict, n: int) -> list[str]:
    """The fields' names: the keys of a flat dict sample (``data_spec``), else ``field0``, ``field1``, ..."""
    try:
        spec = json.loads(config.get("data_spec") or "null")
        top = spec[1] if isinstance(spec, list) and len(spec) == 2 else None
        if isinstance(top, dict) and top.get("type") == "builtins.dict":
            names = json.loads(top.get("context") or "null")
            leaves = top.get("children_spec") or []
            if isinstance(names, list) and len(names) == n and all(not c.get("children_spec") for c in leaves):
                return [str(x) for x in names]
    except (ValueError, TypeError, AttributeError, KeyError):
        pass  # an unusual tree: numbered names below
    return [f"field{i}" for i in range(n)]


def _config(ss: ShardSet, doc: dict, serializers) -> tuple[list[str], list[str]]:
    config = doc["config"]
    if config.get("compression") or config.get("encryption"):
        raise UserError(f"{ss.index}: compressed or encrypted litdata chunks are not supported (yet)")
    formats = config.get("data_format")
    if not isinstance(formats, list) or not formats or len(formats) > MAX_FIELDS:
        raise UserError(f"{ss.index}: config.data_format is not a list of field formats")
    unknown = [f for f in formats if not isinstance(f, str) or f.split(":")[0] not in serializers]
    if unknown:
        raise UserError(f"{ss.index}: unknown litdata field formats {unknown[:5]}")
    return formats, field_names(config, len(formats))


def _offsets(f, size: int, count: int) -> tuple[int, ...] | str:
    head = f.read(4)
    have = struct.unpack("<I", head)[0] if len(head) == 4 else None
    if have != count:
        return f"the chunk holds {have} items, index.json says {count}"
    table = 4 * (count + 1)
    if 4 + table > size:
        return f"the offset table of {count} items runs past the end of the file ({size:,} bytes)"
    offsets = struct.unpack(f"<{count + 1}I", f.read(table))
    if offsets[0] != 4 + table or offsets[-1] > size or any(a > b for a, b in itertools.pairwise(offsets)):
        return "the offset table does not cut the file into items (not increasing, or past its end)"
    return offsets


def plan_set(ss: ShardSet, column: str | None = None) -> Iterator[tuple[str, tuple] | Problem]:
    """The set's chunks from its ``index.json``, each ``(name, entry)`` (what :func:`shard_events` reads it
    with, small and picklable: a task of its own on a worker), and the index's broken entries as problems."""
    serializers = require()
    assert ss.index is not None
    doc = ss.read_index()
    formats, names = _config(ss, doc, serializers)
    if column is not None and column not in names:
        raise UserError(f"{ss.index}: no field {column!r} (it has {', '.join(names[:20])})")
    chunks = doc["chunks"]
    if len(chunks) > MAX_CHUNKS:
        raise UserError(f"{ss.index}: lists {len(chunks):,} chunks (at most {MAX_CHUNKS:,})")
    base = 0
    for i, entry in enumerate(chunks):
        name = entry.get("filename") if isinstance(entry, dict) else None
        count = entry.get("chunk_size") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
            yield Problem(
                f"index.json chunk {i}", None, None, None, R.BROKEN_SHARD, f"filename {name!r} is not a plain file name"
            )
            continue
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            yield Problem(name, None, None, None, R.BROKEN_SHARD, f"chunk_size {count!r} is not a count")
            continue
        yield name, (count, base, formats, names)
        base += count


def shard_events(ss: ShardSet, name: str, entry: tuple, column: str | None) -> Iterator[Sample | Problem | ShardDone]:
    """The events of the chunk ``name`` (``entry``: :func:`plan_set`'s), read where this runs."""
    count, base, formats, names = entry
    yield from listed_shard_events(
        ss, name, count, lambda path: _chunk(path, name, count, base, formats, names, column)
    )


def _chunk(
    path: str, name: str, count: int, base: int, formats: list, names: list, column: str | None
) -> Iterator[Sample | Problem | ShardDone]:
    """The items of one litdata chunk at ``path``."""
    k = len(formats)
    try:
        f = open_regular_file(path)
    except OSError as exc:
        yield Problem(name, None, None, None, R.BROKEN_SHARD, f"cannot open: {exc.strerror or exc}")
        return
    with f:
        offsets = _offsets(f, os.fstat(f.fileno()).st_size, count)
        if isinstance(offsets, str):
            yield Problem(name, None, None, None, R.BROKEN_SHARD, offsets)
            yield ShardDone(name, count)
            return
        for idx in range(count):
            row = base + idx
            f.seek(offsets[idx])
            item = f.read(offsets[idx + 1] - offsets[idx])  # bounded: the offsets lie inside the file
            sizes = struct.unpack_from(f"<{k}I", item) if len(item) >= 4 * k else None
            if sizes is None or 4 * k + sum(sizes) != len(item):
                why = "its field sizes do not add up to the item's bytes"
                yield Problem(name, str(row), f"item {idx}", row, R.BROKEN_SHARD, why)
                continue
            at = 4 * k
            for fmt, field, n in zip(formats, names, sizes):
                value, at = item[at : at + n], at + n
                if column is not None and field != column:
                    continue
                ext = ".jpg" if fmt == "jpeg" else None
                if ext is None and (field == column or fmt == "bytes"):
                    found = sniff(value[:64])
                    ext = FORMATS[found][1][0] if found else (".bin" if field == column else None)
                if ext is not None:
                    yield Sample(name, str(row), f"item {idx}:{field}", row, value, f"{name}/{idx}-{field}{ext}")
    yield ShardDone(name, count)
