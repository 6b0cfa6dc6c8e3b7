"""Audio checkers: WAV, FLAC, Ogg (Vorbis/Opus/...) and MP3.

A decoder returning samples is not proof that a file is whole: libsndfile
silently clips a truncated WAV to the bytes present, reports a truncated Ogg as
shorter (or as zero frames) without an error, and mpg123 resyncs over garbage
and still returns the full frame count for a cut MP3. So every checker does two
things, on the bytes already read (libsndfile reads them through virtual I/O, no
second open):

1. decode every frame through libsndfile (``soundfile``) in bounded blocks,
   counting frames and, for float sources, looking for NaN/Inf/absurd values.
   (Uncompressed PCM WAV is not pushed through a decoder: its samples *are* its
   bytes, so libsndfile reads the header and the chunk walk checks the rest;
   float WAV samples are scanned straight from the bytes);
2. run the container's own rules (:mod:`~dsclean.scanning.formats.wav`, :mod:`~dsclean.scanning.formats.flac`,
   :mod:`~dsclean.scanning.formats.ogg`, :mod:`~dsclean.scanning.formats.mp3`: headers only, never a
   Python loop over sample data) comparing what the headers promise with the bytes present.

Findings of both are collected; the verdict's reason is the container's
finding when there is one (it says *why*), else the decode's, ranked by
:data:`_PRIORITY`; every finding's detail is kept.
"""

from __future__ import annotations

import hashlib
import io
import mmap
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import soundfile as sf

from .. import reasons as R
from ..quality.audio import AudioStats
from . import facts as facts_of
from . import fallback
from .formats import flac, mp3, ogg, wav
from .verdict import Finding, Verdict, bad

if TYPE_CHECKING:
    from .check import Checker, CheckOptions

#: frames decoded per read: bounds memory to BLOCK_FRAMES x channels x 8 bytes
BLOCK_FRAMES = 65536
#: float samples whose magnitude exceeds this are garbage, not audio (full scale is 1.0;
#: this leaves three orders of magnitude of headroom for un-normalised float masters)
MAX_ABS_SAMPLE = 1000.0
#: subtypes whose stored values are floats, so NaN/Inf/huge values can be in the file itself
FLOAT_SUBTYPES = frozenset({"FLOAT", "DOUBLE"})
#: WAV subtypes whose every byte pattern is a valid sample: nothing for a decoder to fail on
WAV_RAW_SUBTYPES = frozenset({"PCM_S8", "PCM_U8", "PCM_16", "PCM_24", "PCM_32", "ULAW", "ALAW"})
#: libsndfile's frame count for "unknown length" is SF_COUNT_MAX; anything this big is not a real count
_UNKNOWN_FRAMES = 1 << 62

#: most specific reason first: a container rule explains *why* a decoder failed
_PRIORITY = (R.TRUNCATED, R.CORRUPT, R.UNSUPPORTED, R.INVALID_SAMPLES, R.EMPTY)
_UNSUPPORTED_TEXT = re.compile(r"unimplemented|unsupported|not supported|unknown (format|codec)", re.I)


@dataclass
class Decoded:
    """What a full decode through libsndfile produced."""

    header_frames: int | None  # None: the header does not promise a length
    frames: int = 0
    error: str | None = None
    nonfinite: int = 0
    max_abs: float = 0.0
    stats: AudioStats | None = None  # level facts accumulated over the decoded blocks (facts on)


# --------------------------------------------------------------------------- checkers


def check_wav(data, v: Verdict, opts: CheckOptions) -> None:
    """WAV/RF64: the RIFF chunk walk; libsndfile reads the header and decodes what is encoded."""
    walk = wav.walk(data)
    decoded: list[Finding] = []
    dec = _decode(data, v, decoded, raw_at=walk.data_start, facts=opts.facts)
    _report(v, decoded + (_decode_findings(dec) if dec else []), walk.findings, data)


