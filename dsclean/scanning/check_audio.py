"""Audio checkers: WAV, FLAC, Ogg (Vorbis/Opus/...) and MP3.

A decoder returning samples is not proof that a file is whole: libsndfile
silently clips a truncated WAV to the bytes present, reports a truncated Ogg as
shorter (or as zero frames) without an error, and mpg123 resyncs over garbage
and still returns the full frame count for a cut MP3. So every checker does two
things:

1. decode every frame through libsndfile (``soundfile``) in bounded blocks,
   counting frames and, for float sources, looking for NaN/Inf/absurd values;
2. run a small pure-Python parser of the container's own structure (headers
   only, never a Python loop over sample data) that compares what the headers
   promise with the bytes actually present.

Findings of both are collected; the verdict's reason is the container's
finding when there is one (it says *why*), else the decode's, ranked by
:data:`_PRIORITY`; every finding's detail is kept.
"""
from __future__ import annotations

import mmap
import re
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import soundfile as sf

from .. import reasons as R
from .verdict import Verdict

if TYPE_CHECKING:
    from .check import Checker, CheckOptions

#: frames decoded per read: bounds memory to BLOCK_FRAMES x channels x 8 bytes
BLOCK_FRAMES = 65536
#: float samples whose magnitude exceeds this are garbage, not audio (full scale is 1.0;
#: this leaves three orders of magnitude of headroom for un-normalised float masters)
MAX_ABS_SAMPLE = 1000.0
#: subtypes whose stored values are floats, so NaN/Inf/huge values can be in the file itself
FLOAT_SUBTYPES = frozenset({"FLOAT", "DOUBLE"})
#: libsndfile's frame count for "unknown length" is SF_COUNT_MAX; anything this big is not a real count
_UNKNOWN_FRAMES = 1 << 62
#: how far back from the end of a FLAC file to look for the last frame header
_FLAC_TAIL_WINDOW = 1 << 20
#: how far into an MP3 (after its ID3v2 tag) the first frame may start
_MP3_SYNC_WINDOW = 1 << 16

#: most specific reason first: a container rule explains *why* a decoder failed
_PRIORITY = (R.TRUNCATED, R.CORRUPT, R.UNSUPPORTED, R.INVALID_SAMPLES, R.EMPTY)
_UNSUPPORTED_TEXT = re.compile(r"unimplemented|unsupported|not supported|unknown (format|codec)", re.I)

Finding = tuple[str, str]  # (reason, detail)


@dataclass
class Decoded:
    """What a full decode through libsndfile produced."""

    header_frames: int | None  # None: the header does not know the length
    frames: int = 0
    error: str | None = None
    nonfinite: int = 0
    max_abs: float = 0.0


# --------------------------------------------------------------------------- driver


def _check(path: str, v: Verdict, container: Callable[[bytes | mmap.mmap, Decoded | None], list[Finding]]) -> None:
    """Decode everything, run the container rules, mark the verdict with the most specific finding."""
    decoded: list[Finding] = []
    dec = _decode(path, v, decoded)
    if dec is not None:
        decoded += _decode_findings(dec)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        structural = container(buf, dec)
    _report(v, decoded, structural)


def _report(v: Verdict, decoded: list[Finding], structural: list[Finding]) -> None:
    """Mark ``v`` bad with every finding's detail.

    The reason comes from the container rules when they found something: they
    say *why* (a decoder that resyncs over garbage also comes up short of frames,
    which alone would read as a cut). Otherwise it is the decode's best reason.
    """
    findings = decoded + structural
    if not findings:
        return
    reason = min((r for r, _ in structural or decoded), key=_PRIORITY.index)
    details = list(dict.fromkeys(d for _, d in findings))  # de-duplicated, in order found
    v.mark(R.BAD, reason, "; ".join(details))


def _decode(path: str, v: Verdict, findings: list[Finding]) -> Decoded | None:
    """Open the header and decode every frame; fill the verdict's audio facts."""
    try:
        f = sf.SoundFile(path)
    except sf.LibsndfileError as exc:
        text = exc.error_string
        reason = R.UNSUPPORTED if _UNSUPPORTED_TEXT.search(text) else R.CORRUPT
        findings.append((reason, f"libsndfile cannot open it: {text}"))
        return None
    with f:
        v.sample_rate, v.channels, v.subtype = f.samplerate, f.channels, f.subtype
        dec = Decoded(header_frames=f.frames if 0 <= f.frames < _UNKNOWN_FRAMES else None)
        _decode_blocks(f, dec)
    v.frames = dec.frames
    v.duration = dec.frames / f.samplerate if f.samplerate else None
    return dec


