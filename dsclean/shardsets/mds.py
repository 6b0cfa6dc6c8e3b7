"""Mosaic MDS shard sets (``index.json`` + ``shard.*.mds``), read with mosaicml-streaming's own reader.

Before the library reads a shard, its ``index.json`` entry and the shard file are checked as untrusted
input: a plain file name (no folder, no ``..``), the file a regular file of the size the index says, the
per-shard ``hashes`` (index.json's ``hashes`` list, values in ``raw_data.hashes``) recomputed while the
file streams through, the sample count and offset table consistent with the file (so no read is sized
by a number the file did not back). Then each sample's bytes come from the library's
``MDSReader.get_sample_data`` and are split into columns as its ``decode_sample`` splits them, without
decoding: the ``jpeg`` and ``png`` columns (and ``bytes`` columns holding media, or ``--column NAME``)
go to the checker. A sample's ``row`` (and key) is its index in the whole set, as ``StreamingDataset``
numbers the samples of one stream.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
from typing import Iterator

from .. import reasons as R
from ..errors import UserError
from ..formats import FORMATS, sniff
from ..openfile import open_regular_file
from .detect import ShardSet
from .events import Problem, Sample, ShardDone, listed_shard_events

#: shards an index.json may list, at most
MAX_SHARDS = 1_000_000
#: encodings whose values are image files as written (the checker sees them with this extension)
FILE_ENCODINGS = {"jpeg": ".jpg", "png": ".png"}
_PIECE = 1 << 20


def require():
    """mosaicml-streaming's reader factory, or a UserError naming the extra to install."""
    try:
        from streaming.base.format import reader_from_json
    except ImportError as exc:
        raise UserError(
            f"reading Mosaic MDS shards needs mosaicml-streaming: pip install 'dsclean[mds]' ({exc})"
        ) from None
    return reader_from_json


def _hasher(algo: str):
    if algo in hashlib.algorithms_available:
        return hashlib.new(algo)
    import xxhash  # mosaicml-streaming's other hashes (xxh32, xxh64, xxh3_64, xxh128, ...)

    if algo not in xxhash.algorithms_available:
        raise ValueError(f"unknown hash {algo!r}")
    return getattr(xxhash, algo)()


def _entry(obj: object, i: int) -> tuple[str, int, dict]:
    """The shard file name, its sample count and the index entry, checked; ValueError says what is wrong."""
    if not isinstance(obj, dict) or obj.get("format") != "mds" or obj.get("version") != 2:
        raise ValueError("not an MDS version 2 shard entry")
    raw = obj.get("raw_data")
    name = raw.get("basename") if isinstance(raw, dict) else None
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"raw_data.basename {name!r} is not a plain file name")
    samples = obj.get("samples")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
        raise ValueError(f"samples {samples!r} is not a count")
    names, encodings, sizes = (obj.get(k) for k in ("column_names", "column_encodings", "column_sizes"))
    if not (isinstance(names, list) and isinstance(encodings, list) and isinstance(sizes, list)):
        raise ValueError("column_names, column_encodings, column_sizes must be lists")
    if not len(names) == len(encodings) == len(sizes) or not names:
        raise ValueError("column_names, column_encodings and column_sizes differ in length")
    if not all(s is None or (isinstance(s, int) and s >= 0) for s in sizes):
        raise ValueError("column_sizes must be null or counts")
    return name, samples, obj


def _check_file(path: str, name: str, samples: int, obj: dict) -> str | None:
    """What is wrong with the shard file (size, hashes, offsets), or None; reads it once, in pieces."""
    raw = obj["raw_data"]
    hashers = {}
    for algo in obj.get("hashes") or []:
        expected = (raw.get("hashes") or {}).get(algo) if isinstance(raw.get("hashes"), dict) else None
        if isinstance(algo, str) and isinstance(expected, str):
            try:
                hashers[algo] = (_hasher(algo), expected)
            except ValueError:
                return f"index.json names an unknown hash {algo!r}"
    with open_regular_file(path) as f:
        size = os.fstat(f.fileno()).st_size
        if isinstance(raw.get("bytes"), int) and raw["bytes"] != size:
            return f"the file is {size:,} bytes, index.json says {raw['bytes']:,}"
        head = f.read(4)
        if len(head) < 4 or struct.unpack("<I", head)[0] != samples:
            have = struct.unpack("<I", head)[0] if len(head) == 4 else None
            return f"the shard holds {have} samples, index.json says {samples}"
        table = 4 * (samples + 1)
        if 4 + table > size:
            return f"the offset table of {samples} samples runs past the end of the file ({size:,} bytes)"
        offsets = struct.unpack(f"<{samples + 1}I", f.read(table))
        if offsets[0] < 4 + table or offsets[-1] != size or any(a > b for a, b in itertools.pairwise(offsets)):
            return "the offset table does not cut the file into samples (not increasing, or not to its end)"
        if hashers:
            f.seek(0)
            while piece := f.read(_PIECE):
                for h, _ in hashers.values():
                    h.update(piece)
            for algo, (h, expected) in hashers.items():
                if h.hexdigest() != expected:
                    return f"{algo} of the file is {h.hexdigest()}, index.json says {expected}"
    return None


