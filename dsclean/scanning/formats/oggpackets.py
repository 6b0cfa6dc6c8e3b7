"""Ogg's last granule position against the packets: how many samples a Vorbis or Opus stream really holds.

The granule position of a page counts the samples decoded up to the last packet completed on it; the
last page of a stream (end-of-stream flag) says how long the decoded stream is. Every packet's
duration is known without decoding it: an Opus packet's from its TOC byte (RFC 6716 3.1: frame size x
frame count, at 48 kHz), a Vorbis packet's from its mode's block size (the modes read back from the end
of the setup header, as FFmpeg's Vorbis parser does; each audio packet gives a quarter of the previous
block plus a quarter of its own, the first none). So the rule (RFC 7845 4; Vorbis I A.2):

- the last granule position may trim the samples of the last page's packets (end trimming), never
  more, and never promise samples the packets do not hold (a stream whose audio pages were lost or
  replaced behind a valid end-of-stream page);
- Opus: the last granule position is at least the pre-skip (the decoded length is granule - pre-skip).

The stream's starting offset is taken from its first audio page (its granule minus the samples its
packets give), so a stream cut out of a longer one (a non-zero start) keeps to the rule. A stream of
another codec (FLAC, Speex, ...) or with headers this walk cannot read is left to the decoder.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ... import reasons as R
from ..verdict import Finding, bad

#: samples per frame (48 kHz) of each Opus TOC configuration (RFC 6716 Table 2): SILK 10/20/40/60 ms,
#: Hybrid 10/20 ms, CELT 2.5/5/10/20 ms
_OPUS_FRAME = [480, 960, 1920, 2880] * 3 + [480, 960] * 2 + [120, 240, 480, 960] * 4
#: bytes of a Vorbis setup header read back from its end for the modes: 64 modes of 41 bits, and the count
_MODES_WINDOW = 340


@dataclass
class Stream:
    """One logical stream's packet accounting."""

    codec: str = ""  # "opus", "vorbis"; "" = no rule (another codec, or headers not understood)
    packets: int = 0  # packets completed
    start: int = -1  # file offset of the packet in progress (-1: between packets)
    head: bytes = b""  # its first bytes
    parts: list[tuple[int, int]] = field(default_factory=list)  # Vorbis setup header: its byte ranges
    pre_skip: int = 0
    blocks: tuple[int, int] = (0, 0)  # Vorbis short and long block sizes
    modes: list[int] = field(default_factory=list)  # Vorbis: each mode's block flag
    prev_block: int = 0
    total: int = 0  # samples of the audio packets completed so far
    page_samples: int = 0  # of those, on the last page that completed a packet
    offset: int | None = None  # the stream's start: first audio page's granule minus its samples
    granule: int = -1  # the last granule position seen


def page(s: Stream, buf, data_at: int, lacing: bytes, granule: int) -> None:
    """Account for one page of stream ``s``: its packets' samples, and its granule position."""
    if s.packets and not s.codec:
        return
    at, samples = data_at, 0
    for lace in lacing:
        if s.start < 0:
            s.start, s.head = at, bytes(buf[at : at + 2])
            if s.codec == "vorbis" and s.packets == 2:
                s.parts = []
        if s.codec == "vorbis" and s.packets == 2:
            s.parts.append((at, at + lace))
        at += lace
        if lace < 255:
            samples += _packet_done(s, buf, at)
            s.start = -1
            if s.packets and not s.codec:
                return
    s.total += samples
    if granule == -1:
        return
    if samples or s.offset is not None:
        s.page_samples = samples
    if s.offset is None and samples:
        s.offset = granule - s.total
    s.granule = granule


def _packet_done(s: Stream, buf, end: int) -> int:
    """A packet of ``s`` ended at ``end``: read it as a header, or give its samples."""
    n, s.packets = s.packets, s.packets + 1
    if n == 0:
        _identify(s, bytes(buf[s.start : min(end, s.start + 30)]))
        return 0
    if s.codec == "opus":
        return 0 if n == 1 else _opus_samples(s.head)
    if n == 1:
        return 0
    if n == 2:
        setup = b"".join(bytes(buf[a:b]) for a, b in s.parts)
        s.modes = _vorbis_modes(setup) or []
        if not s.modes:
            s.codec = ""
        return 0
    if not s.head or s.head[0] & 1:
        return 0  # an empty packet, or not an audio packet: no samples
    mode = (s.head[0] >> 1) & ((1 << (len(s.modes) - 1).bit_length()) - 1)
    if mode >= len(s.modes):
        s.codec = ""  # the decoder refuses the packet; no length to hold the granule against
        return 0
    block = s.blocks[s.modes[mode]]
    samples = (s.prev_block + block) // 4 if s.prev_block else 0
    s.prev_block = block
    return samples