def _decode_blocks(f: sf.SoundFile, dec: Decoded) -> None:
    """Read every frame in blocks of BLOCK_FRAMES, counting them; scan float sources' values."""
    dtype = "float64" if f.subtype == "DOUBLE" else "float32"
    scan = f.subtype in FLOAT_SUBTYPES
    buf = np.empty((BLOCK_FRAMES, f.channels), dtype=dtype)
    try:
        while True:
            block = f.read(dtype=dtype, always_2d=True, out=buf)
            if len(block) == 0:
                return
            dec.frames += len(block)
            if scan:
                _scan_values(block, dec)
    except sf.LibsndfileError as exc:
        dec.error = exc.error_string


def _scan_values(block: np.ndarray, dec: Decoded) -> None:
    """Count NaN/Inf values and track the largest finite magnitude."""
    finite = np.isfinite(block)
    bad = block.size - int(np.count_nonzero(finite))
    dec.nonfinite += bad
    mags = np.abs(block if bad == 0 else np.where(finite, block, 0))
    if mags.size:
        dec.max_abs = max(dec.max_abs, float(mags.max()))


def _decode_findings(dec: Decoded) -> list[Finding]:
    """Findings from the decode alone: errors, missing frames, no frames, invalid float values."""
    out: list[Finding] = []
    promised = "?" if dec.header_frames is None else dec.header_frames
    if dec.error:
        out.append((R.CORRUPT, f"decoder error after {dec.frames} of {promised} frames: {dec.error}"))
    elif dec.header_frames is not None and dec.frames < dec.header_frames:
        out.append((R.TRUNCATED, f"decoded {dec.frames} of the {dec.header_frames} frames the header promises"))
    if dec.frames == 0 and not dec.error:
        out.append((R.EMPTY, "no audio frames"))
    if dec.nonfinite:
        out.append((R.INVALID_SAMPLES, f"{dec.nonfinite} NaN/Inf sample values"))
    if dec.max_abs > MAX_ABS_SAMPLE:
        out.append((R.INVALID_SAMPLES, f"peak |sample| {dec.max_abs:.4g} exceeds {MAX_ABS_SAMPLE:g}"))
    return out


# --------------------------------------------------------------------------- WAV


#: WAV format tags libsndfile decodes: PCM, MS ADPCM, IEEE float, A-law, mu-law, IMA ADPCM,
#: GSM 6.10, G.721, MPEG, MPEG layer 3, WAVE_FORMAT_EXTENSIBLE
WAV_CODECS = frozenset({0x0001, 0x0002, 0x0003, 0x0006, 0x0007, 0x0011, 0x0031, 0x0040, 0x0050, 0x0055, 0xFFFE})


def _u16(buf: bytes | mmap.mmap, pos: int) -> int:
    return struct.unpack_from("<H", buf, pos)[0]


def _u32(buf: bytes | mmap.mmap, pos: int) -> int:
    return struct.unpack_from("<I", buf, pos)[0]


def _wav_findings(buf: bytes | mmap.mmap, dec: Decoded | None) -> list[Finding]:
    """Walk RIFF/RF64 chunks; compare every declared size with the bytes present."""
    size, rf64 = len(buf), buf[:4] == b"RF64"
    total: int | None = None if rf64 else _u32(buf, 4)  # RIFF size; RF64 keeps it in ds64
    block_align: int | None = None
    ds64_data = None
    pos = 12
    while pos + 8 <= size:
        cid, csize, body = bytes(buf[pos : pos + 4]), _u32(buf, pos + 4), pos + 8
        if cid == b"ds64" and csize >= 16 and body + 16 <= size:
            total, ds64_data = struct.unpack_from("<QQ", buf, body)
        elif cid == b"fmt " and csize >= 14 and body + 14 <= size:
            block_align = _u16(buf, body + 12)
            tag = _u16(buf, body)
            if tag not in WAV_CODECS:
                return [(R.UNSUPPORTED, f"WAV codec 0x{tag:04x} (format tag) is not one libsndfile decodes")]
        elif cid == b"data":
            declared = ds64_data if rf64 and csize == 0xFFFFFFFF else csize
            found = _wav_data_findings(declared, size - body, block_align)
            if found or declared is None or declared in (0, 0xFFFFFFFF):
                return found
            return _wav_trailing_findings(buf, body + declared + (declared & 1), total)
        if not _is_chunk_id(cid):
            return [(R.CORRUPT, f"invalid chunk id {cid!r} at offset {pos}")]
        if body + csize > size:
            return [_wav_overrun(total, size, f"{cid.decode()!r} chunk at offset {pos} declares {csize} bytes, {size - body} present")]
        pos = body + csize + (csize & 1)
    where = "inside a chunk header" if pos < size else "before any 'data' chunk"
    return [_wav_overrun(total, size, f"file ends {where} (offset {pos})")]