def check_flac(data, v: Verdict, opts: CheckOptions) -> None:
    """FLAC: full decode (libFLAC checks every frame's CRC-8 and CRC-16), STREAMINFO's sample count,
    the frame sequence (each frame's number follows the last; :func:`flac.sequence_finding`),
    on a failed decode the frame that broke or the cut, and with ``opts.flac_md5`` the STREAMINFO
    MD5 of the decoded samples when the encoder recorded one."""
    walk = flac.walk(data)
    decoded: list[Finding] = []
    info = walk.info
    md5 = hashlib.md5() if opts.flac_md5 and info is not None and any(info.md5) and 4 <= info.bits <= 32 else None
    dtype = "int16" if info is not None and info.bits <= 16 else "int32"
    # read no further than STREAMINFO's promise: bytes after the last frame are not libFLAC's to judge
    dec = _decode(
        data, v, decoded, dtype=dtype, md5=md5, bits=info.bits if info else 16, promised=True, facts=opts.facts
    )
    structural = list(walk.findings)
    if dec is not None:
        decoded += _decode_findings(dec)
    failed = dec is None or dec.error is not None
    if failed and info is not None and info.total and not any(f.status == R.BAD for f in structural):
        structural += _flac_failure(data, walk, dec)
    elif (
        not failed
        and info is not None
        and not any(f.status == R.BAD for f in structural + decoded)
        and (out_of_order := flac.sequence_finding(data, walk.audio_start, info)) is not None
    ):
        structural.append(out_of_order)
    elif md5 is not None and not decoded and dec.frames == info.total and md5.digest() != info.md5:
        structural.append(
            bad(R.CORRUPT, "FLAC: the MD5 of the decoded samples differs from the STREAMINFO MD5 signature")
        )
    _report(v, decoded, structural, data)


def _flac_failure(data, walk: flac.Walk, dec: Decoded | None) -> list[Finding]:
    """Why libFLAC failed: the file was cut (the last frame ends early), else which frame is damaged."""
    tail = flac.tail_finding(data, walk.audio_start, walk.info)
    if tail is not None:
        return [tail]
    if dec is None:
        return []
    return [
        flac.damaged_frame(data, walk.audio_start, walk.info, _samples_before_error(data, walk.info.max_block or 4096))
    ]


def _samples_before_error(data, block: int) -> int:
    """Decode again in frame-sized reads: how many samples come out before the error (failure path only)."""
    done = 0
    with sf.SoundFile(_source(data)) as f:
        try:
            while n := len(f.read(block, dtype="int16")):
                done += n
        except sf.LibsndfileError:
            return done  # the error this count is looking for: the samples before it are the answer
    return done


def check_ogg(data, v: Verdict, opts: CheckOptions) -> None:
    """Ogg: full decode plus the page walk (libvorbis neither notices lost pages nor a missing end)."""
    decoded: list[Finding] = []
    dec = _decode(data, v, decoded, facts=opts.facts)
    _report(v, decoded + (_decode_findings(dec) if dec else []), ogg.walk(data), data)


def check_mp3(data, v: Verdict, opts: CheckOptions) -> None:
    """MP3: full decode plus the frame walk (mpg123 silently resyncs over damage). The decoded frame
    count is held against a length only a Xing/Info/VBRI header promises: without one, libsndfile's
    count is an estimate from the bitrate, and a VBR stream decodes to fewer frames than that."""
    walk = mp3.walk(data)
    decoded: list[Finding] = []
    dec = _decode(data, v, decoded, facts=opts.facts)
    if dec is not None and walk.promised is None:
        dec.header_frames = None
    _report(v, decoded + (_decode_findings(dec) if dec else []), walk.findings, data)


CHECKERS: dict[str, Checker] = {"wav": check_wav, "flac": check_flac, "ogg": check_ogg, "mp3": check_mp3}


# --------------------------------------------------------------------------- decode and report


def _report(v: Verdict, decoded: list[Finding], structural: list[Finding], data=None) -> None:
    """Mark ``v`` with every finding's detail.

    The reason of a bad verdict comes from the container rules when they found
    something bad: they say *why* (a decoder that resyncs over garbage also comes up
    short of frames, which alone would read as a cut). Otherwise it is the decode's
    best reason. Warnings (deviations decoders tolerate) only count when nothing is bad.
    When the only thing wrong is that libsndfile does not know the variant (the walk found
    the container whole), the next decoder decides (:func:`_next_decoder`).
    """
    findings = decoded + structural
    worst = [f for f in structural if f.status == R.BAD] or [f for f in decoded if f.status == R.BAD]
    if not worst:
        v.add(findings)
        return
    if data is not None and all(f.reason == R.UNSUPPORTED for f in worst):
        _next_decoder(v, data, findings)
        return
    reason = min((f.reason for f in worst), key=_PRIORITY.index)
    details = list(dict.fromkeys(f.detail for f in findings))  # de-duplicated, in order found
    v.mark(R.BAD, reason, "; ".join(details))


