"""BMP structure: the run-length encoded bitmaps (BI_RLE8, BI_RLE4) walked run by run.

An RLE bitmap is a stream of runs, escapes (end of line, end of bitmap, delta moves)
and literal ("absolute") runs. Pillow clips a run that overruns its row and pads
missing rows; other decoders refuse such a file. The walk checks that every run and
every move stays inside the bitmap and that the stream reaches its end-of-bitmap marker.
"""

from __future__ import annotations

import struct

from ... import reasons as R
from ..verdict import Finding, bad, warn

_RLE8, _RLE4 = 1, 2


def rle_findings(data) -> list[Finding]:
    """Walk an RLE8/RLE4 bitmap; [] for any other BMP (Pillow's decode checks those)."""
    n = len(data)
    if n < 54:
        return []
    (header_size,) = struct.unpack_from("<I", data, 14)
    if header_size < 40:  # OS/2 1.x core header: no compression field
        return []
    (pixels_at,) = struct.unpack_from("<I", data, 10)
    width, height, _planes, bits, compression, size = struct.unpack_from("<iiHHII", data, 18)
    if compression not in (_RLE8, _RLE4) or bits != (8 if compression == _RLE8 else 4) or width <= 0 or height <= 0:
        return []
    name = "BMP RLE8" if compression == _RLE8 else "BMP RLE4"
    end = min(n, pixels_at + size) if size else n
    if pixels_at + size > n and size:
        return [bad(R.TRUNCATED, f"{name} bitmap at byte {pixels_at} declares {size} bytes; the file ends at {n}")]
    return _walk(data, pixels_at, end, width, height, compression == _RLE4, name)


def _walk(data, pos: int, end: int, width: int, height: int, rle4: bool, name: str) -> list[Finding]:
    x = y = 0  # y counts rows from the bottom, as the stream does
    while pos + 2 <= end:
        count, value = data[pos], data[pos + 1]
        here = pos
        pos += 2
        if count:  # encoded run: count pixels of one value (RLE4: two alternating values)
            if y >= height or x + count > width:
                return [
                    bad(
                        R.CORRUPT,
                        f"{name}: a run of {count} pixels at byte {here} lies outside the {width}x{height} "
                        f"bitmap (row {y}, column {x})",
                    )
                ]
            x += count
        elif value == 0:  # end of line
            x, y = 0, y + 1
            if y > height:
                return [bad(R.CORRUPT, f"{name}: end of line at byte {here} moves past the last of {height} rows")]
        elif value == 1:  # end of bitmap
            return []
        elif value == 2:  # delta: move right and up
            if pos + 2 > end:
                break
            x, y = x + data[pos], y + data[pos + 1]
            pos += 2
            if x > width or y > height:
                return [
                    bad(
                        R.CORRUPT,
                        f"{name}: a delta at byte {here} moves outside the {width}x{height} bitmap "
                        f"(to row {y}, column {x})",
                    )
                ]
        else:  # absolute run: `value` literal pixels, padded to a 16-bit boundary
            nbytes = (value + 1) // 2 if rle4 else value
            if y >= height or x + value > width:
                return [
                    bad(
                        R.CORRUPT,
                        f"{name}: a literal run of {value} pixels at byte {here} lies outside the "
                        f"{width}x{height} bitmap (row {y}, column {x})",
                    )
                ]
            x += value
            pos += nbytes + (nbytes & 1)
            if pos > end:
                break
    if y >= height or (y == height - 1 and x == width):
        return [
            warn(R.NONCONFORMING, f"{name}: every row is present but the end-of-bitmap marker is missing (byte {end})")
        ]
    return [
        bad(
            R.TRUNCATED,
            f"{name}: the pixel data ends at byte {end} at row {y} of {height}, without an end-of-bitmap marker",
        )
    ]