def _wav_trailing_findings(buf: bytes | mmap.mmap, pos: int, total: int | None) -> list[Finding]:
    """Chunks after ``data`` (LIST, id3, ...): one cut short means the file was cut, though the audio is whole."""
    size = len(buf)
    while pos + 8 <= size:
        cid, csize = bytes(buf[pos : pos + 4]), _u32(buf, pos + 4)
        if not _is_chunk_id(cid):
            return []  # padding or junk after the last chunk: libsndfile ignores it, and so do we
        if pos + 8 + csize > size:
            return [_wav_overrun(total, size, f"{cid.decode()!r} chunk after the audio (offset {pos}) declares {csize} bytes, {size - pos - 8} present")]
        pos += 8 + csize + (csize & 1)
    if pos < size and _riff_promises_more(total, size):
        return [(R.TRUNCATED, f"file ends inside a chunk header after the audio (offset {pos}); RIFF header declares {total} bytes")]
    return []


def _is_chunk_id(cid: bytes) -> bool:
    """RIFF chunk ids are four printable ASCII characters."""
    return all(0x20 <= b < 0x7F for b in cid)


def _riff_promises_more(total: int | None, size: int) -> bool:
    """True if the RIFF (or ds64) size is known and says the file is longer than it is."""
    return total is not None and total not in (0, 0xFFFFFFFF) and total + 8 > size


def _wav_overrun(total: int | None, size: int, what: str) -> Finding:
    """A chunk runs past the end: truncated unless the RIFF header says the file is complete (then its size field is broken)."""
    if total is None or total in (0, 0xFFFFFFFF) or _riff_promises_more(total, size):
        return (R.TRUNCATED, what)
    return (R.CORRUPT, f"{what}, yet the RIFF header says the file is complete at {total + 8} bytes")


def _wav_data_findings(declared: int | None, present: int, block_align: int | None) -> list[Finding]:
    """The ``data`` chunk: bytes declared vs present, and whole sample frames."""
    if declared == 0 and present > 0:
        # a streaming writer that never patched its header: libsndfile reads 0 frames
        return [(R.EMPTY, f"data chunk declares 0 bytes but {present} bytes follow (header never finalised)")]
    if declared is None or declared == 0xFFFFFFFF:
        declared = None  # unknown length (streamed): the data runs to the end of the file
    elif declared > present:
        return [(R.TRUNCATED, f"data chunk declares {declared} bytes, {present} present")]
    have = present if declared is None else declared
    if block_align and have % block_align:
        reason = R.TRUNCATED if declared is None else R.CORRUPT
        return [(reason, f"data chunk holds {have} bytes, not a whole number of {block_align}-byte frames")]
    return []


# --------------------------------------------------------------------------- FLAC


