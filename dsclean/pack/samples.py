"""One sample in a shard: its key, its members and what goes into them.

A sample is ``<key>.<ext>`` (the original bytes), ``<key>.cls`` (the label as
text; absent when the sample has no label) and ``<key>.json`` (original path,
label, class name, size, checksum, kind and media facts). The members are
adjacent and ordered by name, as WebDataset readers group them.

The key is 16 hex digits of BLAKE2b of the relative path's bytes: no ``.`` or
``/`` (webdataset splits member names at the first dot), unique (pack refuses
a collision, naming both paths), and the same whatever the order or the
shard a sample lands in.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
import re

import numpy as np

from ..formats import FORMATS, format_of_name, sniff
from ..jsonpaths import path_fields
from ..schema import MEDIA_FACTS

KEY_BYTES = 8  # 16 hex digits
KEY_RE = re.compile(r"[0-9a-f]{16}")
_BLOCK_ROWS = 65_536


def sample_key(rel: bytes) -> str:
    """The sample key of a relative path (exact bytes): 16 lower-case hex digits."""
    return hashlib.blake2b(rel, digest_size=KEY_BYTES).hexdigest()


def key_numbers(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Every row's key as a big-endian uint64 (``f"{k:016x}"`` is the key), from an index's path buffers."""
    n = len(offsets) - 1
    out = np.empty(n, ">u8")
    blob = memoryview(np.ascontiguousarray(data)).cast("B")
    blake2b = hashlib.blake2b
    for lo in range(0, n, _BLOCK_ROWS):  # Python objects for one block of rows at a time, never for all
        hi = min(n, lo + _BLOCK_ROWS)
        digests = b"".join(
            [
                blake2b(blob[s:e], digest_size=KEY_BYTES).digest()
                for s, e in zip(offsets[lo:hi].tolist(), offsets[lo + 1 : hi + 1].tolist())
            ]
        )
        out[lo:hi] = np.frombuffer(digests, ">u8")
    return out.astype(np.uint64)


def key_numbers_of(paths: list[bytes]) -> np.ndarray:
    """The keys of these paths as uint64 (:func:`key_numbers` for paths already in hand)."""
    digests = b"".join([hashlib.blake2b(p, digest_size=KEY_BYTES).digest() for p in paths])
    return np.frombuffer(digests, ">u8").astype(np.uint64)


def media_ext(rel: str, head: bytes) -> str:
    """The lower-case canonical extension of the sample's real format (magic bytes first, then the name)."""
    fmt = sniff(head) or format_of_name(rel)
    if fmt is None:  # not media by content nor by name: an index only holds media, so this is a bad index
        raise ValueError(f"{rel}: not a media file (no known format by content or name)")
    return FORMATS[fmt][1][0][1:]


def member_order(ext: str, labelled: bool) -> list[str]:
    """The member extensions of one sample, in the order they are written (sorted by name)."""
    return sorted([ext, "json", *(["cls"] if labelled else [])])


def json_record(
    rel: bytes, *, label: int, classes: list[str], kind: str, size: int, checksum: bytes, facts: dict
) -> bytes:
    """The ``<key>.json`` member: deterministic (sorted keys, compact, ASCII), as ``json.dumps`` writes it.

    The usual record (integer facts) is formatted directly, ~3x faster than building
    a dict for the encoder (it is per sample); anything else goes through the encoder.
    ``tests/pack/test_pack.py`` checks the two agree byte for byte.
    """
    fields = path_fields(rel)
    if facts.keys() <= _INT_FACTS and all(type(v) is int for v in facts.values() if v is not None):
        return int_facts_record(fields, label, classes, kind, size, checksum, facts)
    return _slow_record(fields, label, classes, kind, size, checksum, facts)


def _slow_record(
    fields: dict, label: int, classes: list[str], kind: str, size: int, checksum: bytes, facts: dict
) -> bytes:
    rec = {**fields, "kind": kind, "size": size, "checksum": checksum.hex()}
    if label >= 0:
        rec["label"] = label
        rec["class"] = classes[label] if label < len(classes) else None
    rec.update({k: v for k, v in facts.items() if v is not None})
    return _JSON.encode(rec).encode("ascii")


def int_facts_record(
    fields: dict, label: int, classes: list[str], kind: str, size: int, checksum: bytes, facts: dict
) -> bytes:
    """:func:`json_record` for facts that are all ``int`` or None (the index's fact columns are integers),
    from ``path_fields(rel)``: the same bytes as the encoder's, the keys written in sorted order."""
    out = []
    get = facts.get
    if (v := get("channels")) is not None:
        out.append('"channels":%d' % v)
    out.append('"checksum":"%s"' % checksum.hex())
    if label >= 0:
        out.append('"class":' + (_quote(classes[label]) if label < len(classes) else "null"))
    if (v := get("frames")) is not None:
        out.append('"frames":%d' % v)
    if (v := get("height")) is not None:
        out.append('"height":%d' % v)
    out.append('"kind":' + _quote(kind))
    if label >= 0:
        out.append('"label":%d' % label)
    out.append('"path":' + _quote(fields["path"]))
    if "path_b64" in fields:
        out.append('"path_b64":' + _quote(fields["path_b64"]))
    if (v := get("sample_rate")) is not None:
        out.append('"sample_rate":%d' % v)
    out.append('"size":%d' % size)
    if (v := get("width")) is not None:
        out.append('"width":%d' % v)
    return ("{" + ",".join(out) + "}").encode("ascii")


#: one encoder for every record (``json.dumps`` with options builds a new one per call)
_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_quote = json.encoder.encode_basestring_ascii  # what the encoder writes for a str (ensure_ascii)
_INT_FACTS = frozenset(MEDIA_FACTS)  # the facts int_facts_record writes