def _next_decoder(v: Verdict, data, findings: list[Finding]) -> None:
    """libsndfile refuses a whole file: PyAV (FFmpeg) decides. It reads it: ``unsupported`` (a warning: soundfile,
    the default audio loader, cannot read it), with its facts; it does not know the variant either:
    ``unsupported``; it knows it and fails on the data: ``corrupt`` (damage, whatever libsndfile said)."""
    said = "; ".join(dict.fromkeys(f.detail for f in findings))
    out = fallback.pyav_audio(data)
    if out.read:
        v.sample_rate, v.channels, v.frames = out.sample_rate, out.channels, out.frames
        v.duration = out.frames / out.sample_rate if out.sample_rate else None
        v.mark(R.WARN, R.UNSUPPORTED, f"{said}; decoders: libsndfile refused, {out.said()}")
    elif out.unsupported:
        v.mark(R.WARN, R.UNSUPPORTED, f"{said}; decoders: libsndfile refused, {out.said()}; no decoder here reads it")
    else:
        v.mark(R.BAD, R.CORRUPT, f"{said}; decoders: libsndfile refused, {out.said()}")


def _source(data):
    """A file-like object over the bytes for libsndfile's virtual I/O (no copy: a BytesIO shares a
    bytes object's buffer; an mmap is file-like already)."""
    if isinstance(data, mmap.mmap):
        data.seek(0)
        return data
    return io.BytesIO(data)


def _decode(
    data,
    v: Verdict,
    findings: list[Finding],
    *,
    dtype: str | None = None,
    md5=None,
    bits: int = 16,
    raw_at: int | None = None,
    promised: bool = False,
    facts: bool = False,
) -> Decoded | None:
    """Open the header and decode every frame; fill the verdict's audio facts.

    ``raw_at``: where a WAV's samples start; for raw PCM subtypes the samples are not
    decoded (nothing can fail), for float ones they are scanned straight from the bytes.
    ``promised``: the header's frame count is a promise (FLAC's STREAMINFO): read that many, no more.
    ``facts``: also accumulate the level facts (:mod:`dsclean.scanning.facts`) over the decoded blocks.
    """
    try:
        f = sf.SoundFile(_source(data))
    except sf.LibsndfileError as exc:
        text = exc.error_string
        reason = R.UNSUPPORTED if _UNSUPPORTED_TEXT.search(text) else R.CORRUPT
        findings.append(bad(reason, f"libsndfile cannot open it: {text}"))
        return None
    with f:
        # soundfile's subtype is a libsndfile call each time it is read: once per file
        subtype = f.subtype
        v.sample_rate, v.channels, v.subtype = f.samplerate, f.channels, subtype
        dec = Decoded(header_frames=f.frames if 0 <= f.frames < _UNKNOWN_FRAMES else None)
        if facts:
            dec.stats = AudioStats(f.channels, f.samplerate, subtype)
        if raw_at is not None and subtype in WAV_RAW_SUBTYPES and dec.header_frames is not None:
            dec.frames = dec.header_frames
            if dec.stats is not None:
                _raw_pcm_stats(data, raw_at, dec, f)
        elif (
            raw_at is not None
            and subtype in FLOAT_SUBTYPES
            and dec.header_frames is not None
            and _scan_raw_floats(data, raw_at, dec, f)
        ):
            pass
        else:
            _decode_blocks(f, dec, dtype, md5, bits, dec.header_frames if promised else None)
    v.frames = dec.frames
    v.duration = dec.frames / f.samplerate if f.samplerate else None
    if dec.stats is not None and dec.error is None:
        facts_of.from_audio(v, dec.stats)
    return dec


def _raw_pcm_stats(data, at: int, dec: Decoded, f: sf.SoundFile) -> None:
    """Level facts of a raw PCM WAV, from its samples where they lie in the bytes (nothing to decode);
    a layout numpy cannot read in place (u-law, A-law) is decoded by libsndfile for them."""
    width = f.channels * facts_of.PCM_WIDTH.get(f.subtype, 0)
    if not width:
        f.seek(0)
        _decode_blocks(f, Decoded(header_frames=dec.header_frames, stats=dec.stats), None, None, 16, None)
        return
    for start in range(0, dec.frames, BLOCK_FRAMES):
        block = facts_of.raw_pcm(data, at + start * width, min(BLOCK_FRAMES, dec.frames - start), f.channels, f.subtype)
        if block is None:  # fewer bytes than frames: the chunk walk reports it; no level facts
            dec.stats = None
            return
        dec.stats.add(block)


