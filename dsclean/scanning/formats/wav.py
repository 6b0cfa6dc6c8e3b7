"""WAV / RF64 / RIFX structure: the RIFF chunk walk (RIFX: the same chunks, big-endian).

Every chunk's declared size against the bytes present, the ``data`` chunk holding
whole sample frames, a codec libsndfile decodes, and chunks after the audio (LIST,
id3, ...) complete. A RIFF size that says the file is complete while a chunk runs past
the end means a broken size field (corrupt), not a cut (truncated).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ... import reasons as R
from ..verdict import Finding, bad

#: WAV format tags libsndfile decodes: PCM, MS ADPCM, IEEE float, A-law, mu-law, IMA ADPCM,
#: GSM 6.10, G.721, MPEG, MPEG layer 3, WAVE_FORMAT_EXTENSIBLE
CODECS = frozenset({0x0001, 0x0002, 0x0003, 0x0006, 0x0007, 0x0011, 0x0031, 0x0040, 0x0050, 0x0055, 0xFFFE})


@dataclass
class Walk:
    findings: list[Finding] = field(default_factory=list)
    data_start: int | None = None  # offset of the first byte of audio (the data chunk's body)
    codec: int | None = None  # the format tag, when it is one libsndfile does not decode (another decoder may)


def _u16(buf, pos: int, e: str = "<") -> int:
    return struct.unpack_from(e + "H", buf, pos)[0]


def _u32(buf, pos: int, e: str = "<") -> int:
    return struct.unpack_from(e + "I", buf, pos)[0]


def walk(buf) -> Walk:
    """Walk RIFF/RF64 chunks; compare every declared size with the bytes present."""
    out = Walk()
    size, rf64, e = len(buf), buf[:4] == b"RF64", ">" if buf[:4] == b"RIFX" else "<"
    total: int | None = None if rf64 else _u32(buf, 4, e)  # RIFF size; RF64 keeps it in ds64
    block_align: int | None = None
    ds64_data = None
    pos = 12
    while pos + 8 <= size:
        cid, csize, body = bytes(buf[pos : pos + 4]), _u32(buf, pos + 4, e), pos + 8
        if cid == b"ds64" and csize >= 16 and body + 16 <= size:
            total, ds64_data = struct.unpack_from("<QQ", buf, body)
        elif cid == b"fmt " and csize >= 14 and body + 14 <= size:
            block_align = _u16(buf, body + 12, e)
            tag = _u16(buf, body, e)
            if tag not in CODECS:
                # a decoder's limit, not damage: the walk goes on (the chunks after it are still checked)
                out.findings.append(
                    bad(R.UNSUPPORTED, f"WAV codec 0x{tag:04x} (format tag) is not one libsndfile decodes")
                )
                out.codec, block_align = tag, None  # its block layout is the codec's, not one this walk knows
        elif cid == b"data":
            out.data_start = body
            declared = ds64_data if rf64 and csize == 0xFFFFFFFF else csize
            found = _data_findings(declared, size - body, block_align)
            if not found and declared is not None and declared not in (0, 0xFFFFFFFF):
                found = _trailing_findings(buf, body + declared + (declared & 1), total, e)
            out.findings += found
            return out
        if not _is_chunk_id(cid):
            out.findings.append(bad(R.CORRUPT, f"invalid chunk id {cid!r} at offset {pos}"))
            return out
        if body + csize > size:
            out.findings.append(
                _overrun(
                    total, size, f"{cid.decode()!r} chunk at offset {pos} declares {csize} bytes, {size - body} present"
                )
            )
            return out
        pos = body + csize + (csize & 1)
    where = "inside a chunk header" if pos < size else "before any 'data' chunk"
    out.findings.append(_overrun(total, size, f"file ends {where} (offset {pos})"))
    return out


def _trailing_findings(buf, pos: int, total: int | None, e: str = "<") -> list[Finding]:
    """Chunks after ``data`` (LIST, id3, ...): one cut short means the file was cut, though the audio is whole."""
    size = len(buf)
    while pos + 8 <= size:
        cid, csize = bytes(buf[pos : pos + 4]), _u32(buf, pos + 4, e)
        if not _is_chunk_id(cid):
            return []  # padding or junk after the last chunk: libsndfile ignores it, and so do we
        if pos + 8 + csize > size:
            return [
                _overrun(
                    total,
                    size,
                    f"{cid.decode()!r} chunk after the audio (offset {pos}) declares {csize} bytes, {size - pos - 8} present",
                )
            ]
        pos += 8 + csize + (csize & 1)
    if pos < size and _riff_promises_more(total, size):
        return [
            bad(
                R.TRUNCATED,
                f"file ends inside a chunk header after the audio (offset {pos}); RIFF header declares {total} bytes",
            )
        ]
    return []


def _is_chunk_id(cid: bytes) -> bool:
    """RIFF chunk ids are four printable ASCII characters."""
    return all(0x20 <= b < 0x7F for b in cid)


def _riff_promises_more(total: int | None, size: int) -> bool:
    """True if the RIFF (or ds64) size is known and says the file is longer than it is."""
    return total is not None and total not in (0, 0xFFFFFFFF) and total + 8 > size


def _overrun(total: int | None, size: int, what: str) -> Finding:
    """A chunk runs past the end: truncated unless the RIFF header says the file is complete (then its size field is broken)."""
    if total is None or total in (0, 0xFFFFFFFF) or _riff_promises_more(total, size):
        return bad(R.TRUNCATED, what)
    return bad(R.CORRUPT, f"{what}, yet the RIFF header says the file is complete at {total + 8} bytes")


def _data_findings(declared: int | None, present: int, block_align: int | None) -> list[Finding]:
    """The ``data`` chunk: bytes declared vs present, and whole sample frames."""
    if declared == 0 and present > 0:
        # a streaming writer that never patched its header: libsndfile reads 0 frames
        return [bad(R.EMPTY, f"data chunk declares 0 bytes but {present} bytes follow (header never finalised)")]
    if declared is None or declared == 0xFFFFFFFF:
        declared = None  # unknown length (streamed): the data runs to the end of the file
    elif declared > present:
        return [bad(R.TRUNCATED, f"data chunk declares {declared} bytes, {present} present")]
    have = present if declared is None else declared
    if block_align and have % block_align:
        reason = R.TRUNCATED if declared is None else R.CORRUPT
        return [bad(reason, f"data chunk holds {have} bytes, not a whole number of {block_align}-byte frames")]
    return []