def _flac_findings(buf: bytes | mmap.mmap, dec: Decoded | None) -> list[Finding]:
    """Walk the metadata blocks; when decoding failed, look at the tail to tell a cut from damage."""
    size, pos = len(buf), 4
    total = max_block = None
    while True:
        if pos + 4 > size:
            return [(R.TRUNCATED, f"file ends inside the metadata blocks (offset {pos})")]
        head, length = buf[pos], int.from_bytes(buf[pos + 1 : pos + 4], "big")
        if head & 0x7F == 127:
            return [(R.CORRUPT, f"invalid metadata block type 127 at offset {pos}")]
        if pos + 4 + length > size:
            return [(R.TRUNCATED, f"metadata block at offset {pos} declares {length} bytes, {size - pos - 4} present")]
        if head & 0x7F == 0 and length >= 34:
            max_block = _u16be(buf, pos + 6)
            total = int.from_bytes(buf[pos + 17 : pos + 22], "big") & ((1 << 36) - 1)
        pos += 4 + length
        if head & 0x80:
            break
    if total is None:
        return [(R.CORRUPT, "no STREAMINFO block")]
    if pos >= size:
        return [(R.TRUNCATED, f"no audio frames after the metadata, STREAMINFO promises {total} samples")] if total else []
    if total and (dec is None or dec.error):
        tail = _flac_tail_finding(buf, pos, total, max_block or 0)
        return [tail] if tail else []
    return []


def _u16be(buf: bytes | mmap.mmap, pos: int) -> int:
    return struct.unpack_from(">H", buf, pos)[0]


def _flac_tail_finding(buf: bytes | mmap.mmap, start: int, total: int, max_block: int) -> Finding | None:
    """Find the last frame header; if its samples end before ``total`` or it fails its CRC-16, the file was cut."""
    end = len(buf) - (128 if len(buf) >= 128 and buf[-128:-125] == b"TAG" else 0)
    lo, hi = max(start, end - _FLAC_TAIL_WINDOW), end - 1
    while True:
        hi = buf.rfind(b"\xff", lo, hi)
        if hi < 0:
            return None
        frame = _flac_frame_header(buf, hi, end, max_block)
        if frame is not None:
            break
    first, blocksize = frame
    if first + blocksize < total:
        return (R.TRUNCATED, f"the last frame in the file holds samples {first}..{first + blocksize}, STREAMINFO promises {total}")
    if first + blocksize == total and _crc16_8005(bytes(buf[hi : end - 2])) != _u16be(buf, end - 2):
        return (R.TRUNCATED, f"the last frame (offset {hi}, samples {first}..{total}) fails its CRC-16: the file ends inside it")
    return None


def _flac_frame_header(buf: bytes | mmap.mmap, pos: int, end: int, max_block: int) -> tuple[int, int] | None:
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
    if crc_at >= len(head) or _crc8(head[:crc_at]) != head[crc_at]:
        return None
    blocksize = _flac_blocksize(bs_code, head[p : p + extra_bs])
    first = num if head[1] == 0xF9 else num * max_block
    return first, blocksize


def _flac_blocksize(code: int, extra: bytes) -> int:
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


def _crc8(data: bytes) -> int:
    c = 0
    for b in data:
        c = _CRC8[c ^ b]
    return c


def _crc16_8005(data: bytes) -> int:
    """FLAC frame CRC-16 (poly 0x8005, init 0). Pure Python, used on one frame of an already failing file."""
    c = 0
    for b in data:
        c = ((c << 8) & 0xFFFF) ^ _CRC16[(c >> 8) ^ b]
    return c


# --------------------------------------------------------------------------- Ogg

_BITREV = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


def ogg_crc(page: bytes) -> int:
    """Ogg's CRC-32 (poly 0x04C11DB7, not reflected, init 0, no final xor), computed at C speed.

    zlib's CRC-32 is the reflected form of the same polynomial, so run it over
    bit-reversed bytes with init/xorout cancelled and bit-reverse the result.
    """
    raw = zlib.crc32(page.translate(_BITREV), 0xFFFFFFFF) ^ 0xFFFFFFFF
    return int(f"{raw:032b}"[::-1], 2)


