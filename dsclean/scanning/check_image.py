"""Image checkers: a real decode plus each format's own integrity rules.

Why not ``Image.verify()``: it checks little beyond PNG chunk CRCs and misses
truncation. Why not only ``Image.load()``: Pillow discards libjpeg's
"Corrupt JPEG data" warnings, so a JPEG damaged mid-stream loads "fine" with
wrong pixels. So JPEG goes through libjpeg-turbo in strict mode (simplejpeg),
PNG gets a chunk walk (lengths, CRCs, IEND) before Pillow decodes the pixels,
and every format is decoded frame by frame up to ``max_frames``.
"""
from __future__ import annotations

import io
import struct
import warnings
import zlib

import simplejpeg
from PIL import Image

from .. import reasons as R
from .verdict import Verdict

# libjpeg's recoverable warnings: pixels are wrong but a decoder returns them.
_JPEG_TRUNCATION = ("Premature end",)
_JPEG_MODE = {"Gray": "L", "CMYK": "CMYK", "YCCK": "CMYK"}
# The cheapest decode that still reads every coefficient: the smallest output libjpeg-turbo can
# scale to (1/8: DC-only inverse DCT), grey output (no chroma upsampling or colour conversion;
# CMYK stays CMYK), fast DCT and upsampling.
_FAST = {"min_height": 1, "min_width": 1, "fastdct": True, "fastupsample": True}


def fast_decode_space(colorspace: str) -> str:
    """simplejpeg's output colorspace for the check: CMYK for CMYK/YCCK sources, else GRAY."""
    return "CMYK" if colorspace in ("CMYK", "YCCK") else "GRAY"


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _too_many_pixels(v: Verdict, width: int, height: int, max_pixels: int) -> bool:
    """Fill the size facts; mark empty / decompression bomb. True if decoding must not go on."""
    v.width, v.height = width, height
    if width <= 0 or height <= 0:
        v.mark(R.BAD, R.EMPTY, f"image is {width}x{height} pixels")
        return True
    if max_pixels and width * height > max_pixels:
        v.mark(R.BAD, R.DECOMPRESSION_BOMB, f"{width}x{height} = {width * height} pixels, limit {max_pixels}")
        return True
    return False


def check_jpeg(path: str, v: Verdict, opts) -> None:
    """libjpeg-turbo decode with warnings as errors, at 1/8 scale, grey.

    The scaled grey decode still entropy-decodes every coefficient of every
    component, so truncation and corrupt data are seen, at a fraction of the
    IDCT and colour cost (tests/test_check_image.py checks that it flags
    exactly what a full-size RGB decode flags).
    """
    data = _read(path)
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError as exc:
        # A file cut before its first scan (SOS marker) has an incomplete header: that is truncation.
        reason = R.TRUNCATED if data.find(b"\xff\xda") < 0 else _jpeg_reason(str(exc))
        v.mark(R.BAD, reason, f"JPEG header: {exc}")
        return
    v.frames = 1
    v.mode = _JPEG_MODE.get(colorspace, "RGB")
    if _too_many_pixels(v, width, height, opts.max_pixels):
        return
    space = fast_decode_space(colorspace)
    try:
        simplejpeg.decode_jpeg(data, colorspace=space, strict=True, **_FAST)
    except ValueError as exc:
        _jpeg_failure(data, space, str(exc), v, opts)
        return
    if data.rfind(b"\xff\xd9") < 0:  # belt and braces: libjpeg fakes a missing EOI with a warning
        v.mark(R.BAD, R.TRUNCATED, "JPEG end-of-image marker (FFD9) missing")


def _jpeg_reason(message: str) -> str:
    if any(s in message for s in _JPEG_TRUNCATION):
        return R.TRUNCATED
    if "not supported" in message.lower() or "unsupported" in message.lower():
        return R.UNSUPPORTED
    return R.CORRUPT


def _jpeg_failure(data: bytes, space: str, message: str, v: Verdict, opts) -> None:
    """Strict decode failed: a recoverable warning (lenient: warn) or a hard error."""
    reason = _jpeg_reason(message)
    try:
        simplejpeg.decode_jpeg(data, colorspace=space, strict=False, **_FAST)
        recoverable = True
    except ValueError as exc:
        recoverable, message = False, str(exc)
        reason = _jpeg_reason(message)
    if reason == R.UNSUPPORTED:
        # A JPEG variant libjpeg-turbo's fast path does not take (e.g. 12-bit): let Pillow try.
        v.status, v.reason, v.detail = R.OK, None, ""
        _check_with_pillow(data, v, opts)
        return
    if recoverable and opts.lenient:
        v.mark(R.WARN, reason, f"recoverable JPEG warning: {message}")
    else:
        v.mark(R.BAD, reason, f"JPEG decode: {message}")


def check_png(path: str, v: Verdict, opts) -> None:
    """Walk every chunk (length, CRC, IEND), then decode the pixels with Pillow."""
    data = _read(path)
    if not _png_chunks_ok(data, v):
        return
    _check_with_pillow(data, v, opts)


