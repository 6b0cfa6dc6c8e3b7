"""The next decoder of a format, for a file whose structure is whole but whose first decoder refuses it.

A decoder's limit is not damage (issue 27): when dsclean's own walk of a file found every
promise and checksum kept and only the decoder says "unsupported" / "cannot identify", the
check asks the next decoder it has for the format before concluding. What each one said
goes into the verdict's detail (``decoders: libsndfile refused (...); PyAV read it``).

Per format (docs/guides/loaders.md):

- JPEG: simplejpeg (libjpeg-turbo, strict) -> Pillow;
- TIFF: Pillow -> tifffile (optional: installed with ``dsclean[tiff]``);
- audio (WAV, FLAC, Ogg, MP3): libsndfile (soundfile) -> PyAV/FFmpeg (optional: ``dsclean[av]``);
- PNG, GIF, BMP, WebP: Pillow only (no second decoder).

A fallback decoder that knows the variant and fails on its data reports damage (``corrupt``);
one that does not know it either leaves the verdict at ``unsupported`` (a warning, never moved).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

#: what a decoder says when the variant, not the data, is the problem
UNSUPPORTED_TEXT = re.compile(
    r"unimplemented|unsupported|not supported|not implemented|unknown (format|codec)|"
    r"cannot identify|no decoder|decoder .* not found|codec not found|unsupported codec|"
    r"not available|requires the .* package|imagecodecs",
    re.IGNORECASE,
)


@dataclass
class Outcome:
    """What the next decoder made of the file."""

    decoder: str  # its name, as the detail shows it
    read: bool  # it decoded the whole file
    unsupported: bool = False  # it does not know the variant either (or is not installed)
    message: str = ""
    # audio facts from its decode (None: not audio, or not read)
    sample_rate: int | None = None
    channels: int | None = None
    frames: int | None = None
    codec: str | None = None
    # image facts
    width: int | None = None
    height: int | None = None
    pages: int | None = None

    def said(self) -> str:
        """``PyAV read it (codec aac, 44100 Hz, 1 ch, 44100 frames)`` / ``PyAV refused: ...``."""
        if self.read:
            what = (
                f"codec {self.codec}, {self.sample_rate} Hz, {self.channels} ch, {self.frames} frames"
                if self.sample_rate is not None
                else f"{self.pages} page(s), {self.width}x{self.height}"
            )
            return f"{self.decoder} read it ({what})"
        return f"{self.decoder} {'cannot read it' if self.unsupported else 'failed'}: {self.message}"


def pyav_audio(data) -> Outcome:
    """Decode every frame of an audio file through PyAV (FFmpeg), from memory."""
    try:
        import av
    except ImportError:
        return Outcome("PyAV", False, True, "not installed (pip install 'dsclean[av]')")
    frames = 0
    try:
        with av.open(io.BytesIO(bytes(data)), "r") as container:
            if not container.streams.audio:
                return Outcome("PyAV", False, True, "no audio stream FFmpeg knows")
            stream = container.streams.audio[0]
            ctx = stream.codec_context
            for frame in container.decode(stream):
                frames += frame.samples
            return Outcome(
                "PyAV", True, sample_rate=ctx.sample_rate, channels=ctx.channels, frames=frames, codec=ctx.name
            )
    except MemoryError:
        raise
    except Exception as exc:  # FFmpeg's own error on the stream: its words decide (unknown codec or damage)
        text = f"{type(exc).__name__}: {exc}"
        return Outcome("PyAV", False, bool(UNSUPPORTED_TEXT.search(text)), text)


def tifffile_image(data, max_pages: int) -> Outcome:
    """Decode every page (up to ``max_pages``) of a TIFF through tifffile, from memory."""
    try:
        import tifffile
    except ImportError:
        return Outcome("tifffile", False, True, "not installed (pip install 'dsclean[tiff]')")
    try:
        with tifffile.TiffFile(io.BytesIO(bytes(data))) as tif:
            pages = tif.pages
            shape = None
            for i, page in enumerate(pages):
                if i >= max_pages:
                    break
                arr = page.asarray()
                shape = shape or arr.shape
            first = pages[0]
            return Outcome(
                "tifffile", True, width=int(first.imagewidth), height=int(first.imagelength), pages=len(pages)
            )
    except MemoryError:
        raise
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        return Outcome("tifffile", False, bool(UNSUPPORTED_TEXT.search(text)), text)
