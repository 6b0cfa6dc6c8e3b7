"""MP3 structure: the MPEG audio frame walk.

mpg123 resyncs silently over damage and decodes what a cut file still holds, so every
frame header is walked: lost sync in the middle of the stream (corrupt), a last frame
past the end (truncated), fewer frames than a Xing/Info or VBRI header counts (truncated).
Only those headers promise a length: a VBR stream without one promises none, and an
estimate from its first frame's bitrate is not a promise (:attr:`Walk.promised`).
Zero padding after the last frame is a warning; any other bytes there are damage (bytes
lost inside the last frames look exactly like that), as before.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ... import reasons as R
from ..verdict import Finding, bad, warn
from .id3 import id3v2_end, trailing_tags_start

#: how far into an MP3 (after its ID3v2 tag) the first frame may start
SYNC_WINDOW = 1 << 16

_BITRATES = {  # (MPEG-1?, layer) -> kbps by index
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


@dataclass(frozen=True)
class MpegFrame:
    """One parsed MPEG audio frame header."""

    version: int  # header bits: 3 = MPEG-1, 2 = MPEG-2, 0 = MPEG-2.5
    layer: int  # 1, 2 or 3
    sample_rate: int
    length: int  # bytes, header included; 0 for free-format frames
    mono: bool
    crc: bool

    @property
    def stream(self) -> tuple[int, int, int]:
        """What must stay constant across the frames of one stream."""
        return self.version, self.layer, self.sample_rate


@dataclass
class Walk:
    findings: list[Finding] = field(default_factory=list)
    promised: int | None = None  # frames a Xing/Info/VBRI header counts (the only length an MP3 promises)


def mpeg_frame(buf, pos: int) -> MpegFrame | None:
    """Parse the 4-byte MPEG audio frame header at ``pos``, or None if it is not one."""
    h = bytes(buf[pos : pos + 4])
    if len(h) < 4 or h[0] != 0xFF or h[1] & 0xE0 != 0xE0:
        return None
    version, layer_bits, br_idx, sr_idx = (h[1] >> 3) & 3, (h[1] >> 1) & 3, h[2] >> 4, (h[2] >> 2) & 3
    if version == 1 or layer_bits == 0 or br_idx == 15 or sr_idx == 3:
        return None
    layer, mpeg1 = 4 - layer_bits, version == 3
    sr = _RATES[version][sr_idx]
    kbps, pad = _BITRATES[(mpeg1, layer)][br_idx], (h[2] >> 1) & 1
    if kbps == 0:
        length = 0  # free format: the length is not in the header
    elif layer == 1:
        length = (12 * kbps * 1000 // sr + pad) * 4
    else:
        length = (144 if mpeg1 or layer == 2 else 72) * kbps * 1000 // sr + pad
    return MpegFrame(version, layer, sr, length, h[3] >> 6 == 3, not h[1] & 1)


def audio_span(buf) -> tuple[int, int, list[Finding]]:
    """(start, end) of the MPEG frames: after the ID3v2 tag(s), before trailing ID3v1/APE tags."""
    size, start = len(buf), 0
    while start + 10 <= size and (tag_end := id3v2_end(buf, start)) is not None:
        if tag_end > size:
            return (
                start,
                size,
                [bad(R.TRUNCATED, f"ID3v2 tag declares {tag_end - start} bytes, {size - start} present")],
            )
        start = tag_end
    return start, trailing_tags_start(buf, start), []


def first_frame(buf, start: int, end: int) -> int | None:
    """The first offset where two consecutive valid frame headers agree (tolerates padding after a tag)."""
    pos, limit = start, min(end, start + SYNC_WINDOW)
    while 0 <= pos < limit:
        frame = mpeg_frame(buf, pos)
        if frame and not frame.length:
            return pos  # free format: the walk cannot follow it (and stops there)
        if frame:
            nxt = pos + frame.length
            second = mpeg_frame(buf, nxt)
            if nxt >= end or (second and second.stream == frame.stream):
                return pos
        pos = buf.find(b"\xff", pos + 1, limit)
    return None


def xing_frames(buf, pos: int, frame: MpegFrame) -> int | None:
    """The frame count of a Xing/Info or VBRI header in the first frame, if there is one."""
    side = (17 if frame.mono else 32) if frame.version == 3 else (9 if frame.mono else 17)
    at = pos + 4 + side + (2 if frame.crc else 0)
    if buf[at : at + 4] in (b"Xing", b"Info") and struct.unpack_from(">I", buf, at + 4)[0] & 1:
        return struct.unpack_from(">I", buf, at + 8)[0]
    if buf[pos + 36 : pos + 40] == b"VBRI":
        return struct.unpack_from(">I", buf, pos + 36 + 14)[0]
    return None


def walk(buf) -> Walk:
    """Walk every MPEG frame header: lost sync mid-stream, a last frame past the end, fewer frames than Xing says."""
    out = Walk()
    start, end, out.findings = audio_span(buf)
    if out.findings:
        return out
    pos = first_frame(buf, start, end)
    if pos is None:
        out.findings.append(bad(R.CORRUPT, f"no MPEG audio frame sync within {SYNC_WINDOW} bytes of offset {start}"))
        return out
    first = mpeg_frame(buf, pos)
    assert first is not None
    out.promised, frames = xing_frames(buf, pos, first), 0
    while pos < end:
        if end - pos < 4 and buf[pos] == 0xFF:
            out.findings.append(bad(R.TRUNCATED, f"file ends inside a frame header at offset {pos}"))
            return out
        frame = mpeg_frame(buf, pos)
        if frame is None or frame.stream != first.stream:
            if not any(buf[pos:end]):  # zero padding after the last frame: decoders skip it
                out.findings.append(
                    warn(
                        R.NONCONFORMING,
                        f"{end - pos} zero bytes of padding after the last MPEG frame "
                        f"(offset {pos}, after {frames} frames)",
                    )
                )
                break
            # Anything else is damage: bytes lost inside the last frames look exactly like junk after them.
            out.findings.append(
                bad(R.CORRUPT, f"lost MPEG frame sync at offset {pos} after {frames} frames ({end - pos} bytes left)")
            )
            return out
        if frame.length == 0:
            return out  # free-format stream: frame lengths are not in the headers, nothing more to walk
        if pos + frame.length > end:
            out.findings.append(
                bad(R.TRUNCATED, f"frame {frames} at offset {pos} needs {frame.length} bytes, {end - pos} present")
            )
            return out
        frames, pos = frames + 1, pos + frame.length
    if out.promised is not None and frames - 1 < out.promised:
        out.findings.append(
            bad(R.TRUNCATED, f"Xing/VBRI header counts {out.promised} frames, only {frames - 1} present")
        )
    return out
