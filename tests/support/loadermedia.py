"""Media files the loader tests need, built by the real encoders (tifffile, PyAV/FFmpeg, cjpeg, Pillow)."""

from __future__ import annotations

import io
import shutil
import subprocess

import numpy as np
from PIL import Image


def tiff_float16(width: int = 64, height: int = 48) -> bytes:
    """A whole float16 greyscale TIFF: Pillow cannot identify it, tifffile reads it."""
    import tifffile

    buf = io.BytesIO()
    tifffile.imwrite(buf, np.linspace(0, 1, width * height).reshape(height, width).astype("float16"))
    return buf.getvalue()


def pyav_audio(container: str, codec: str, rate: int, seconds: float = 1.0, sample_format: str = "s16") -> bytes:
    """A mono tone encoded by FFmpeg (through PyAV) into ``container`` with ``codec``."""
    import av

    t = np.arange(int(rate * seconds)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 440 * t)
    samples = (tone * 20000).astype("int16")[None] if sample_format == "s16" else tone.astype("float32")[None]
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format=sample_format, layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def picture(width: int = 64, height: int = 48, mode: str = "RGB") -> Image.Image:
    """A smooth gradient with some structure (stable under JPEG)."""
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack(
        [x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) * 127 // max(1, width + height - 2)], -1
    )
    return Image.fromarray(rgb.astype("uint8")).convert(mode)


def jpeg(img: Image.Image, **params) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=95, **params)
    return buf.getvalue()


def cjpeg(img: Image.Image, *switches: str) -> bytes | None:
    """The JPEG libjpeg-turbo's cjpeg writes with ``switches`` (e.g. -arithmetic); None without cjpeg."""
    exe = shutil.which("cjpeg")
    if exe is None:
        return None
    ppm = io.BytesIO()
    img.convert("RGB").save(ppm, "PPM")
    return subprocess.run([exe, *switches], input=ppm.getvalue(), capture_output=True, check=True).stdout


def jpeg_with_orientation(img: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg(img, exif=exif.tobytes())


def png16(width: int = 64, height: int = 48) -> bytes:
    """A 16-bit greyscale PNG whose levels span the whole range (convert('RGB') saturates it)."""
    y, x = np.mgrid[0:height, 0:width]
    grey = (x * 65535 // max(1, width - 1)).astype("uint16")
    buf = io.BytesIO()
    Image.fromarray(grey).save(buf, "PNG")
    return buf.getvalue()


def ffmpeg_lossless_jpeg(pix_fmt: str = "bgr24", width: int = 64, height: int = 48) -> bytes:
    """A lossless JPEG (SOF3) by FFmpeg's ljpeg encoder. For RGB it writes 9-bit samples (the colour transform
    needs the extra bit): a real variant simplejpeg and Pillow do not implement; YUV is 8-bit, which they read."""
    from fractions import Fraction

    import av

    rgb = np.asarray(picture(width, height))
    ctx = av.CodecContext.create("ljpeg", "w")
    ctx.width, ctx.height, ctx.pix_fmt, ctx.time_base = width, height, pix_fmt, Fraction(1, 25)
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=pix_fmt)
    packets = ctx.encode(frame) + ctx.encode(None)
    return bytes(packets[0])
