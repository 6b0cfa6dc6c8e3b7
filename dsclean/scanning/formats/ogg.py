"""Ogg structure: the page walk (RFC 3533).

Every page: the capture pattern, the structure version, its bytes present, its CRC-32,
per-stream sequence numbers without gaps, granule positions that never go back (a page on
which no packet ends carries -1 and is skipped); every stream ends with an end-of-stream page, whose
granule position the Vorbis and Opus packets hold (:mod:`.oggpackets`: the last granule position rule).
libvorbis notices neither lost pages, nor pages in the wrong order, nor a missing end.
"""

from __future__ import annotations

import struct
import zlib

from ... import reasons as R
from ..verdict import Finding, bad
from . import oggpackets

_BITREV = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


def ogg_crc(page: bytes) -> int:
    """Ogg's CRC-32 (poly 0x04C11DB7, not reflected, init 0, no final xor), computed at C speed.

    zlib's CRC-32 is the reflected form of the same polynomial, so run it over
    bit-reversed bytes with init/xorout cancelled and bit-reverse the result.
    """
    raw = zlib.crc32(page.translate(_BITREV), 0xFFFFFFFF) ^ 0xFFFFFFFF
    return int(f"{raw:032b}"[::-1], 2)


def walk(buf) -> list[Finding]:
    """Walk every Ogg page: capture pattern, CRC, per-stream sequence numbers, EOS flag, last page complete."""
    size, pos, page = len(buf), 0, 0
    out: list[Finding] = []
    next_seq: dict[int, int] = {}
    ended: dict[int, bool] = {}
    granules: dict[int, int] = {}
    streams: dict[int, oggpackets.Stream] = {}
    while pos < size:
        if size - pos < 27:
            return out + [bad(R.TRUNCATED, f"file ends inside the header of Ogg page {page} (offset {pos})")]
        if buf[pos : pos + 4] != b"OggS":
            return out + [
                bad(R.CORRUPT, f"no Ogg capture pattern at offset {pos} (page {page}): broken page structure")
            ]
        version, htype, granule, serial, seq, crc, nseg = struct.unpack_from("<BBqIIIB", buf, pos + 4)
        if pos + 27 + nseg > size:
            return out + [bad(R.TRUNCATED, f"file ends inside the segment table of Ogg page {page} (offset {pos})")]
        end = pos + 27 + nseg + sum(buf[pos + 27 : pos + 27 + nseg])
        if end > size:
            return out + [
                bad(R.TRUNCATED, f"Ogg page {page} (offset {pos}) needs {end - pos} bytes, {size - pos} present")
            ]
        if version != 0:
            out.append(bad(R.CORRUPT, f"Ogg page {page} (offset {pos}) has stream structure version {version}"))
        if serial in next_seq and seq != next_seq[serial]:
            out.append(
                bad(
                    R.CORRUPT,
                    f"Ogg stream {serial:08x}: page sequence jumps from {next_seq[serial] - 1} to {seq} at offset {pos} (pages lost)",
                )
            )
        if granule < -1:  # -1 is "no packet ends here"; any other negative value is no position
            out.append(
                bad(R.CORRUPT, f"Ogg stream {serial:08x}: granule position {granule} at page {page} (offset {pos})")
            )
        elif granule != -1:
            if granule < granules.get(serial, -1):
                out.append(
                    bad(
                        R.CORRUPT,
                        f"Ogg stream {serial:08x}: granule position goes back from {granules[serial]} "
                        f"to {granule} at page {page} (offset {pos}): pages out of order",
                    )
                )
            granules[serial] = granule
        data = bytes(buf[pos:end])
        if ogg_crc(data[:22] + b"\0\0\0\0" + data[26:]) != crc:
            out.append(bad(R.CORRUPT, f"Ogg page {page} (offset {pos}) fails its CRC-32"))
        next_seq[serial], ended[serial] = seq + 1, bool(htype & 4)
        lacing = bytes(buf[pos + 27 : pos + 27 + nseg])
        oggpackets.page(streams.setdefault(serial, oggpackets.Stream()), buf, pos + 27 + nseg, lacing, granule)
        pos, page = end, page + 1
    open_streams = [s for s, eos in ended.items() if not eos]
    if open_streams:
        out.append(
            bad(
                R.TRUNCATED,
                f"last Ogg page of stream {open_streams[0]:08x} lacks the end-of-stream flag "
                "(the stream was cut at a page boundary)",
            )
        )
    if not out:  # pages lost, out of order or failing their CRC already say why the length is off
        out = oggpackets.findings(streams, ended)
    return first_per_reason(out)


def first_per_reason(findings: list[Finding]) -> list[Finding]:
    """Keep the first finding of each reason, noting how many more there were (damaged files repeat a lot)."""
    kept: dict[str, list[Finding]] = {}
    for f in findings:
        kept.setdefault(f.reason, []).append(f)
    return [
        fs[0]._replace(detail=fs[0].detail + (f" (and {len(fs) - 1} more)" if len(fs) > 1 else ""))
        for fs in kept.values()
    ]
