"""ISO base media file format (ISO/IEC 14496-12) structure: the box walk under AVIF, HEIF/HEIC and
the JPEG XL container.

Every top-level box's size against the bytes present (a box past the end is a cut file); in
``meta``, the item locations (``iloc``): every extent of every item inside the file (or inside
``idat`` for items stored there). For JPEG XL's container, the partial codestream boxes (``jxlp``)
carry sequence numbers: 0, 1, 2, ... with the last one flagged. Each loop over the structure
consumes bytes or stops: a hostile size can neither stall the walk nor size an allocation.

The checkers of the formats in that container (:func:`check_avif`, :func:`check_heif`, :func:`check_jxl`) run
these rules first, then a full decode through Pillow with the format's plugin: AVIF by Pillow itself (libavif),
HEIF by ``pillow-heif`` (libheif), JPEG XL by ``pillow-jxl-plugin`` (libjxl). The plugins are optional (extras
``dsclean[heif]`` and ``dsclean[jxl]``): without one, a file whose container is whole is
``warn``/``unsupported`` naming the extra to install — never ``ok`` unchecked, never ``bad``
because a decoder is missing. A damaged container is ``bad`` whatever is installed.
"""

from __future__ import annotations

import importlib
import struct
from dataclasses import dataclass, field

from ... import reasons as R
from .. import check_image, importguard
from ..verdict import Finding, Verdict, bad

JXL_SIGNATURE = b"\x00\x00\x00\x0cJXL \r\n\x87\n"
MAX_BOXES = 100_000  # a file with more top-level boxes is not walked further (no real image has one)


@dataclass
class Box:
    type: bytes
    start: int  # offset of the box header
    body: int  # offset of the payload
    end: int  # offset after the box


@dataclass
class Walk:
    findings: list[Finding] = field(default_factory=list)
    boxes: list[Box] = field(default_factory=list)


def boxes(buf, start: int, end: int, where: str, out: Walk) -> list[Box]:
    """The boxes tiling ``buf[start:end]``; a box past ``end`` is a finding (truncated at the top
    level, corrupt inside a parent box), and the walk stops there."""
    found: list[Box] = []
    pos, size = start, len(buf)
    while pos < end and len(found) < MAX_BOXES:
        if end - pos < 8:
            out.findings.append(
                _past(pos, end, size, f"{where}: {end - pos} stray bytes at offset {pos}, less than a box header")
            )
            return found
        length, kind = struct.unpack_from(">I4s", buf, pos)
        body = pos + 8
        if length == 1:
            if end - pos < 16:
                out.findings.append(
                    _past(pos, end, size, f"{where}: box {_name(kind)} at offset {pos} is cut inside its 64-bit size")
                )
                return found
            (length,) = struct.unpack_from(">Q", buf, pos + 8)
            body = pos + 16
        elif length == 0:
            length = end - pos  # the box runs to the end of its parent (or of the file)
        if length < body - pos:
            out.findings.append(
                bad(
                    R.CORRUPT,
                    f"{where}: box {_name(kind)} at offset {pos} declares {length} bytes, less than its own header",
                )
            )
            return found
        if pos + length > end:
            out.findings.append(
                _past(
                    pos,
                    end,
                    size,
                    f"{where}: box {_name(kind)} at offset {pos} declares {length} bytes, {end - pos} present",
                )
            )
            return found
        found.append(Box(kind, pos, body, pos + length))
        pos += length
    return found


def _past(pos: int, end: int, size: int, what: str) -> Finding:
    """A box running past the end of the file is a cut file; past the end of its parent box, damage."""
    return bad(R.TRUNCATED if end == size else R.CORRUPT, what)


def _name(kind: bytes) -> str:
    return repr(kind.decode("latin-1"))


