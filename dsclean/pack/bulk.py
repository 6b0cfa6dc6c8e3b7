"""A batch of samples laid out as tar bytes at once: headers with numpy, ``.json`` members with one format call.

Why: packing is a copy (read each file, write it into the shard), and for the small
files datasets are made of, the Python around each copy cost more than the copy:
three 512-byte headers, a JSON record, padding and offsets per sample, ~40 us, where
``tar -cf`` copies a whole file in ~20 us (BENCHMARKS.md "Pack"). Here they are
computed for a whole batch of samples from column arrays, with no Python per member:

- :func:`layout`: where each member's header and data go in the batch's bytes
  (cumulative sums over a (samples, 3) table of member sizes in name order);
- :func:`headers`: a (members, 512) uint8 array of ustar headers: a template row, the
  name and the octal size filled in, the header checksum from the sums of those;
- :func:`json_members`: every sample's ``.json`` from one ``%`` format of the batch's
  templates (one template per combination of fields present);

so the writer (:mod:`.write`) only opens and reads each file, into its place in one
reused buffer, and writes the whole batch with one call. The bytes are exactly those of
:func:`.tarformat.header` and :func:`.samples.int_facts_record` per sample
(tests/pack/test_bulk.py compares them on random input, and the shards with tarfile's).
"""

from __future__ import annotations

import json.encoder
from dataclasses import dataclass

import numpy as np

from ..formats import FORMATS
from ..jsonpaths import path_fields
from ..schema import MEDIA_FACTS
from .samples import member_order
from .tarformat import BLOCK, HEADER_TEMPLATE

#: every canonical media extension (a sample's media member is ``<key>.<ext>``); codes index this tuple
EXTS: tuple[str, ...] = tuple(sorted({exts[0][1:] for _, exts in FORMATS.values()}))
EXT_CODE = {ext: i for i, ext in enumerate(EXTS)}
#: a member's kind, the column of the (samples, 3) tables below
MEDIA, CLS, JSON = 0, 1, 2
#: name suffix per member: media ext codes, then cls and json
_SUFFIXES = [e.encode("ascii") for e in EXTS] + [b"cls", b"json"]

# the member kinds of a sample in name order, per (ext code, labelled); -1 pads a sample without .cls
_ORDER = np.full((len(EXTS), 2, 3), -1, np.int64)
for _code, _ext in enumerate(EXTS):
    for _labelled in (0, 1):
        _kinds = {_ext: MEDIA, "cls": CLS, "json": JSON}
        for _slot, _name in enumerate(member_order(_ext, bool(_labelled))):
            _ORDER[_code, _labelled, _slot] = _kinds[_name]

_TEMPLATE_ROW = np.frombuffer(HEADER_TEMPLATE, np.uint8)
_TEMPLATE_SUM = int(_TEMPLATE_ROW.sum())  # name and size zero, checksum spaces
#: the end of a member's name after its key, by suffix code: "." and the suffix, NUL-padded to one width
_TAILS = np.array([list((b"." + t).ljust(6, b"\0")) for t in _SUFFIXES], np.uint8)
_TAIL_SUMS = _TAILS.sum(axis=1, dtype=np.int64)
_SIZE_SHIFTS = np.arange(30, -1, -3, dtype=np.int64)  # 11 octal digits
_SUM_SHIFTS = np.arange(15, -1, -3, dtype=np.int64)  # 6 octal digits
_KEY_SHIFTS = np.arange(60, -1, -4, dtype=np.uint64)  # 16 hex digits
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def key_stems(keys: np.ndarray) -> np.ndarray:
    """``(n, 16)`` uint8: each 64-bit sample key as its 16 lower-case hex digits (= :func:`.samples.sample_key`)."""
    return _HEX[(np.asarray(keys, np.uint64)[:, None] >> _KEY_SHIFTS) & np.uint64(15)]


@dataclass
class Layout:
    """Where the members of a batch of samples go, in bytes from the batch's start (a block boundary)."""

    total: int  # bytes of the batch
    sample_at: np.ndarray  # (n + 1,) where each sample starts; the last entry is ``total``
    data_at: np.ndarray  # (n, 3) where the data of each sample's media, cls, json member starts (-1: no member)
    header_at: np.ndarray  # (members,) where each header starts, in order
    member_sample: np.ndarray  # (members,) whose member
    member_kind: np.ndarray  # (members,) MEDIA, CLS or JSON
    member_size: np.ndarray  # (members,) its data's size