def _scan_raw_floats(data, at: int, dec: Decoded, f: sf.SoundFile) -> bool:
    """Scan a float WAV's samples where they lie in the bytes; False if they are not all there as expected."""
    dtype = np.dtype("<f8" if f.subtype == "DOUBLE" else "<f4")
    count = dec.header_frames * f.channels
    if at + count * dtype.itemsize > len(data):
        return False
    with memoryview(data) as view:
        samples = np.frombuffer(view, dtype=dtype, count=count, offset=at)
        for start in range(0, count, BLOCK_FRAMES * f.channels):
            _scan_values(samples[start : start + BLOCK_FRAMES * f.channels], dec)
            if dec.stats is not None:
                dec.stats.add(samples[start : start + BLOCK_FRAMES * f.channels].reshape(-1, f.channels))
        del samples
    dec.frames = dec.header_frames
    return True


def _decode_blocks(f: sf.SoundFile, dec: Decoded, dtype: str | None, md5, bits: int, limit: int | None) -> None:
    """Read every frame (at most ``limit``) in blocks of BLOCK_FRAMES, counting them; scan float
    sources' values; feed the MD5."""
    subtype = f.subtype
    scan = subtype in FLOAT_SUBTYPES
    dtype = dtype or ("float64" if subtype == "DOUBLE" else "float32")
    buf = _block_buffer(dtype, f.channels)
    try:
        while limit is None or dec.frames < limit:
            room = buf if limit is None else buf[: min(BLOCK_FRAMES, limit - dec.frames)]
            block = f.read(dtype=dtype, always_2d=True, out=room)
            if len(block) == 0:
                return
            dec.frames += len(block)
            if scan:
                _scan_values(block, dec)
            if dec.stats is not None:
                dec.stats.add(block)
            if md5 is not None:
                md5.update(flac.pcm_bytes(block, bits))
    except sf.LibsndfileError as exc:
        dec.error = exc.error_string


#: channel counts up to which a decoding thread keeps its block buffer between files (<= 4 MB each)
_KEPT_CHANNELS = 8
_kept = threading.local()


def _block_buffer(dtype: str, channels: int) -> np.ndarray:
    """The decode's block buffer. For the usual channel counts one is kept per thread, dtype and channel count:
    a fresh array this large per file is mapped and unmapped by the allocator each time, and its pages fault in
    again as libsndfile fills them (a few % of a short FLAC's check). Nothing holds a block past its read."""
    if channels > _KEPT_CHANNELS:
        return np.empty((BLOCK_FRAMES, channels), dtype=dtype)
    kept = getattr(_kept, "buffers", None)
    if kept is None:
        kept = _kept.buffers = {}
    buf = kept.get((dtype, channels))
    if buf is None:
        buf = kept[(dtype, channels)] = np.empty((BLOCK_FRAMES, channels), dtype=dtype)
    return buf


def _scan_values(block: np.ndarray, dec: Decoded) -> None:
    """Count NaN/Inf values and track the largest finite magnitude."""
    finite = np.isfinite(block)
    nonfinite = block.size - int(np.count_nonzero(finite))
    dec.nonfinite += nonfinite
    mags = np.abs(block if nonfinite == 0 else np.where(finite, block, 0))
    if mags.size:
        dec.max_abs = max(dec.max_abs, float(mags.max()))


def _decode_findings(dec: Decoded) -> list[Finding]:
    """Findings from the decode alone: errors, missing frames, no frames, invalid float values."""
    out: list[Finding] = []
    promised = "?" if dec.header_frames is None else dec.header_frames
    if dec.error:
        out.append(bad(R.CORRUPT, f"decoder error after {dec.frames} of {promised} frames: {dec.error}"))
    elif dec.header_frames is not None and dec.frames < dec.header_frames:
        out.append(bad(R.TRUNCATED, f"decoded {dec.frames} of the {dec.header_frames} frames the header promises"))
    if dec.frames == 0 and not dec.error:
        out.append(bad(R.EMPTY, "no audio frames"))
    if dec.nonfinite:
        out.append(bad(R.INVALID_SAMPLES, f"{dec.nonfinite} NaN/Inf sample values"))
    if dec.max_abs > MAX_ABS_SAMPLE:
        out.append(bad(R.INVALID_SAMPLES, f"peak |sample| {dec.max_abs:.4g} exceeds {MAX_ABS_SAMPLE:g}"))
    return out