def walk_heif(buf) -> Walk:
    """AVIF / HEIF: ftyp first, the top-level boxes whole, a ``meta`` box, every item extent inside the file."""
    out = Walk()
    out.boxes = boxes(buf, 0, len(buf), "ISOBMFF", out)
    if out.findings:
        return out
    if not out.boxes or out.boxes[0].type != b"ftyp":
        out.findings.append(bad(R.CORRUPT, "the first box is not 'ftyp'"))
        return out
    meta = next((b for b in out.boxes if b.type == b"meta"), None)
    if meta is None:
        out.findings.append(bad(R.CORRUPT, "no 'meta' box: no image item is described"))
        return out
    inner = boxes(buf, meta.body + 4, meta.end, "'meta' box", out)  # meta is a FullBox: version and flags first
    if out.findings:
        return out
    idat = next((b for b in inner if b.type == b"idat"), None)
    iloc = next((b for b in inner if b.type == b"iloc"), None)
    if iloc is None:
        out.findings.append(bad(R.CORRUPT, "no 'iloc' box in 'meta': the image data cannot be located"))
        return out
    finding = _extents(buf, iloc, idat)
    if finding is not None:
        out.findings.append(finding)
    return out


def _extents(buf, iloc: Box, idat: Box | None) -> Finding | None:
    """Every extent (ISO/IEC 14496-12 8.11.3, versions 0-2) inside the file, or inside ``idat``."""
    pos, end, size = iloc.body, iloc.end, len(buf)

    def take(n: int) -> int:
        nonlocal pos
        if n == 0:
            return 0
        if pos + n > end:
            raise _Cut
        value = int.from_bytes(buf[pos : pos + n], "big")
        pos += n
        return value

    try:
        version = take(1)
        take(3)  # flags
        if version > 2:
            return bad(R.CORRUPT, f"'iloc' box version {version} (0-2 are defined)")
        sizes = take(2)
        offset_size, length_size, base_size = sizes >> 12, (sizes >> 8) & 15, (sizes >> 4) & 15
        index_size = sizes & 15 if version else 0
        if any(s not in (0, 4, 8) for s in (offset_size, length_size, base_size, index_size)):
            return bad(
                R.CORRUPT,
                f"'iloc' box field sizes {offset_size}/{length_size}/{base_size}/{index_size} "
                "(each must be 0, 4 or 8 bytes)",
            )
        items = take(2 if version < 2 else 4)
        for _ in range(items):  # each item consumes bytes of the box: a hostile count ends at the box's end
            item = take(2 if version < 2 else 4)
            method = take(2) & 15 if version else 0
            take(2)  # data reference index
            base = take(base_size)
            extents = take(2)
            if not index_size + offset_size + length_size:
                extents = min(extents, 1)  # every extent is (base, 0): one says all, and each reads no byte
            for _ in range(extents):
                take(index_size)
                offset, length = base + take(offset_size), take(length_size)
                if method == 0 and offset + length > size:
                    return bad(
                        R.TRUNCATED,
                        f"image item {item}: its data at bytes {offset}..{offset + length} "
                        f"lies past the end of the file ({size} bytes)",
                    )
                if method == 1 and (idat is None or offset + length > idat.end - idat.body):
                    room = 0 if idat is None else idat.end - idat.body
                    return bad(
                        R.CORRUPT,
                        f"image item {item}: its data at {offset}..{offset + length} of 'idat' "
                        f"lies outside it ({room} bytes)",
                    )
    except _Cut:
        return bad(R.CORRUPT, f"'iloc' box at offset {iloc.start} ends inside its item list")
    return None


class _Cut(Exception):
    """The iloc box ended before the fields it declares."""


