"""Image checkers: a real decode (or, for PNG, every checksum and length) plus each format's own rules.

Why not ``Image.verify()``: it checks little beyond PNG chunk CRCs and misses
truncation. Why not only ``Image.load()``: Pillow discards libjpeg's "Corrupt JPEG
data" warnings, so a JPEG damaged mid-stream loads "fine" with wrong pixels; it
decodes a GIF cut between frames; it never looks at a PNG's Adler-32. So:

- JPEG goes through libjpeg-turbo in strict mode (simplejpeg) at 1/8 scale, every
  image of a multi-picture (MPF/MPO) file;
- PNG/APNG: every chunk's CRC, the chunk order, and every image's zlib stream
  (Adler-32, inflated length, filter bytes) in :mod:`dsclean.scanning.formats.png`; Pillow
  reads the header chunks (facts, bomb limit, its own chunk rules) but unfilters no pixel;
- GIF, BMP, TIFF, WebP: a full Pillow decode of every frame up to ``max_frames``, after
  the container walks of :mod:`~dsclean.scanning.formats.gif`, :mod:`~dsclean.scanning.formats.bmp` and
  :mod:`~dsclean.scanning.formats.tiff`.

Checkers take the file's bytes (``bytes`` or a read-only ``mmap``) and fill the verdict.
"""

from __future__ import annotations

import io
import re
import struct
import warnings
from typing import Callable

import simplejpeg

from .. import reasons as R
from . import facts, fallback, importguard
from .formats import bmp, gif, jpeg, tiff
from .verdict import Verdict, bad, warn

# Pillow and the PNG chunk walker (with its zlib): imported on the first file that needs them (see
# _load_pillow), so a scan of JPEGs alone never loads them (libjpeg-turbo checks JPEGs); the forkserver
# preloads them when the scan expects a format they check (the rows with pillow=True in dsclean.scanning.formats).
Image = PngImagePlugin = png = None

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


# --------------------------------------------------------------------------- JPEG


def check_jpeg(data, v: Verdict, opts) -> None:
    """libjpeg-turbo decode with warnings as errors, at 1/8 scale, grey; then every MPF image the same way.

    The scaled grey decode still entropy-decodes every coefficient of every
    component, so truncation and corrupt data are seen, at a fraction of the
    IDCT and colour cost (tests/scanning/test_check_image.py checks that it flags
    exactly what a full-size RGB decode flags).
    """
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
    # Facts need the canonical thumbnail's side each way (as the Pillow ``draft`` of every other reader of
    # facts keeps it): a 48 px JPEG at 1/8 would be 6 pixels wide, and its facts and perceptual hash noise.
    keep = (min(width, facts.decode_side()), min(height, facts.decode_side())) if opts.facts else (1, 1)
    thumbnail = decode_eighth(data, colorspace, "JPEG", v, opts, keep)
    # ^ THE scaled grey decode (CMYK for CMYK sources; None when the decode failed or a JPEG
    #   variant went to Pillow): the image's quality facts come from it, below.
    if thumbnail is None:
        return
    if data.rfind(b"\xff\xd9") < 0:  # belt and braces: libjpeg fakes a missing EOI with a warning
        v.mark(R.BAD, R.TRUNCATED, "JPEG end-of-image marker (FFD9) missing")
        return
    _check_mpf_pictures(data, v, opts)
    if opts.facts and v.status != R.BAD and thumbnail.shape[2] == 1:  # CMYK sources: no grey to take facts from
        facts.from_grey(v, thumbnail, colour_stored=colorspace != "Gray", orientation=jpeg.exif_orientation(data))


def decode_eighth(data, colorspace: str, label: str, v: Verdict, opts, keep: tuple[int, int] = (1, 1)):
    """The strict scaled decode of one JPEG: 1/8, or the smallest scale that keeps ``keep`` = (width, height)
    pixels. Marks ``v`` on failure. Returns the pixels (a numpy array), or None if the decode failed (or an
    unsupported variant was handed to Pillow). Every scale entropy-decodes every coefficient: the verdict
    does not depend on it."""
    space = fast_decode_space(colorspace)
    try:
        return simplejpeg.decode_jpeg(
            data, colorspace=space, strict=True, **{**_FAST, "min_width": keep[0], "min_height": keep[1]}
        )
    except ValueError as exc:
        _jpeg_failure(data, space, str(exc), label, v, opts)
        return None