def layout(ext_code: np.ndarray, labelled: np.ndarray, sizes: np.ndarray) -> Layout:
    """The batch's layout. ``sizes``: ``(n, 3)`` data sizes of each sample's media, cls and json member.

    Each member is a 512-byte header, its data and zeros to the next 512; a sample's
    members follow in name order (:func:`.samples.member_order`).
    """
    n = len(ext_code)
    kind = _ORDER[ext_code, labelled.astype(np.int64)]  # (n, 3) in name order, -1 = none
    present = kind >= 0
    size = np.where(present, np.take_along_axis(sizes, np.maximum(kind, 0), axis=1), 0)
    span = np.where(present, BLOCK + size + (-size % BLOCK), 0).ravel()
    end = np.cumsum(span)
    start = end - span  # of every slot's header
    keep = present.ravel()
    header_at = start[keep]
    member_sample = np.repeat(np.arange(n), 3)[keep]
    member_kind = kind.ravel()[keep]
    data_at = np.full((n, 3), -1, np.int64)
    data_at[member_sample, member_kind] = header_at + BLOCK
    sample_at = np.zeros(n + 1, np.int64)
    sample_at[1:] = end[2::3]
    return Layout(int(sample_at[-1]), sample_at, data_at, header_at, member_sample, member_kind, size.ravel()[keep])


def headers(stems: np.ndarray, lay: Layout, ext_code: np.ndarray) -> np.ndarray:
    """``(members, 512)`` headers of the batch's members, named ``<stem>.<ext|cls|json>`` (= :func:`.tarformat.header`).

    ``stems``: ``(n, 16)`` per sample (:func:`key_stems`); sizes must be under 8 GiB.
    """
    m, k = len(lay.header_at), stems.shape[1]
    out = np.empty((m, BLOCK), np.uint8)
    out[:] = _TEMPLATE_ROW
    stem = stems[lay.member_sample]
    out[:, :k] = stem
    suffix = np.where(lay.member_kind == MEDIA, ext_code[lay.member_sample], len(EXTS) + lay.member_kind - 1)
    out[:, k : k + _TAILS.shape[1]] = _TAILS[suffix]
    digits = ((lay.member_size[:, None] >> _SIZE_SHIFTS) & 7) + 48
    out[:, 124:135] = digits
    # the header checksum: the sum of all 512 bytes, the checksum field counting as eight spaces;
    # the template's bytes plus what was filled in (name and size)
    total = _TEMPLATE_SUM + stem.sum(axis=1, dtype=np.int64) + digits.sum(axis=1) + _TAIL_SUMS[suffix]
    out[:, 148:154] = ((total[:, None] >> _SUM_SHIFTS) & 7) + 48
    out[:, 154] = 0
    out[:, 155] = ord(" ")
    return out


# --------------------------------------------------------------------------- the .json members
#
# A sample's record is json.dumps(sort_keys=True, separators=(",", ":")) of path, kind, size,
# checksum, label and class when labelled, path_b64 for a non-UTF-8 name, and the integer facts
# it has. Kind and label are adjacent in key order and depend only on (label, kind): one text per
# pair in the batch. The samples with the same fields present share a template, and a group's
# records are formatted with one ``%`` (the templates joined by newlines, which the JSON text
# never holds: ensure_ascii escapes them).

#: the record's parts in key order: (field, format); "kind_label" is kind and label together
_SLOTS = (
    ("channels", '"channels":%d'),
    ("checksum", '"checksum":"%s"'),
    ("class", '"class":%s'),
    ("frames", '"frames":%d'),
    ("height", '"height":%d'),
    ("kind_label", "%s"),
    ("path", '"path":%s'),
    ("path_b64", '"path_b64":%s'),
    ("sample_rate", '"sample_rate":%d'),
    ("size", '"size":%d'),
    ("width", '"width":%d'),
)
_OPTIONAL = ("channels", "class", "frames", "height", "path_b64", "sample_rate", "width")  # bit i of a group code
_quote = json.encoder.encode_basestring_ascii  # what the encoder writes for a str (ensure_ascii)
#: the integer media facts a record may carry (an index built with --facts has them), in the index's order
FACT_NAMES = MEDIA_FACTS


