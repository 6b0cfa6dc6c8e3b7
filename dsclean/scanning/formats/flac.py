"""FLAC structure: metadata blocks, STREAMINFO's promises, and frames found by their sync codes.

libFLAC checks every frame's header CRC-8 and CRC-16 while it decodes; libsndfile then
only says "unknown error in flac decoder". So when the decode fails, this module finds
*which* frame broke (:func:`damaged_frame`) or that the file was cut
(:func:`tail_finding`). STREAMINFO promises the sample count and, when not all zero, the
MD5 of the decoded samples (:func:`pcm_bytes` gives the bytes it is computed over).
An ID3v2 tag in front of the stream is not FLAC (libFLAC skips it): a warning.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from ... import reasons as R
from ..verdict import Finding, bad, warn
from .id3 import id3v2_end

#: how far back from the end of a FLAC file to look for the last frame header
TAIL_WINDOW = 1 << 20


@dataclass(frozen=True)
class StreamInfo:
    max_block: int
    bits: int  # bits per sample
    total: int  # samples per channel; 0 = unknown
    md5: bytes  # all zero = not computed by the encoder
    min_frame: int = 0  # the smallest frame in bytes, as the encoder recorded it; 0 = unknown


@dataclass
class Walk:
    findings: list[Finding] = field(default_factory=list)
    info: StreamInfo | None = None
    audio_start: int | None = None  # offset of the first frame


def walk(buf) -> Walk:
    """Skip an ID3v2 tag (warning), walk the metadata blocks, read STREAMINFO."""
    out, size, pos = Walk(), len(buf), 0
    if buf[:3] == b"ID3":
        pos = id3v2_end(buf, 0) or 0
        out.findings.append(
            warn(
                R.NONCONFORMING,
                f"an ID3v2 tag ({pos} bytes) comes before the FLAC stream: "
                "libFLAC skips it, the FLAC format does not allow it",
            )
        )
    pos += 4  # "fLaC"
    while True:
        if pos + 4 > size:
            out.findings.append(bad(R.TRUNCATED, f"file ends inside the metadata blocks (offset {pos})"))
            return out
        head, length = buf[pos], int.from_bytes(buf[pos + 1 : pos + 4], "big")
        if head & 0x7F == 127:
            out.findings.append(bad(R.CORRUPT, f"invalid metadata block type 127 at offset {pos}"))
            return out
        if pos + 4 + length > size:
            out.findings.append(
                bad(R.TRUNCATED, f"metadata block at offset {pos} declares {length} bytes, {size - pos - 4} present")
            )
            return out
        if head & 0x7F == 0 and length >= 34:
            body = pos + 4
            (max_block,) = struct.unpack_from(">H", buf, body + 2)
            (packed,) = struct.unpack_from(">Q", buf, body + 10)
            bits = ((packed >> 36) & 0x1F) + 1
            min_frame = int.from_bytes(buf[body + 4 : body + 7], "big")
            out.info = StreamInfo(
                max_block, bits, packed & ((1 << 36) - 1), bytes(buf[body + 18 : body + 34]), min_frame
            )
        pos += 4 + length
        if head & 0x80:
            break
    if out.info is None:
        out.findings.append(bad(R.CORRUPT, "no STREAMINFO block"))
        return out
    out.audio_start = pos
    if pos >= size and out.info.total:
        out.findings.append(
            bad(R.TRUNCATED, f"no audio frames after the metadata, STREAMINFO promises {out.info.total} samples")
        )
    return out


# --------------------------------------------------------------------------- frames


def frame_header(buf, pos: int, end: int, max_block: int) -> tuple[int, int] | None:
    """Parse a FLAC frame header at ``pos`` (checking its CRC-8): (first sample, block size), or None."""
    head = bytes(buf[pos : min(end, pos + 16)])
    if len(head) < 6 or head[1] not in (0xF8, 0xF9) or head[2] >> 4 == 0 or head[2] & 15 == 15:
        return None
    if head[3] >> 4 > 10 or head[3] & 1:
        return None
    num, p = _utf8_number(head, 4)
    if num is None:
        return None
    bs_code, sr_code = head[2] >> 4, head[2] & 15
    extra_bs = {6: 1, 7: 2}.get(bs_code, 0)
    extra_sr = {12: 1, 13: 2, 14: 2}.get(sr_code, 0)
    crc_at = p + extra_bs + extra_sr
    if crc_at >= len(head) or crc8(head[:crc_at]) != head[crc_at]:
        return None
    blocksize = _blocksize(bs_code, head[p : p + extra_bs])
    first = num if head[1] == 0xF9 else num * max_block
    return first, blocksize


def tail_finding(buf, start: int, info: StreamInfo) -> Finding | None:
    """Find the last frame header; if its samples end before STREAMINFO's total or it fails its CRC-16, the file was cut."""
    total = info.total
    end = len(buf) - (128 if len(buf) >= 128 and buf[-128:-125] == b"TAG" else 0)
    lo, hi = max(start, end - TAIL_WINDOW), end - 1
    while True:
        hi = buf.rfind(b"\xff", lo, hi)
        if hi < 0:
            return None
        frame = frame_header(buf, hi, end, info.max_block)
        if frame is not None:
            break
    first, blocksize = frame
    if first + blocksize < total:
        return bad(
            R.TRUNCATED,
            f"the last frame in the file holds samples {first}..{first + blocksize}, STREAMINFO promises {total}",
        )
    if first + blocksize == total and crc16(bytes(buf[hi : end - 2])) != struct.unpack_from(">H", buf, end - 2)[0]:
        return bad(
            R.TRUNCATED,
            f"the last frame (offset {hi}, samples {first}..{total}) fails its CRC-16: the file ends inside it",
        )
    return None