#: the critical chunks of the PNG specification; any other chunk whose name starts upper-case
#: is critical-but-unknown, which a decoder must refuse (APNG's acTL/fcTL/fdAT are ancillary)
_PNG_CRITICAL = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND"})


def _png_chunks_ok(data: bytes, v: Verdict) -> bool:
    view = memoryview(data)
    pos, n, first = 8, len(data), True
    while True:
        if pos + 8 > n:
            v.mark(R.BAD, R.TRUNCATED, f"PNG ends at byte {n} without an IEND chunk")
            return False
        length, ctype = struct.unpack_from(">I4s", data, pos)
        name = ctype.decode("latin-1")
        if first and ctype != b"IHDR":
            v.mark(R.BAD, R.CORRUPT, f"PNG first chunk is {name!r}, not IHDR")
            return False
        first = False
        if length > 0x7FFFFFFF or not ctype.isalpha():
            v.mark(R.BAD, R.CORRUPT, f"PNG chunk at byte {pos} is malformed (type {ctype!r}, length {length})")
            return False
        if ctype[0] < 0x61 and ctype not in _PNG_CRITICAL:  # upper-case first letter: critical
            v.mark(R.BAD, R.UNSUPPORTED, f"PNG has a critical chunk {name!r} no PNG decoder knows (PNG spec: reject it)")
            return False
        end = pos + 12 + length
        if end > n:
            v.mark(R.BAD, R.TRUNCATED, f"PNG chunk {name} at byte {pos} needs {length} bytes; file ends at {n}")
            return False
        (stored,) = struct.unpack_from(">I", data, end - 4)
        if zlib.crc32(view[pos + 4 : end - 4]) != stored:
            v.mark(R.BAD, R.CORRUPT, f"PNG chunk {name} at byte {pos} fails its CRC")
            return False
        pos = end
        if ctype == b"IEND":
            if pos < n:
                v.detail = f"{n - pos} bytes after IEND"
            return True


def check_pillow_format(path: str, v: Verdict, opts) -> None:
    """GIF, BMP, TIFF, WebP: container rules, then a full Pillow decode."""
    data = _read(path)
    if v.format == "gif" and not data.rstrip(b"\x00").endswith(b"\x3b"):
        # Pillow decodes a cut GIF without complaint when the cut falls between frames.
        _check_with_pillow(data, v, opts)
        v.mark(R.BAD, R.TRUNCATED, "GIF trailer (0x3B) missing")
        return
    if v.format == "tiff":
        if len(data) < 8:
            v.mark(R.BAD, R.TRUNCATED, f"TIFF header needs 8 bytes; file has {len(data)}")
            return
        # Writers put the first IFD (the image directory) after the pixel data: a cut file loses it.
        (ifd,) = struct.unpack_from("<I" if data[:2] == b"II" else ">I", data, 4)
        if ifd + 2 > len(data):
            v.mark(R.BAD, R.TRUNCATED, f"TIFF directory at byte {ifd} lies past the end of the file ({len(data)} bytes)")
            return
    if v.format == "webp":
        (declared,) = struct.unpack_from("<I", data, 4)
        if declared + 8 > len(data):
            v.mark(R.BAD, R.TRUNCATED, f"WebP RIFF header declares {declared + 8} bytes; file has {len(data)}")
            return
    _check_with_pillow(data, v, opts)


def _check_with_pillow(data: bytes, v: Verdict, opts) -> None:
    """Open (bomb check first), then load every frame up to ``opts.max_frames``."""
    Image.MAX_IMAGE_PIXELS = opts.max_pixels or None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                v.mode = im.mode
                if _too_many_pixels(v, im.width, im.height, opts.max_pixels):
                    return
                n_frames = getattr(im, "n_frames", 1)
                v.frames = n_frames
                for i in range(min(n_frames, opts.max_frames)):
                    im.seek(i)
                    im.load()
                if n_frames > opts.max_frames:
                    v.detail = f"decoded the first {opts.max_frames} of {n_frames} frames"
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        v.mark(R.BAD, R.DECOMPRESSION_BOMB, str(exc))
    except Exception as exc:  # Pillow raises OSError/ValueError/SyntaxError/... on damaged data
        v.mark(R.BAD, _pillow_reason(str(exc)), f"{type(exc).__name__}: {exc}")


def _pillow_reason(message: str) -> str:
    low = message.lower()
    if "truncated" in low or "premature" in low or "end of file" in low or "eof" in low:
        return R.TRUNCATED
    if "not supported" in low or "unsupported" in low:
        return R.UNSUPPORTED
    return R.CORRUPT


CHECKERS = {
    "jpeg": check_jpeg,
    "png": check_png,
    "gif": check_pillow_format,
    "bmp": check_pillow_format,
    "tiff": check_pillow_format,
    "webp": check_pillow_format,
}
