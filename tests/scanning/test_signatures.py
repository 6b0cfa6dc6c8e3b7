"""Every signature a format's specification allows is sniffed as that format, one test each.

The checker first confirms the real format from the first bytes (``formats.sniff``). A valid
file whose signature the table does not know is reported ``not_media`` — the worst kind of
false alarm, since it looks like a file that is not an image at all. Each case below is a
valid file written by a real encoder, and the test asserts both that the sniff names the
format and that the whole check passes (or, for a decoder's own limit, is not called damage).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
from PIL import Image
from support import audiogen as ag

from dsclean import formats
from dsclean import reasons as R
from dsclean.scanning.check import check_bytes

_PIXELS = (np.arange(48 * 64 * 3) % 251).astype(np.uint8).reshape(48, 64, 3)


def _pil(fmt: str, mode: str = "RGB", **params) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(_PIXELS).convert(mode).save(buf, fmt, **params)
    return buf.getvalue()


def _tifffile(**params) -> bytes:
    tifffile = pytest.importorskip("tifffile")
    buf = io.BytesIO()
    tifffile.imwrite(buf, _PIXELS, **params)
    return buf.getvalue()


def _sound(**params) -> bytes:
    buf = io.BytesIO()
    sr = params.pop("samplerate", 16000)
    sf.write(buf, ag.signal(1, 0.3, sr).astype(np.float32), sr, **params)
    return buf.getvalue()


def _id3v2(mp3: bytes) -> bytes:
    """An ID3v2.3 tag with one title frame in front of the frames (what taggers write)."""
    frame = b"TIT2" + (6).to_bytes(4, "big") + b"\0\0" + b"\0title"
    size = len(frame)
    synchsafe = bytes([(size >> 21) & 0x7F, (size >> 14) & 0x7F, (size >> 7) & 0x7F, size & 0x7F])
    return b"ID3\x03\x00\x00" + synchsafe + frame + mp3


def _netpbm_plain(magic: bytes) -> bytes:
    # P1-P3: ASCII rasters, as the Netpbm spec defines them (Pillow reads, does not write them)
    w, h = 4, 3
    if magic == b"P1":
        body = " ".join("01"[(i % 2)] for i in range(w * h))
        return b"P1\n%d %d\n%s\n" % (w, h, body.encode())
    channels = 1 if magic == b"P2" else 3
    body = " ".join(str(i % 256) for i in range(w * h * channels))
    return b"%s\n%d %d\n255\n%s\n" % (magic, w, h, body.encode())


# name -> (file name, bytes factory, the signature the file must start with)
SIGNATURES = {
    "jpeg": ("a.jpg", lambda: _pil("JPEG"), b"\xff\xd8\xff"),
    "png": ("a.png", lambda: _pil("PNG"), b"\x89PNG\r\n\x1a\n"),
    "gif87a": ("a.gif", lambda: _pil("GIF", "P"), b"GIF87a"),
    "gif89a": ("b.gif", lambda: _pil("GIF", "P", transparency=0), b"GIF89a"),
    "bmp": ("a.bmp", lambda: _pil("BMP"), b"BM"),
    "tiff-le": ("a.tif", lambda: _pil("TIFF"), b"II*\x00"),
    "tiff-be": ("b.tif", lambda: _tifffile(byteorder=">"), b"MM\x00*"),
    "bigtiff-le": ("c.tiff", lambda: _pil("TIFF", big_tiff=True), b"II+\x00"),
    "bigtiff-be": ("d.tiff", lambda: _tifffile(bigtiff=True, byteorder=">"), b"MM\x00+"),
    "webp": ("a.webp", lambda: _pil("WEBP"), b"RIFF"),
    "pbm-plain": ("a.ppm", lambda: _netpbm_plain(b"P1"), b"P1"),
    "pgm-plain": ("a.pgm", lambda: _netpbm_plain(b"P2"), b"P2"),
    "ppm-plain": ("b.ppm", lambda: _netpbm_plain(b"P3"), b"P3"),
    "pgm-raw": ("b.pgm", lambda: _pil("PPM", "L"), b"P5"),
    "ppm-raw": ("c.ppm", lambda: _pil("PPM"), b"P6"),
    "wav-riff": ("a.wav", lambda: _sound(format="WAV", subtype="PCM_16"), b"RIFF"),
    "wav-rifx": ("b.wav", lambda: _sound(format="WAV", subtype="PCM_16", endian="BIG"), b"RIFX"),
    "wav-rf64": ("c.wav", lambda: _sound(format="RF64", subtype="PCM_16"), b"RF64"),
    "flac": ("a.flac", lambda: _sound(format="FLAC"), b"fLaC"),
    "ogg-vorbis": ("a.ogg", lambda: _sound(format="OGG", subtype="VORBIS"), b"OggS"),
    "oga-vorbis": ("a.oga", lambda: _sound(format="OGG", subtype="VORBIS"), b"OggS"),
    "opus": ("a.opus", lambda: _sound(format="OGG", subtype="OPUS", samplerate=48000), b"OggS"),
    "mp3-sync": ("a.mp3", lambda: _sound(format="MP3", subtype="MPEG_LAYER_III", samplerate=44100), b"\xff"),
    "mp3-id3": ("b.mp3", lambda: _id3v2(_sound(format="MP3", subtype="MPEG_LAYER_III", samplerate=44100)), b"ID3"),
}


@pytest.mark.parametrize("case", sorted(SIGNATURES))
def test_every_signature_is_sniffed_and_checks(case):
    name, make, signature = SIGNATURES[case]
    data = make()
    assert data.startswith(signature), f"{case}: the encoder wrote {data[:8]!r}, not the signature under test"
    fmt = formats.format_of_name(name)
    assert formats.sniff(data[: formats.SNIFF_BYTES]) == fmt
    v = check_bytes(data, name)
    assert v.format == fmt and v.reason != R.NOT_MEDIA, (case, v.status, v.reason, v.detail)
    if case == "bigtiff-be":
        # Pillow 13 cannot open big-endian BigTIFF; the structure walk found it whole, so the
        # verdict may be about the decoder (issue 27's `unsupported`) but must not be a format mix-up
        assert v.reason != R.EXTENSION_MISMATCH
    elif case == "gif89a":
        # Pillow writes GIF89a only for an extension such as a transparent colour, which convert("RGB")
        # drops: issue 27's warning is the whole verdict, the file itself is whole
        assert (v.status, v.reason) == (R.WARN, R.PALETTE_TRANSPARENCY), (case, v.reason, v.detail)
    else:
        assert v.status == R.OK, (case, v.reason, v.detail)


@pytest.mark.parametrize("name", ["a.opus", "a.oga", "A.OPUS"])
def test_ogg_audio_extensions_are_media(name):
    assert formats.format_of_name(name) == "ogg"
    assert name.lower()[name.rindex(".") :] in formats.MEDIA_EXTENSIONS


def test_a_cut_opus_file_is_caught():
    data = _sound(format="OGG", subtype="OPUS", samplerate=48000)
    v = check_bytes(data[: len(data) * 2 // 3], "cut.opus")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED), v.detail


@pytest.mark.parametrize("magic", [b"RIFX", b"II+\x00", b"MM\x00+"])
def test_a_file_cut_inside_a_new_signature_is_recognised_as_cut(magic):
    fmt = "wav" if magic == b"RIFX" else "tiff"
    assert formats.is_prefix_of_magic(magic[:3], fmt)


def test_rifx_chunk_sizes_are_read_big_endian():
    data = _sound(format="WAV", subtype="PCM_16", endian="BIG")
    cut = data[: len(data) - 1001]
    v = check_bytes(cut, "cut.wav")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED), v.detail
    assert "data chunk declares" in v.detail