def json_members(
    paths: list[bytes],
    labels: np.ndarray,
    classes: list[str],
    kinds: np.ndarray,
    kind_names: tuple[str, ...],
    sizes: np.ndarray,
    checksums: np.ndarray,
    facts: dict[str, tuple[np.ndarray, np.ndarray]],
) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The batch's ``.json`` members: ``(text, starts, lengths)``, record ``i`` is ``text[starts[i]:][:lengths[i]]``.

    ``labels``: negative = unlabelled; ``kinds``: codes into ``kind_names``; ``checksums``:
    ``(n, 16)`` uint8; ``facts``: name -> ``(values, valid)`` arrays (a name not there: no such fact).
    """
    n = len(paths)
    columns: dict[str, list] = {}
    code = np.zeros(n, np.int64)
    for name in FACT_NAMES:
        if name in facts:
            columns[name] = facts[name][0].tolist()
            code |= facts[name][1].astype(np.int64) << _OPTIONAL.index(name)
    if b"".join(paths).isascii():
        columns["path"] = list(map(_quote, map(bytes.decode, paths)))
    else:
        fields = [path_fields(p) for p in paths]
        columns["path"] = [_quote(f["path"]) for f in fields]
        columns["path_b64"] = [_quote(f.get("path_b64", "")) for f in fields]
        code |= np.array(["path_b64" in f for f in fields], np.int64) << _OPTIONAL.index("path_b64")
    hexes = np.ascontiguousarray(checksums).tobytes().hex()
    columns["checksum"] = [hexes[i : i + 32] for i in range(0, 32 * n, 32)]
    labelled = labels >= 0
    code |= labelled.astype(np.int64) << _OPTIONAL.index("class")
    named = np.array([_quote(c) for c in classes] + ["null"], dtype=object)
    columns["class"] = named[np.where(labelled & (labels < len(classes)), labels, len(classes))].tolist()
    pairs, which = np.unique((labels + 1) * len(kind_names) + kinds, return_inverse=True)
    texts = [_kind_label(kind_names[p % len(kind_names)], p // len(kind_names) - 1) for p in pairs.tolist()]
    columns["kind_label"] = np.array(texts + [""], dtype=object)[which].tolist()  # ("" keeps the array 1-d)
    columns["size"] = sizes.tolist()
    codes = np.unique(code)
    if len(codes) == 1:  # the usual batch: one group
        return split_lines(_format(int(codes[0]), columns, n))
    texts, starts, lengths, base = [], np.zeros(n, np.int64), np.zeros(n, np.int64), 0
    for c in codes.tolist():
        rows = np.flatnonzero(code == c)
        take = rows.tolist()
        text, s, ln = split_lines(_format(c, {k: [v[i] for i in take] for k, v in columns.items()}, len(rows)))
        starts[rows], lengths[rows] = s + base, ln
        texts.append(text)
        base += len(text)
    return b"".join(texts), starts, lengths


def _kind_label(kind: str, label: int) -> str:
    return '"kind":' + _quote(kind) + (f',"label":{label}' if label >= 0 else "")


def _format(code: int, columns: dict[str, list], n: int) -> bytes:
    """``n`` records with the fields of group ``code``, newline-separated."""
    slots = [(f, spec) for f, spec in _SLOTS if f not in _OPTIONAL or code >> _OPTIONAL.index(f) & 1]
    args: list = [None] * (len(slots) * n)
    for i, (f, _) in enumerate(slots):
        args[i :: len(slots)] = columns[f]
    template = "{" + ",".join(spec for _, spec in slots) + "}"
    return ("\n".join([template] * n) % tuple(args)).encode("ascii")


def split_lines(text: bytes) -> tuple[bytes, np.ndarray, np.ndarray]:
    """``(text, starts, lengths)`` of the newline-separated records in ``text``."""
    breaks = np.flatnonzero(np.frombuffer(text, np.uint8) == 10)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.append(breaks, len(text))
    return text, starts, ends - starts


def place(view: memoryview, at: np.ndarray, text: bytes, starts: np.ndarray, lengths: np.ndarray) -> None:
    """Copy record ``i`` of ``text`` (``starts[i]``, ``lengths[i]``) to ``view[at[i]:]``.

    A slice assignment per record: for records of a few hundred bytes, several times
    faster than a numpy scatter (which needs an index per byte).
    """
    source = memoryview(text)
    for to, start, length in zip(at.tolist(), starts.tolist(), lengths.tolist()):
        view[to : to + length] = source[start : start + length]
