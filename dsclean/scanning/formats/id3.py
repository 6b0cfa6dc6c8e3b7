"""ID3 and APE tags: metadata that taggers put around MP3 (and sometimes FLAC) streams.

The audio parsers skip them to find where the audio really starts and ends.
ID3v2 (https://id3.org/id3v2.4.0-structure): "ID3", version, flags, a 28-bit
syncsafe size, plus a 10-byte footer when flag 0x10 is set. ID3v1: the last 128
bytes, starting "TAG". Lyrics3v2: ends "<6-digit size>LYRICS200" before any ID3v1 tag.
APEv2: a 32-byte footer "APETAGEX" before those.
"""

from __future__ import annotations

import struct


def id3v2_end(buf, pos: int) -> int | None:
    """Offset just past the ID3v2 tag starting at ``pos`` (None if there is none or its header is cut).

    The returned offset may lie past the end of ``buf``: the caller decides what a cut tag means.
    """
    head = bytes(buf[pos : pos + 10])
    if len(head) < 10 or head[:3] != b"ID3":
        return None
    size = (head[6] & 0x7F) << 21 | (head[7] & 0x7F) << 14 | (head[8] & 0x7F) << 7 | (head[9] & 0x7F)
    return pos + 10 + size + (10 if head[5] & 0x10 else 0)


def trailing_tags_start(buf, start: int) -> int:
    """Where ID3v1, Lyrics3v2 and APEv2 tags at the end of ``buf`` begin (``len(buf)`` if there are none)."""
    end = len(buf)
    if end - start >= 128 and buf[end - 128 : end - 125] == b"TAG":
        end -= 128
    if end - start >= 15 and buf[end - 9 : end] == b"LYRICS200" and bytes(buf[end - 15 : end - 9]).isdigit():
        end = max(start, end - 15 - int(buf[end - 15 : end - 9]))
    if end - start >= 32 and buf[end - 32 : end - 24] == b"APETAGEX":
        (size,) = struct.unpack_from("<I", buf, end - 20)  # tag size, footer included, header excluded
        (flags,) = struct.unpack_from("<I", buf, end - 12)
        end = max(start, end - size - (32 if flags & 0x80000000 else 0))
    return end