def _jpeg_reason(message: str) -> str:
    if any(s in message for s in _JPEG_TRUNCATION):
        return R.TRUNCATED
    if "not supported" in message.lower() or "unsupported" in message.lower():
        return R.UNSUPPORTED
    return R.CORRUPT


def _jpeg_failure(data, space: str, message: str, label: str, v: Verdict, opts) -> None:
    """Strict decode failed: a recoverable warning (lenient: warn) or a hard error."""
    reason = _jpeg_reason(message)
    try:
        simplejpeg.decode_jpeg(data, colorspace=space, strict=False, **_FAST)
        recoverable = True
    except ValueError as exc:
        recoverable, message = False, str(exc)
        reason = _jpeg_reason(message)
    if reason == R.UNSUPPORTED:
        # A JPEG variant libjpeg-turbo's fast path does not take (e.g. 12-bit): the next decoder, Pillow, decides.
        if label == "JPEG":
            v.status, v.reason, v.detail, v.frames = R.OK, None, "", None
        before = v.status
        _check_with_pillow(
            bytes(data),
            v,
            opts,
            label=f"{label}: " if label != "JPEG" else "",
            whole=data.rfind(b"\xff\xd9") >= 0,
            refused=f"simplejpeg refused ({message})",
        )
        if v.status == before:
            v.detail = _join(v.detail, f"decoders: simplejpeg refused ({message}), Pillow read it")
        return
    if recoverable and opts.lenient:
        v.mark(
            R.WARN,
            reason,
            f"{label}: recoverable JPEG warning: {message}"
            if label != "JPEG"
            else f"recoverable JPEG warning: {message}",
        )
    else:
        v.add([bad(reason, f"{label}: JPEG decode: {message}" if label != "JPEG" else f"JPEG decode: {message}")])


def _check_mpf_pictures(data, v: Verdict, opts) -> None:
    """Every further image an MPF index lists: a JPEG at its offset, decoding strictly.

    Decoders find an image by its offset and read it to its end-of-image marker; they
    do not use its size. So a size reaching past the end of the file is truncation only
    when the image really is cut; a whole image with a wrong size is a warning (Pillow's
    own MPO writer records wrong sizes from the third image on).
    """
    pictures, count, findings = jpeg.mpf_pictures(data)
    v.add(findings)
    if count == 1:
        return
    v.frames = count
    n = len(data)
    for pic in pictures[: max(0, opts.max_frames - 1)]:
        label = f"MPF image {pic.number} of {count} (byte {pic.start})"
        if pic.start >= n:
            v.add([bad(R.TRUNCATED, f"{label}: starts past the end of the file ({n} bytes)")])
            return
        if data[pic.start : pic.start + 2] != b"\xff\xd8":
            v.add([bad(R.CORRUPT, f"{label}: no JPEG start-of-image marker at its offset")])
            return
        part = data[pic.start : min(n, pic.start + pic.size)]
        try:
            height, width, colorspace, _ = simplejpeg.decode_jpeg_header(part)
        except ValueError as exc:
            v.add([bad(R.TRUNCATED if part.find(b"\xff\xda") < 0 else R.CORRUPT, f"{label}: JPEG header: {exc}")])
            return
        if opts.max_pixels and width * height > opts.max_pixels:
            v.add(
                [
                    bad(
                        R.DECOMPRESSION_BOMB,
                        f"{label}: {width}x{height} = {width * height} pixels, limit {opts.max_pixels}",
                    )
                ]
            )
            return
        if decode_eighth(part, colorspace, label, v, opts) is None:
            return
        if pic.start + pic.size > n:
            v.add(
                [
                    warn(
                        R.NONCONFORMING,
                        f"{label}: the MPF index says {pic.size} bytes, {n - pic.start} are left, "
                        "yet the image is whole (its recorded size is wrong)",
                    )
                ]
            )
    if count - 1 > opts.max_frames - 1:
        v.detail = _join(v.detail, f"decoded the first {opts.max_frames} of {count} MPF images")


# --------------------------------------------------------------------------- PNG


