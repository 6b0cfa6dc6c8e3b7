"""Tiny audio fixtures for the audio checker tests, written by soundfile itself.

Also small independent helpers to locate structure (Ogg pages, MP3 frames,
FLAC frames) in those files so tests can damage them at meaningful places, and
:func:`sf_behaviour` to record what plain soundfile does with a damaged file.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import soundfile as sf

SR = 44100
SECONDS = 0.4  # every fixture stays under 0.5 s


def signal(channels: int, seconds: float = SECONDS, sr: int = SR) -> np.ndarray:
    """Deterministic noise (noise, not a tone: it makes Vorbis/MP3 spread over several pages/frames)."""
    rng = np.random.default_rng(channels)
    return rng.uniform(-0.5, 0.5, (int(seconds * sr), channels))


def write(path: Path, fmt: str, channels: int = 1, subtype: str | None = None, data: np.ndarray | None = None) -> Path:
    """Write a fixture: fmt is wav/rf64/flac/ogg/mp3."""
    x = signal(channels) if data is None else data
    kw: dict = {
        "wav": {"format": "WAV", "subtype": subtype or "PCM_16"},
        "rf64": {"format": "RF64", "subtype": subtype or "PCM_16"},
        "flac": {"format": "FLAC"},
        "ogg": {"format": "OGG", "subtype": "VORBIS", "compression_level": 0.0},
        "mp3": {"format": "MP3", "subtype": "MPEG_LAYER_III"},
    }[fmt]
    sf.write(str(path), x, SR, **kw)
    return path


def save(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def sf_behaviour(path: Path) -> tuple[str, int | None, int | None]:
    """What plain soundfile does: ("open-raises"|"read-raises"|"reads", header frames, frames read)."""
    try:
        info = sf.info(str(path))
    except sf.LibsndfileError:
        return "open-raises", None, None
    try:
        data, _ = sf.read(str(path), dtype="float32", always_2d=True)
    except sf.LibsndfileError:
        return "read-raises", info.frames, None
    return "reads", info.frames, len(data)


def ogg_pages(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of every Ogg page."""
    pages, pos = [], 0
    while pos < len(data):
        nseg = data[pos + 26]
        length = 27 + nseg + sum(data[pos + 27 : pos + 27 + nseg])
        pages.append((pos, length))
        pos += length
    return pages


def mp3_frames(data: bytes) -> list[int]:
    """Offsets of the MPEG-1 Layer III frames of a 44.1 kHz file from :func:`write` (no ID3 tag)."""
    kbps = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
    offs, pos = [], 0
    while pos < len(data):
        assert data[pos] == 0xFF and data[pos + 1] & 0xFE == 0xFA, f"not an MPEG-1 L3 header at {pos}"
        offs.append(pos)
        pos += 144 * kbps[data[pos + 2] >> 4] * 1000 // SR + ((data[pos + 2] >> 1) & 1)
    return offs


def flac_audio_start(data: bytes) -> int:
    """Offset of the first FLAC frame (after the metadata blocks)."""
    pos = 4
    while True:
        head, length = data[pos], int.from_bytes(data[pos + 1 : pos + 4], "big")
        pos += 4 + length
        if head & 0x80:
            return pos


def wav_data_offset(data: bytes) -> int:
    """Offset of the 'data' chunk header in a RIFF WAV."""
    pos = 12
    while data[pos : pos + 4] != b"data":
        pos += 8 + struct.unpack_from("<I", data, pos + 4)[0]
    return pos


def garbage(n: int, seed: int = 0) -> bytes:
    """Deterministic random bytes."""
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def aac(container: str = "ipod", seconds: float = SECONDS, sr: int = 16000, channels: int = 1, **options: str) -> bytes:
    """AAC encoded by FFmpeg's own encoder through PyAV: ``ipod`` (an .m4a file) or ``adts`` (a raw .aac
    stream); ``options`` go to the muxer (e.g. ``movflags="faststart"``: the index before the samples)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:  # faststart re-reads the file it wrote: a path, not a BytesIO
        path = f"{tmp}/out"
        _encode_aac(path, container, seconds, sr, channels, options)
        return Path(path).read_bytes()


def _encode_aac(path: str, container: str, seconds: float, sr: int, channels: int, options: dict) -> None:
    import av

    with av.open(path, "w", format=container, options=options) as out:
        stream = out.add_stream("aac", rate=sr, layout="mono" if channels == 1 else "stereo")
        planar = np.ascontiguousarray(signal(channels, seconds, sr).T.astype(np.float32))
        frame = av.AudioFrame.from_ndarray(planar, format="fltp", layout=stream.layout.name)
        frame.sample_rate = sr
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)


def mp4_boxes(data: bytes, start: int = 0, end: int | None = None) -> dict[bytes, int]:
    """Offset of the first box of each type, walking into moov/trak/mdia/minf/stbl (independent of dsclean)."""
    found: dict[bytes, int] = {}
    pos, end = start, len(data) if end is None else end
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, pos)
        found.setdefault(kind, pos)
        if kind in (b"moov", b"trak", b"mdia", b"minf", b"stbl"):
            found.update({k: v for k, v in mp4_boxes(data, pos + 8, pos + size).items() if k not in found})
        pos += size
    return found
