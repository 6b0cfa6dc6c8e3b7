"""JPEG structure: the header's marker segments and the Multi-Picture Format (MPF) index.

A multi-picture JPEG (MPO: stereo cameras, phones' depth or gain maps, large previews)
is a primary JPEG followed by more JPEGs, listed in an APP2 "MPF" segment of the
primary's header (CIPA DC-007): a TIFF-structured index whose MP Entry tag (0xB002)
gives, for each image, its size and its offset from the start of the MP header. The
image checker decodes every one of them; this module finds them and holds the index's order rule
(:func:`order_finding`: each image inside the file, starting with an SOI, after the one before it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ... import reasons as R
from ..verdict import Finding, bad, warn

_MP_ENTRY = 0xB002
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})  # markers without a length: TEM, RSTn, SOI


@dataclass(frozen=True)
class Picture:
    """One image listed in the MPF index (the primary, number 0, is not listed here)."""

    number: int  # position in the MPF index, from 0
    start: int  # file offset of its SOI
    size: int


def mpf_pictures(data) -> tuple[list[Picture], int, list[Finding]]:
    """The additional images an MPF index lists: (pictures, images in the index, findings).

    A file without an MPF segment gives ([], 1, []). An index that cannot be read is a
    warning: every decoder then shows the primary image alone (Pillow says so too).
    """
    segment = _find_mpf(data)
    if segment is None:
        return [], 1, []
    base, end = segment
    try:
        return _read_index(data, base, end)
    except (struct.error, ValueError) as exc:
        return (
            [],
            1,
            [
                warn(
                    R.NONCONFORMING,
                    f"JPEG MPF index at byte {base} cannot be read ({exc}): decoders show the primary image only",
                )
            ],
        )


def _find_mpf(data) -> tuple[int, int] | None:
    """(start of the MP header, end of its APP2 segment), walking the header's marker segments up to SOS."""
    return find_app(data, 0xE2, b"MPF\0")


def find_app(data, app: int, signature: bytes) -> tuple[int, int] | None:
    """(start of the payload after ``signature``, end of the segment) of the first APPn segment ``app``
    whose payload starts with ``signature``, walking the header's marker segments up to SOS."""
    n, pos = len(data), 2
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return None  # not where a marker should be: libjpeg judges the header, not this walk
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker in (0xDA, 0xD9):  # start of scan / end of image: no more header segments
            return None
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if marker == app and data[pos + 4 : pos + 4 + len(signature)] == signature:
            return pos + 4 + len(signature), pos + 2 + length
        pos += 2 + length
    return None


_ORIENTATION = 0x0112


def exif_orientation(data) -> int | None:
    """The EXIF Orientation (1..8) in a JPEG's APP1 segment, or None (no EXIF, no tag, unreadable):
    IFD0 read straight from the bytes, without a decoder (a fact, never a finding)."""
    segment = find_app(data, 0xE1, b"Exif\0\0")
    if segment is None:
        return None
    base, end = segment
    try:
        order = bytes(data[base : base + 4])
        if order not in (b"II*\0", b"MM\0*"):
            return None
        e = "<" if order[0] == 0x49 else ">"
        (ifd,) = struct.unpack_from(e + "I", data, base + 4)
        (count,) = struct.unpack_from(e + "H", data, base + ifd)
        for i in range(min(count, 512)):
            at = base + ifd + 2 + 12 * i
            if at + 12 > end:
                return None
            tag, typ, n = struct.unpack_from(e + "HHI", data, at)
            if tag == _ORIENTATION:
                (value,) = struct.unpack_from(e + "H", data, at + 8)
                return value if typ == 3 and n == 1 and 1 <= value <= 8 else None
    except struct.error:
        return None
    return None


def _read_index(data, base: int, end: int) -> tuple[list[Picture], int, list[Finding]]:
    order = bytes(data[base : base + 4])
    if order not in (b"II*\0", b"MM\0*"):
        raise ValueError(f"byte order mark {order!r}")
    e = "<" if order[0] == 0x49 else ">"
    (ifd,) = struct.unpack_from(e + "I", data, base + 4)
    (count,) = struct.unpack_from(e + "H", data, base + ifd)
    for i in range(count):
        tag, _type, n, value = struct.unpack_from(e + "HHII", data, base + ifd + 2 + 12 * i)
        if tag == _MP_ENTRY:
            break
    else:
        raise ValueError("no MP Entry tag")
    if n % 16 or not n:
        raise ValueError(f"MP Entry holds {n} bytes, not a multiple of 16")
    at = base + value
    if at + n > end:
        raise ValueError(f"MP Entry list at byte {at} runs past its APP2 segment")
    entries = [struct.unpack_from(e + "III", data, at + 16 * k)[1:] for k in range(n // 16)]
    pictures = [Picture(k, base + offset, size) for k, (size, offset) in enumerate(entries) if k]
    # entry 0 is the primary image itself (offset 0: the start of the file)
    finding = order_finding(data, [Picture(0, 0, entries[0][0]), *pictures])
    if finding is not None:
        return [], n // 16, [finding]  # a broken index: the listed images are not decoded one by one
    return pictures, n // 16, []


def order_finding(data, pictures: list[Picture]) -> Finding | None:
    """The MPF image order rule (CIPA DC-007 5.2.3.3.3: the individual images follow one another): every
    entry starts inside the file, with an SOI, after the previous one ends. An entry's size running past
    the end of the file is left to the decode (Pillow's MPO writer records wrong sizes; the image may be whole)."""
    size = len(data)
    for prev, pic in zip([None, *pictures], pictures):
        where = f"MPF index rule (images in order, not overlapping, each an SOI inside the file): image {pic.number}"
        if pic.start >= size:
            return bad(R.TRUNCATED, f"{where} starts at byte {pic.start}, past the end of the file ({size} bytes)")
        if prev is not None and pic.start < prev.start + prev.size:
            what = "before" if pic.start <= prev.start else "inside"
            return bad(
                R.CORRUPT,
                f"{where} starts at byte {pic.start}, {what} image {prev.number} "
                f"(bytes {prev.start}..{prev.start + prev.size})",
            )
        if data[pic.start : pic.start + 2] != b"\xff\xd8":
            return bad(R.CORRUPT, f"{where} has no JPEG start-of-image marker at its offset (byte {pic.start})")
    return None