def _ogg_findings(buf: bytes | mmap.mmap, dec: Decoded | None) -> list[Finding]:
    """Walk every Ogg page: capture pattern, CRC, per-stream sequence numbers, EOS flag, last page complete."""
    size, pos, page = len(buf), 0, 0
    out: list[Finding] = []
    next_seq: dict[int, int] = {}
    ended: dict[int, bool] = {}
    while pos < size:
        if size - pos < 27:
            return out + [(R.TRUNCATED, f"file ends inside the header of Ogg page {page} (offset {pos})")]
        if buf[pos : pos + 4] != b"OggS":
            return out + [(R.CORRUPT, f"no Ogg capture pattern at offset {pos} (page {page}): broken page structure")]
        version, htype, _granule, serial, seq, crc, nseg = struct.unpack_from("<BBqIIIB", buf, pos + 4)
        if pos + 27 + nseg > size:
            return out + [(R.TRUNCATED, f"file ends inside the segment table of Ogg page {page} (offset {pos})")]
        end = pos + 27 + nseg + sum(buf[pos + 27 : pos + 27 + nseg])
        if end > size:
            return out + [(R.TRUNCATED, f"Ogg page {page} (offset {pos}) needs {end - pos} bytes, {size - pos} present")]
        if version != 0:
            out.append((R.CORRUPT, f"Ogg page {page} (offset {pos}) has stream structure version {version}"))
        if serial in next_seq and seq != next_seq[serial]:
            out.append((R.CORRUPT, f"Ogg stream {serial:08x}: page sequence jumps from {next_seq[serial] - 1} to {seq} at offset {pos} (pages lost)"))
        data = bytes(buf[pos:end])
        if ogg_crc(data[:22] + b"\0\0\0\0" + data[26:]) != crc:
            out.append((R.CORRUPT, f"Ogg page {page} (offset {pos}) fails its CRC"))
        next_seq[serial], ended[serial] = seq + 1, bool(htype & 4)
        pos, page = end, page + 1
    open_streams = [s for s, eos in ended.items() if not eos]
    if open_streams:
        out.append((R.TRUNCATED, f"last Ogg page of stream {open_streams[0]:08x} lacks the end-of-stream flag"))
    return _first_per_reason(out)


def _first_per_reason(findings: list[Finding]) -> list[Finding]:
    """Keep the first finding of each reason, noting how many more there were (damaged files repeat a lot)."""
    kept: dict[str, list[str]] = {}
    for reason, detail in findings:
        kept.setdefault(reason, []).append(detail)
    return [(r, d[0] + (f" (and {len(d) - 1} more)" if len(d) > 1 else "")) for r, d in kept.items()]


# --------------------------------------------------------------------------- MP3