def check_png(data, v: Verdict, opts) -> None:
    """Chunks (CRC, order), then Pillow's header read (facts, bomb limit), then every image's zlib data."""
    _load_pillow()
    layout = png.read_chunks(data)
    v.add(layout.findings)
    if layout.failed:
        return
    if layout.trailing:
        v.detail = _join(v.detail, f"{layout.trailing} bytes after IEND")
    if not _pillow_png_header(data, layout, v, opts):
        return
    v.add(png.check_image_data(data, layout, opts.max_frames))
    if len(layout.images) > opts.max_frames and v.status != R.BAD:
        v.detail = _join(v.detail, f"inflated the first {opts.max_frames} of {len(layout.images)} frames")
    if opts.facts and v.status != R.BAD:
        facts.from_encoded_image(v, data)  # the chunk check unfilters no pixel: Pillow decodes frame 0 for the facts


def _pillow_png_header(data, layout: png.Layout, v: Verdict, opts) -> bool:
    """What Pillow reads without decoding: the chunks before the image data (Image.open), and the
    ancillary chunks after it, through Pillow's own chunk handlers as its load() would call them.
    So a PNG Pillow refuses to load stays bad, though no pixel is unfiltered here."""
    fp = io.BytesIO(data if isinstance(data, bytes) else bytes(data))
    try:
        # The plugin class itself, not Image.open: its own exception says why (Image.open would only say
        # "cannot identify"); the size limit Image.open would apply is _too_many_pixels' (--max-pixels).
        with PngImagePlugin.PngImageFile(fp) as im:
            v.mode, v.frames = im.mode, getattr(im, "n_frames", 1)
            if _too_many_pixels(v, im.width, im.height, opts.max_pixels):
                return False
            stream = PngImagePlugin.PngStream(fp)
            stream.im_mode, stream.im_size = im.mode, im.size
            for ctype, at, length in layout.late_chunks:
                fp.seek(at)
                try:
                    stream.call(ctype, at, length)
                except (EOFError, AttributeError, UnicodeDecodeError):
                    pass  # what Pillow's load_end skips: unknown chunks, chunks that end its reading
    except MemoryError:
        raise  # the ceiling, not the file: too_large (dsclean.scanning.check), never corrupt
    except Exception as exc:  # Pillow refuses the header or an ancillary chunk: loading it would fail too
        v.add([bad(_pillow_reason(str(exc)), f"Pillow refuses it: {type(exc).__name__}: {exc}")])
        return False
    return True


# --------------------------------------------------------------------------- GIF, BMP, TIFF, WebP


def check_gif(data, v: Verdict, opts) -> None:
    """The block walk (where the GIF ends, what lies after), then a full Pillow decode of every frame."""
    walk = gif.walk(data)
    v.add(walk.findings)
    if walk.trailer is not None and walk.trailer + 1 < len(data):
        v.detail = _join(v.detail, f"{len(data) - walk.trailer - 1} bytes after the GIF trailer")
    _check_with_pillow(data, v, opts)


def check_bmp(data, v: Verdict, opts) -> None:
    """RLE bitmaps walked run by run, then a full Pillow decode."""
    v.add(bmp.rle_findings(data))
    if v.status != R.BAD:
        _check_with_pillow(data, v, opts)


def check_tiff(data, v: Verdict, opts) -> None:
    """Every directory (page) and every strip/tile inside the file, then Pillow decodes every page; a whole
    TIFF Pillow cannot read (float samples, a compression it lacks, ...) goes to tifffile (dsclean.scanning.fallback)."""
    walk = tiff.walk(data)
    v.add(walk.findings)
    if v.status != R.BAD:
        _check_with_pillow(
            data, v, opts, whole=True, next_decoder=lambda: fallback.tifffile_image(data, opts.max_frames)
        )


def check_webp(data, v: Verdict, opts) -> None:
    """The RIFF size against the bytes present, then Pillow decodes every frame."""
    (declared,) = struct.unpack_from("<I", data, 4)
    if declared + 8 > len(data):
        v.mark(R.BAD, R.TRUNCATED, f"WebP RIFF header declares {declared + 8} bytes; file has {len(data)}")
        return
    _check_with_pillow(data, v, opts)