def walk_jxl(buf) -> Walk:
    """JPEG XL: a bare codestream has no container to walk (the decoder reads it); the container's
    boxes are whole and its partial codestream boxes (``jxlp``) numbered 0, 1, ... with the last flagged."""
    out = Walk()
    if bytes(buf[:12]) != JXL_SIGNATURE:
        return out
    out.boxes = boxes(buf, 0, len(buf), "JPEG XL container", out)
    if out.findings:
        return out
    parts = [b for b in out.boxes if b.type == b"jxlp"]
    if not parts and not any(b.type == b"jxlc" for b in out.boxes):
        out.findings.append(bad(R.TRUNCATED, "JPEG XL container without a codestream box ('jxlc' or 'jxlp')"))
        return out
    for expected, box in enumerate(parts):
        if box.end - box.body < 4:
            out.findings.append(bad(R.CORRUPT, f"'jxlp' box at offset {box.start} lacks its sequence number"))
            return out
        (index,) = struct.unpack_from(">I", buf, box.body)
        number, last = index & 0x7FFFFFFF, bool(index >> 31)
        if number != expected:
            out.findings.append(
                bad(
                    R.CORRUPT,
                    f"'jxlp' box at offset {box.start} is part {number}, not {expected}: "
                    "codestream parts lost, doubled or out of order",
                )
            )
            return out
        if last != (box is parts[-1]):
            what = "is flagged last but more follow" if last else "is the last one but not flagged last"
            out.findings.append(bad(R.TRUNCATED if not last else R.CORRUPT, f"'jxlp' part {number} {what}"))
            return out
    return out


# --------------------------------------------------------------------------- checkers


#: format -> (the module whose import registers its Pillow decoder, or None for Pillow's own; how to install it)
DECODERS: dict[str, tuple[str | None, str]] = {
    "avif": (None, "pip install -U 'pillow>=11.3' (its wheels carry libavif)"),
    "heif": ("pillow_heif", "pip install 'dsclean[heif]'"),
    "jxl": ("pillow_jxl", "pip install 'dsclean[jxl]'"),
}
_ready: dict[str, str | None] = {}  # format -> None (decoder ready) or why it is not


def decoder_missing(fmt: str) -> str | None:
    """None if this format's decoder is installed (registering it with Pillow on first use), else why not."""
    if fmt not in _ready:
        module, install = DECODERS[fmt]
        hint = f"install it with {install}"
        with importguard.guarded():
            try:
                if module is None:
                    from PIL import features

                    _ready[fmt] = None if features.check("avif") else f"this Pillow has no AVIF support; {hint}"
                else:
                    plugin = importlib.import_module(module)
                    if module == "pillow_heif":
                        plugin.register_heif_opener()
                    _ready[fmt] = None
            except ImportError:
                _ready[fmt] = f"no {fmt.upper()} decoder is installed ({module}); {hint}"
    return _ready[fmt]


def _check(walk: Walk, data, v: Verdict, opts, fmt: str) -> None:
    v.add(walk.findings)
    if v.status == R.BAD:
        return
    missing = decoder_missing(fmt)
    if missing is not None:
        v.mark(R.WARN, R.UNSUPPORTED, f"the {fmt.upper()} container is whole, the image was not decoded: {missing}")
        return
    check_image._check_with_pillow(data, v, opts)


def check_avif(data, v: Verdict, opts) -> None:
    """AVIF: the ISOBMFF box walk and item extents, then Pillow's AVIF decoder (libavif), every frame."""
    _check(walk_heif(data), data, v, opts, "avif")


def check_heif(data, v: Verdict, opts) -> None:
    """HEIF/HEIC: the ISOBMFF box walk and item extents, then libheif through pillow-heif."""
    _check(walk_heif(data), data, v, opts, "heif")


def check_jxl(data, v: Verdict, opts) -> None:
    """JPEG XL: the container's boxes and codestream part numbers (a bare codestream has none), then libjxl."""
    walk = walk_jxl(data)
    _check(walk, data, v, opts, "jxl")
    if v.status == R.BAD and v.reason == R.CORRUPT and not walk.boxes and "Generic Error" in (v.detail or ""):
        # libjxl's only words for a bad codestream; a bare one carries no sizes to tell a cut from damage
        v.detail = (
            "libjxl cannot decode the codestream (a bare JPEG XL codestream has no sizes to tell a cut "
            "file from a damaged one)"
        )


CHECKERS = {"avif": check_avif, "heif": check_heif, "jxl": check_jxl}