_MP3_BITRATES = {  # (MPEG-1?, layer) -> kbps by index
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


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


def _mpeg_frame(buf: bytes | mmap.mmap, pos: int) -> MpegFrame | None:
    """Parse the 4-byte MPEG audio frame header at ``pos``, or None if it is not one."""
    h = bytes(buf[pos : pos + 4])
    if len(h) < 4 or h[0] != 0xFF or h[1] & 0xE0 != 0xE0:
        return None
    version, layer_bits, br_idx, sr_idx = (h[1] >> 3) & 3, (h[1] >> 1) & 3, h[2] >> 4, (h[2] >> 2) & 3
    if version == 1 or layer_bits == 0 or br_idx == 15 or sr_idx == 3:
        return None
    layer, mpeg1 = 4 - layer_bits, version == 3
    sr = _MP3_RATES[version][sr_idx]
    kbps, pad = _MP3_BITRATES[(mpeg1, layer)][br_idx], (h[2] >> 1) & 1
    if kbps == 0:
        length = 0  # free format: the length is not in the header
    elif layer == 1:
        length = (12 * kbps * 1000 // sr + pad) * 4
    else:
        length = (144 if mpeg1 or layer == 2 else 72) * kbps * 1000 // sr + pad
    return MpegFrame(version, layer, sr, length, h[3] >> 6 == 3, not h[1] & 1)


def _mp3_audio_span(buf: bytes | mmap.mmap) -> tuple[int, int, list[Finding]]:
    """(start, end) of the MPEG frames: after the ID3v2 tag(s), before trailing ID3v1/APE tags."""
    size, start = len(buf), 0
    while buf[start : start + 3] == b"ID3" and start + 10 <= size:
        b = buf[start + 6 : start + 10]
        tag = 10 + ((b[0] & 0x7F) << 21 | (b[1] & 0x7F) << 14 | (b[2] & 0x7F) << 7 | (b[3] & 0x7F))
        tag += 10 if buf[start + 5] & 0x10 else 0
        if start + tag > size:
            return start, size, [(R.TRUNCATED, f"ID3v2 tag declares {tag} bytes, {size - start} present")]
        start += tag
    end = size
    if end - start >= 128 and buf[end - 128 : end - 125] == b"TAG":
        end -= 128
    if end - start >= 32 and buf[end - 32 : end - 24] == b"APETAGEX":
        ape = _u32(buf, end - 20) + (32 if _u32(buf, end - 12) & 0x80000000 else 0)
        end = max(start, end - ape)
    return start, end, []


def _mp3_first_frame(buf: bytes | mmap.mmap, start: int, end: int) -> int | None:
    """The first offset where two consecutive valid frame headers agree (tolerates padding after a tag)."""
    pos, limit = start, min(end, start + _MP3_SYNC_WINDOW)
    while 0 <= pos < limit:
        frame = _mpeg_frame(buf, pos)
        if frame and not frame.length:
            return pos  # free format: the walk cannot follow it (and stops there)
        if frame:
            nxt = pos + frame.length
            second = _mpeg_frame(buf, nxt)
            if nxt >= end or (second and second.stream == frame.stream):
                return pos
        pos = buf.find(b"\xff", pos + 1, limit)
    return None


def _xing_frames(buf: bytes | mmap.mmap, pos: int, frame: MpegFrame) -> int | None:
    """The frame count of a Xing/Info or VBRI header in the first frame, if there is one."""
    side = (17 if frame.mono else 32) if frame.version == 3 else (9 if frame.mono else 17)
    at = pos + 4 + side + (2 if frame.crc else 0)
    if buf[at : at + 4] in (b"Xing", b"Info") and struct.unpack_from(">I", buf, at + 4)[0] & 1:
        return struct.unpack_from(">I", buf, at + 8)[0]
    if buf[pos + 36 : pos + 40] == b"VBRI":
        return struct.unpack_from(">I", buf, pos + 36 + 14)[0]
    return None


def _mp3_findings(buf: bytes | mmap.mmap, dec: Decoded | None) -> list[Finding]:
    """Walk every MPEG frame header: lost sync mid-stream, a last frame past the end, fewer frames than Xing says."""
    start, end, out = _mp3_audio_span(buf)
    if out:
        return out
    pos = _mp3_first_frame(buf, start, end)
    if pos is None:
        return [(R.CORRUPT, f"no MPEG audio frame sync within {_MP3_SYNC_WINDOW} bytes of offset {start}")]
    first = _mpeg_frame(buf, pos)
    assert first is not None
    xing, frames = _xing_frames(buf, pos, first), 0
    while pos < end:
        if end - pos < 4 and buf[pos] == 0xFF:
            return [(R.TRUNCATED, f"file ends inside a frame header at offset {pos}")]
        frame = _mpeg_frame(buf, pos)
        if frame is None or frame.stream != first.stream:
            return [(R.CORRUPT, f"lost MPEG frame sync at offset {pos} after {frames} frames ({end - pos} bytes left)")]
        if frame.length == 0:
            return []  # free-format stream: frame lengths are not in the headers, nothing more to walk
        if pos + frame.length > end:
            return [(R.TRUNCATED, f"frame {frames} at offset {pos} needs {frame.length} bytes, {end - pos} present")]
        frames, pos = frames + 1, pos + frame.length
    if xing is not None and frames - 1 < xing:
        return [(R.TRUNCATED, f"Xing/VBRI header counts {xing} frames, only {frames - 1} present")]
    return []


# --------------------------------------------------------------------------- checkers


def check_wav(path: str, v: Verdict, opts: CheckOptions) -> None:
    """WAV/RF64: full decode plus the RIFF chunk walk."""
    _check(path, v, _wav_findings)


def check_flac(path: str, v: Verdict, opts: CheckOptions) -> None:
    """FLAC: full decode (libFLAC checks every frame's CRC) plus STREAMINFO and tail rules."""
    _check(path, v, _flac_findings)


def check_ogg(path: str, v: Verdict, opts: CheckOptions) -> None:
    """Ogg: full decode plus the page walk (libvorbis neither notices lost pages nor a missing end)."""
    _check(path, v, _ogg_findings)


def check_mp3(path: str, v: Verdict, opts: CheckOptions) -> None:
    """MP3: full decode plus the frame walk (mpg123 silently resyncs over damage)."""
    _check(path, v, _mp3_findings)


CHECKERS: dict[str, Checker] = {"wav": check_wav, "flac": check_flac, "ogg": check_ogg, "mp3": check_mp3}