def sequence_finding(buf, start: int, info: StreamInfo) -> Finding | None:
    """Frame order, the promise a FLAC stream's frame (or sample) numbers make: each frame starts at
    the sample the one before it ended, from 0 to STREAMINFO's total. libFLAC decodes frames in any
    order and every frame's CRC passes, so a whole frame lost, doubled or moved decodes "cleanly".

    Frames are found by their sync codes at C speed. A sync code inside a frame's data whose header
    happens to pass its CRC-8 is skipped, since only the frame the sequence expects next is taken;
    the stream is damaged only if the sequence cannot be completed from the frames present."""
    end, total = len(buf), info.total
    if not total or start is None or start + 2 > end or buf[start] != 0xFF:
        return None  # no promised length to follow, or no frame where the audio starts (the decode said why)
    sync = bytes(buf[start : start + 2])
    expected, last, doubled = _follow(buf, sync, start, total, info)
    if doubled is not None:
        return bad(
            R.CORRUPT,
            f"FLAC frame sequence: the frame at byte {doubled} is a copy of the one before it "
            f"(byte {last}): a frame is doubled",
        )
    if expected >= total:
        return None
    nxt = _find_frame(buf, sync, last + 1, end, info, lambda first, _size: first != expected)
    where = f"after the frame at byte {last}, which ends at sample {expected},"
    if nxt is None:
        return bad(
            R.CORRUPT, f"FLAC frame sequence: {where} no frame holds sample {expected}, STREAMINFO promises {total}"
        )
    at, first, _size = nxt
    what = "doubled or out of order" if first < expected else "lost or out of order"
    return bad(
        R.CORRUPT,
        f"FLAC frame sequence: {where} the next frame (byte {at}) starts at sample {first}, "
        f"not {expected}: frames {what}",
    )