def _check_with_pillow(
    data,
    v: Verdict,
    opts,
    label: str = "",
    *,
    whole: bool = True,
    next_decoder: Callable[[], fallback.Outcome] | None = None,
    refused: str | None = None,
) -> None:
    """Open (bomb check first), then load every frame up to ``opts.max_frames``.

    ``whole``: dsclean's own walk found the structure whole, so Pillow's "unsupported" (and, with a
    ``next_decoder``, its "cannot identify") is a decoder's limit: the next decoder decides, else ``unsupported``
    (a warning). A damaged file (the walk marked it bad) never gets here. ``refused``: what the decoder before
    Pillow said of the variant (then Pillow's "cannot identify" is a limit too)."""
    _load_pillow()
    Image.MAX_IMAGE_PIXELS = opts.max_pixels or None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data if isinstance(data, bytes) else bytes(data))) as im:
                if not label:
                    v.mode = im.mode
                    if _too_many_pixels(v, im.width, im.height, opts.max_pixels):
                        return
                n_frames = getattr(im, "n_frames", 1)
                if not label:
                    v.frames = n_frames
                for i in range(min(n_frames, opts.max_frames)):
                    im.seek(i)
                    im.load()
                    if i == 0 and opts.facts and not label:
                        facts.from_pil(v, im)  # the first frame, as decoded for the check
                if n_frames > opts.max_frames:
                    v.detail = _join(v.detail, f"decoded the first {opts.max_frames} of {n_frames} frames")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        v.add([bad(R.DECOMPRESSION_BOMB, f"{label}{exc}")])
    except MemoryError:
        raise  # the ceiling, not the file: too_large (dsclean.scanning.check), never corrupt
    except Exception as exc:  # Pillow raises OSError/ValueError/SyntaxError/... on damaged data
        reason = _pillow_reason(str(exc))
        unknown = isinstance(exc, Image.UnidentifiedImageError) and (next_decoder is not None or refused is not None)
        if whole and (reason == R.UNSUPPORTED or unknown) and v.status != R.BAD:
            said = _OBJECT_REPR.sub("", str(exc))  # "cannot identify image file <_io.BytesIO object at 0x...>"
            _decoder_limit(
                v,
                f"{label}{refused + ', ' if refused else ''}Pillow refused: {type(exc).__name__}: {said}",
                next_decoder,
            )
        else:
            v.add([bad(reason, f"{label}{type(exc).__name__}: {exc}")])


_OBJECT_REPR = re.compile(r" ?<[\w.]+ object at 0x[0-9a-f]+>")


def _decoder_limit(v: Verdict, refused: str, next_decoder: Callable[[], fallback.Outcome] | None) -> None:
    """Pillow cannot read a structurally whole image: ``unsupported`` (warn) when the next decoder reads it or does
    not know it either; ``corrupt`` when the next decoder knows the variant and fails on its data."""
    out = next_decoder() if next_decoder is not None else None
    if out is None:
        v.mark(R.WARN, R.UNSUPPORTED, f"{refused}; decoders: Pillow only, which cannot read it")
    elif out.read:
        if v.width is None:
            v.width, v.height, v.frames = out.width, out.height, out.pages
        v.mark(R.WARN, R.UNSUPPORTED, f"{refused}; decoders: Pillow refused, {out.said()}")
    elif out.unsupported:
        v.mark(R.WARN, R.UNSUPPORTED, f"{refused}; decoders: Pillow refused, {out.said()}; no decoder here reads it")
    else:
        v.mark(R.BAD, R.CORRUPT, f"{refused}; decoders: Pillow refused, {out.said()}")


def _pillow_reason(message: str) -> str:
    low = message.lower()
    if "truncated" in low or "premature" in low or "end of file" in low or "eof" in low:
        return R.TRUNCATED
    if "not supported" in low or "unsupported" in low:
        return R.UNSUPPORTED
    return R.CORRUPT


def _load_pillow() -> None:
    """Import Pillow and :mod:`dsclean.scanning.formats.png` now, if not done yet, as a checker module is imported:
    under the worker's import guard (outside the file's memory ceiling and timeout, :mod:`dsclean.scanning.importguard`)."""
    global Image, PngImagePlugin, png
    if png is None:
        with importguard.guarded():
            from PIL import Image as image
            from PIL import PngImagePlugin as png_plugin

            from .formats import png as png_walker
        Image, PngImagePlugin, png = image, png_plugin, png_walker  # png last: whoever sees it set sees all three


def _join(detail: str, more: str) -> str:
    return f"{detail}; {more}" if detail else more


CHECKERS = {
    "jpeg": check_jpeg,
    "png": check_png,
    "gif": check_gif,
    "bmp": check_bmp,
    "tiff": check_tiff,
    "webp": check_webp,
}