def _identify(s: Stream, first: bytes) -> None:
    """The codec from the stream's first packet: OpusHead (pre-skip) or the Vorbis identification header."""
    if first[:8] == b"OpusHead" and len(first) >= 19:
        s.codec, s.pre_skip = "opus", struct.unpack_from("<H", first, 10)[0]
    elif first[:7] == b"\x01vorbis" and len(first) >= 30:
        short, long = 1 << (first[28] & 15), 1 << (first[28] >> 4)
        if 64 <= short <= long <= 8192:
            s.codec, s.blocks = "vorbis", (short, long)


def _opus_samples(head: bytes) -> int:
    """Samples (48 kHz) an Opus packet decodes to, from its TOC byte and, for code 3, its frame count."""
    if not head:
        return 0  # an empty packet: a lost frame (RFC 7845 allows it), the decoder conceals it: no length
    toc = head[0]
    code = toc & 3
    count = (1, 2, 2, (head[1] & 63) if len(head) > 1 else 0)[code]
    return _OPUS_FRAME[toc >> 3] * count


def _vorbis_modes(setup: bytes) -> list[int] | None:
    """Each mode's block flag, read back from the end of the Vorbis setup header (the mode count cannot be
    read forwards without decoding the codebooks): after the framing bit, 41-bit modes whose window and
    transform types are 0, up to the 6-bit count that matches (FFmpeg's vorbis_parser does the same)."""
    rev = setup[::-1]
    k = next((i for i, b in enumerate(rev) if b), None)
    if k is None:
        return None
    window = rev[k : k + _MODES_WINDOW]
    bits = len(window) * 8
    value = int.from_bytes(window, "big")

    def get(at: int, n: int) -> int:
        return (value >> (bits - at - n)) & ((1 << n) - 1)

    first = 9 - rev[k].bit_length()  # bits up to and including the framing bit
    count = found = 0
    at = first
    while at + 47 <= bits and count < 64:
        if get(at, 8) > 63 or get(at + 8, 16) or get(at + 24, 16):
            break
        count += 1
        if get(at + 41, 6) + 1 == count:
            found = count
        at += 41
    if not found:
        return None
    return [get(first + 41 * j + 40, 1) for j in range(found)][::-1]


def findings(streams: dict[int, Stream], ended: dict[int, bool]) -> list[Finding]:
    """The last granule rule, for every ended Vorbis/Opus stream whose packets were accounted for."""
    out: list[Finding] = []
    for serial, s in streams.items():
        if not s.codec or not ended.get(serial) or s.offset is None or s.granule < 0:
            continue
        name = f"Ogg {'Opus' if s.codec == 'opus' else 'Vorbis'} stream {serial:08x}"
        held = s.offset + s.total  # the granule position the packets reach, untrimmed
        rule = "last granule position rule"
        if s.granule > held:
            out.append(
                bad(
                    R.TRUNCATED,
                    f"{name}: the last granule position {s.granule} promises {s.granule - held} samples more than "
                    f"its packets hold ({held}): audio lost before the end-of-stream page ({rule})",
                )
            )
        elif s.granule < held - s.page_samples:
            out.append(
                bad(
                    R.CORRUPT,
                    f"{name}: the last granule position {s.granule} trims {held - s.granule} samples, more than the "
                    f"{s.page_samples} of the last page's packets ({rule})",
                )
            )
        elif s.codec == "opus" and s.granule < s.pre_skip:
            out.append(
                bad(
                    R.CORRUPT,
                    f"{name}: the last granule position {s.granule} is below the pre-skip {s.pre_skip} "
                    f"(a negative length; {rule})",
                )
            )
    return out