def _columns(data: bytes, names: list, sizes: list) -> list[bytes] | None:
    """The sample's column values, as ``MDSReader.decode_sample`` cuts them (None: they overrun the sample)."""
    lengths, at = [], 0
    for size in sizes:
        if size:
            lengths.append(size)
        else:
            if at + 4 > len(data):
                return None
            lengths.append(struct.unpack_from("<I", data, at)[0])
            at += 4
    out = []
    for n in lengths:
        if at + n > len(data):
            return None
        out.append(data[at : at + n])
        at += n
    return out


def plan_set(ss: ShardSet, column: str | None = None) -> Iterator[tuple[str, tuple] | Problem]:
    """The set's shards from its ``index.json``, each ``(name, entry)`` (what :func:`shard_events` reads it
    with, small and picklable: a task of its own on a worker), and the index's broken entries as problems."""
    require()
    assert ss.index is not None
    doc = ss.read_index()
    shards = doc["shards"]
    if len(shards) > MAX_SHARDS:
        raise UserError(f"{ss.index}: lists {len(shards):,} shards (at most {MAX_SHARDS:,})")
    base = 0  # the set's index of the shard's first sample
    for i, obj in enumerate(shards):
        try:
            name, samples, obj = _entry(obj, i)
        except ValueError as exc:
            yield Problem(f"index.json shard {i}", None, None, None, R.BROKEN_SHARD, f"{ss.index}: shard {i}: {exc}")
            continue
        yield name, (samples, obj, base)
        base += samples


def shard_events(ss: ShardSet, name: str, entry: tuple, column: str | None) -> Iterator[Sample | Problem | ShardDone]:
    """The events of the shard ``name`` (``entry``: :func:`plan_set`'s), read where this runs."""
    samples, obj, base = entry
    yield from listed_shard_events(ss, name, samples, lambda path: _shard(ss, path, name, samples, obj, base, column))


def _shard(
    ss: ShardSet, path: str, name: str, samples: int, obj: dict, base: int, column: str | None
) -> Iterator[Sample | Problem | ShardDone]:
    """The samples of one MDS shard at ``path`` (its ``index.json`` entry ``obj``), checked first."""
    reader_from_json = require()
    try:
        wrong = _check_file(path, name, samples, obj)
    except OSError as exc:
        wrong = f"cannot read: {exc.strerror or exc}"
    if wrong:
        yield Problem(name, None, None, None, R.BROKEN_SHARD, wrong)
        yield ShardDone(name, samples)
        return
    reader = reader_from_json(os.path.dirname(path), "", obj)
    names, encodings, sizes = obj["column_names"], obj["column_encodings"], obj["column_sizes"]
    if column is not None and column not in names:
        raise UserError(f"{ss.index}: shard {name} has no column {column!r} (it has {', '.join(names[:20])})")
    for idx in range(samples):
        row = base + idx
        values = _columns(reader.get_sample_data(idx), names, sizes)
        if values is None:
            yield Problem(name, str(row), f"sample {idx}", row, R.BROKEN_SHARD, "its columns overrun the sample")
            continue
        for col, enc, value in zip(names, encodings, values):
            ext = FILE_ENCODINGS.get(enc)
            if ext is None and (col == column or (column is None and enc == "bytes")):
                fmt = sniff(value[:64])
                ext = FORMATS[fmt][1][0] if fmt else (".bin" if col == column else None)
            if ext is None or (column is not None and col != column):
                continue
            yield Sample(name, str(row), f"sample {idx}:{col}", row, value, f"{name}/{idx}-{col}{ext}")
    yield ShardDone(name, samples)