def _follow(buf, sync: bytes, pos: int, total: int, info: StreamInfo) -> tuple[int, int, int | None]:
    """Take frames in sequence from ``pos``: (the sample the sequence reached, where its last frame
    starts, where a byte-for-byte copy of that frame follows it, if one does).

    Frames of one stream are of similar size, so after taking a frame the search jumps most of the
    last frame's length ahead (never less than STREAMINFO's smallest frame) and looks at no sync code
    in between. A jump too far shows as finding a later frame (or none): the search then goes back
    to just after the last frame taken and walks byte by byte, so the jump saves time, never a frame."""
    end, expected, first, last, length, jumped = len(buf), 0, -1, pos, 0, False
    while expected < total:
        pos = buf.find(sync, pos, end)
        frame = frame_header(buf, pos, end, info.max_block) if pos >= 0 else None
        if frame is not None and frame[0] == expected and frame[1] > 0:
            if expected:
                length = pos - last
            first, expected, last, jumped = expected, expected + frame[1], pos, True
            pos += max(1, info.min_frame, length - length // 8)
        elif frame is not None and frame[0] == first and buf[pos : 2 * pos - last] == buf[last:pos]:
            return expected, last, pos  # the frame just taken, again, right after itself
        elif jumped and (pos < 0 or frame is not None and frame[0] > expected):
            pos, jumped = last + 1, False  # jumped past the frame: walk from the last one taken
        elif pos < 0:
            break
        else:
            pos += 1
    return expected, last, None


def damaged_frame(buf, start: int, info: StreamInfo, sample: int, look_ahead: int = 16) -> Finding:
    """Name the frame that broke the decode, starting from the one holding ``sample`` (about where
    libFLAC stopped; it decodes a little ahead): the first of the next few frames whose CRC-16 fails,
    whose header (CRC-8) is lost, or after which no frame header follows. Sync codes are searched at
    C speed; CRC-16s are computed over those few frames only."""
    end = len(buf)
    sync = bytes(buf[start : start + 2]) if start + 2 <= end and buf[start] == 0xFF else b"\xff\xf8"
    frame = _find_frame(
        buf, sync, start, end, info, lambda first, size: first <= sample < first + size or first > sample
    )
    if frame is None:
        return bad(
            R.CORRUPT,
            f"FLAC: no valid header (CRC-8) for the frame holding sample {sample}: "
            "its header is damaged or bytes are lost",
        )
    first_checked = frame
    for _ in range(look_ahead):
        at, first, size = frame
        what = f"FLAC frame at byte {at} (samples {first}..{first + size})"
        following = _find_frame(buf, sync, at + 1, end, info, lambda f, _s: f >= first + size)
        if following is not None and following[1] != first + size:
            return bad(
                R.CORRUPT,
                f"{what}: the next frame header found (byte {following[0]}) starts at sample "
                f"{following[1]}, not {first + size}: frames are lost or their headers damaged",
            )
        if following is None and not (info.total and first + size >= info.total):
            return bad(R.CORRUPT, f"{what}: no frame header follows where it should end (frame sync lost)")
        stop = following[0] if following is not None else end
        if crc16(bytes(buf[at : stop - 2])) != struct.unpack_from(">H", buf, stop - 2)[0]:
            return bad(R.CORRUPT, f"{what} fails its CRC-16: its bytes are damaged")
        if following is None:
            break
        frame = following
    at, first, size = first_checked
    return bad(
        R.CORRUPT, f"FLAC frames from byte {at} (sample {first}) pass their CRC-16, but libFLAC cannot decode them"
    )


def _find_frame(buf, sync: bytes, pos: int, end: int, info: StreamInfo, wanted) -> tuple[int, int, int] | None:
    """The first valid frame header at or after ``pos`` for which ``wanted(first sample, block size)``."""
    while (pos := buf.find(sync, pos, end)) >= 0:
        frame = frame_header(buf, pos, end, info.max_block)
        if frame is not None and wanted(*frame):
            return (pos, *frame)
        pos += 1
    return None


def pcm_bytes(block: np.ndarray, bits: int):
    """The bytes STREAMINFO's MD5 covers for ``block`` (samples read as int16 when ``bits`` <= 16, else
    int32, so left-justified): each sample signed little-endian in ceil(bits / 8) bytes, interleaved."""
    if bits == 16:
        return block  # already exactly that (int16, little-endian on every platform numpy runs FLAC on)
    width = (bits + 7) // 8
    shift = (16 if block.dtype == np.int16 else 32) - bits
    values = (block.astype("<i4") >> shift) if shift else block.astype("<i4")
    return np.ascontiguousarray(values.reshape(-1, 1).view(np.uint8)[:, :width])


def _blocksize(code: int, extra: bytes) -> int:
    """Block size from the 4-bit code (and its 8/16-bit trailer for codes 6 and 7)."""
    if code == 1:
        return 192
    if 2 <= code <= 5:
        return 576 << (code - 2)
    if code in (6, 7):
        return int.from_bytes(extra, "big") + 1
    return 256 << (code - 8)


def _utf8_number(head: bytes, p: int) -> tuple[int | None, int]:
    """FLAC's UTF-8-style coded frame/sample number at ``head[p]``: (value, position after it)."""
    b0 = head[p]
    n = 0 if b0 < 0x80 else 8 - (~b0 & 0xFF).bit_length() - 1  # count of continuation bytes
    if b0 >= 0x80 and not 1 <= n <= 6 or b0 == 0xFF or p + 1 + n > len(head):
        return None, p
    value = b0 & (0x7F >> (n + 1)) if n else b0
    for b in head[p + 1 : p + 1 + n]:
        if b & 0xC0 != 0x80:
            return None, p
        value = (value << 6) | (b & 0x3F)
    return value, p + 1 + n


def _crc_table(poly: int, width: int) -> list[int]:
    """Table for a non-reflected CRC of ``width`` bits."""
    top, mask = 1 << (width - 1), (1 << width) - 1
    table = []
    for i in range(256):
        c = i << (width - 8)
        for _ in range(8):
            c = ((c << 1) ^ poly) & mask if c & top else (c << 1) & mask
        table.append(c)
    return table


_CRC8 = _crc_table(0x07, 8)
_CRC16 = _crc_table(0x8005, 16)


def crc8(data: bytes) -> int:
    """FLAC frame header CRC-8 (poly 0x07, init 0)."""
    c = 0
    for b in data:
        c = _CRC8[c ^ b]
    return c


def crc16(data: bytes) -> int:
    """FLAC frame CRC-16 (poly 0x8005, init 0). Pure Python: used on one or two frames of a failing file."""
    c = 0
    for b in data:
        c = ((c << 8) & 0xFFFF) ^ _CRC16[(c >> 8) ^ b]
    return c
