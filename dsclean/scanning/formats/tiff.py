"""TIFF structure: the chain of image directories (pages) and where their pixel data lies (TIFF 6.0, BigTIFF).

Writers often put a directory after the pixel data it describes, so a cut file can
lose whole pages, or keep a directory whose strips lie past the end. The walk visits
every directory of the chain (every page) and checks that each strip or tile
(offset + byte count) lies inside the file, and that the chain does not loop. Where pages
carry a PageNumber tag (297: page number, total pages or 0 if unknown), no number is below
the total's range or given to two pages (a doubled directory).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ... import reasons as R
from ..verdict import Finding, bad

#: tag -> what it locates: strips, or tiles (offsets tag, byte counts tag)
_DATA_TAGS = {"strip": (273, 279), "tile": (324, 325)}
#: TIFF field type -> struct code, for the integer types offsets and counts use
_INT_TYPES = {3: "H", 4: "I", 16: "Q", 13: "I"}  # SHORT, LONG, LONG8, IFD
_TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4, 16: 8, 17: 8, 18: 8}
MAX_PAGES = 100_000  # a longer chain is not walked further (no real file has one)
PAGE_NUMBER = 297


@dataclass
class Walk:
    pages: int = 0
    findings: list[Finding] = field(default_factory=list)


def walk(data) -> Walk:
    """Visit every directory in the chain; check each page's strips or tiles lie inside the file."""
    out, n = Walk(), len(data)
    if n < 8:
        out.findings.append(bad(R.TRUNCATED, f"TIFF header needs 8 bytes; file has {n}"))
        return out
    e = "<" if data[:2] == b"II" else ">"
    (version,) = struct.unpack_from(e + "H", data, 2)
    big = version == 43
    if big:
        if n < 16:
            out.findings.append(bad(R.TRUNCATED, f"BigTIFF header needs 16 bytes; file has {n}"))
            return out
        (ifd,) = struct.unpack_from(e + "Q", data, 8)
    else:
        (ifd,) = struct.unpack_from(e + "I", data, 4)
    fmt = _Format(e, big)
    seen: set[int] = set()
    numbered: dict[int, int] = {}  # PageNumber -> the chain's page that carries it
    while ifd and out.pages < MAX_PAGES:
        page = out.pages
        if ifd in seen:
            out.findings.append(
                bad(R.CORRUPT, f"TIFF directory chain loops: page {page} points back to the directory at byte {ifd}")
            )
            return out
        seen.add(ifd)
        entries = fmt.directory(data, ifd)
        if entries is None:
            where = "first directory" if page == 0 else f"directory of page {page}"
            out.findings.append(
                bad(R.TRUNCATED, f"TIFF {where} at byte {ifd} lies past the end of the file ({n} bytes)")
            )
            return out
        out.pages += 1
        finding = _check_data(data, fmt, entries, page) or _page_number(data, fmt, entries, page, numbered)
        if finding is not None:
            out.findings.append(finding)
            return out
        ifd = fmt.next_ifd(data, ifd, len(entries))
    return out


class _Format:
    """Classic TIFF (12-byte entries, 32-bit offsets) or BigTIFF (20-byte entries, 64-bit offsets)."""

    def __init__(self, e: str, big: bool) -> None:
        self.e, self.big = e, big
        self.count, self.entry, self.off = ("Q", 20, "Q") if big else ("H", 12, "I")
        self.inline = 8 if big else 4
        self.count_size, self.off_size = (8, 8) if big else (2, 4)

    def directory(self, data, ifd: int) -> list[tuple[int, int, int, int]] | None:
        """(tag, type, count, position of the value or of its offset) of each entry; None if cut."""
        if ifd + self.count_size > len(data):
            return None
        (count,) = struct.unpack_from(self.e + self.count, data, ifd)
        first = ifd + self.count_size
        if first + count * self.entry + self.off_size > len(data):
            return None
        head, value_at = self.e + ("HHQ" if self.big else "HHI"), 12 if self.big else 8
        out = []
        for i in range(count):
            at = first + i * self.entry
            out.append((*struct.unpack_from(head, data, at), at + value_at))
        return out

    def next_ifd(self, data, ifd: int, count: int) -> int:
        return struct.unpack_from(self.e + self.off, data, ifd + self.count_size + count * self.entry)[0]

    def values(self, data, typ: int, count: int, at: int) -> tuple[int, ...] | None:
        """An integer array value (inline or at its offset); None if it lies outside the file or is not integers."""
        code = _INT_TYPES.get(typ)
        if code is None:
            return None
        size = _TYPE_SIZES[typ] * count
        if size > self.inline:
            (at,) = struct.unpack_from(self.e + self.off, data, at)
        if at + size > len(data):
            return None
        return struct.unpack_from(f"{self.e}{count}{code}", data, at)


def _page_number(data, fmt: _Format, entries, page: int, numbered: dict[int, int]) -> Finding | None:
    """The page's PageNumber, if it has one: inside 0..total-1 when the total is known, and its own."""
    entry = next(((typ, count, at) for tag, typ, count, at in entries if tag == PAGE_NUMBER), None)
    if entry is None or entry[1] != 2:
        return None
    values = fmt.values(data, *entry)
    if values is None:
        return None  # not integers or outside the file: readers ignore the tag, and so do we
    number, total = values
    if total and number >= total:
        return bad(R.CORRUPT, f"TIFF page {page}: PageNumber says page {number} of {total} (pages are numbered from 0)")
    if number in numbered:
        return bad(
            R.CORRUPT,
            f"TIFF pages {numbered[number]} and {page} both say they are page {number} "
            "(PageNumber): a directory is doubled",
        )
    numbered[number] = page
    return None


def _check_data(data, fmt: _Format, entries, page: int) -> Finding | None:
    """Every strip/tile of one page inside the file; as many byte counts as offsets."""
    n = len(data)
    by_tag = {tag: (typ, count, at) for tag, typ, count, at in entries}
    for unit, (offsets_tag, counts_tag) in _DATA_TAGS.items():
        if offsets_tag not in by_tag:
            continue
        offsets = fmt.values(data, *by_tag[offsets_tag])
        if offsets is None:
            return bad(R.TRUNCATED, f"TIFF page {page}: its {unit} offsets lie outside the file ({n} bytes)")
        if counts_tag not in by_tag:
            return None  # readers estimate the byte counts; nothing to check against
        counts = fmt.values(data, *by_tag[counts_tag])
        if counts is None:
            return bad(R.TRUNCATED, f"TIFF page {page}: its {unit} byte counts lie outside the file ({n} bytes)")
        if len(counts) != len(offsets):
            return bad(R.CORRUPT, f"TIFF page {page}: {len(offsets)} {unit} offsets but {len(counts)} byte counts")
        ends = [o + c for o, c in zip(offsets, counts)]
        last = max(ends, default=0)
        if last > n:
            i = next(i for i, end in enumerate(ends) if end > n)
            return bad(
                R.TRUNCATED,
                f"TIFF page {page}: {unit} {i} at byte {offsets[i]} needs {counts[i]} bytes; the file ends at {n}",
            )
    return None
