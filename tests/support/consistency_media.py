"""Generated media for the consistency tests (issue 27): every case written by a real library."""

from __future__ import annotations

import io
import os
import struct

import numpy as np
import soundfile
from PIL import Image


def jpeg(im: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def png(im: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", **kw)
    return buf.getvalue()


def tiff(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "TIFF")
    return buf.getvalue()


def photo(w: int = 32, h: int = 32, seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def segments(data: bytes) -> list[tuple[int, int, int]]:
    """(marker, start, end) of a JPEG's header segments, up to SOS."""
    out, pos = [], 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        (length,) = struct.unpack_from(">H", data, pos + 2)
        out.append((marker, pos, pos + 2 + length))
        if marker == 0xDA:
            break
        pos += 2 + length
    return out


def cmyk_jpeg(adobe: bool = True, transform: int | None = None) -> bytes:
    """A CMYK JPEG as Pillow writes it (with an Adobe APP14 marker, transform 0); ``adobe=False`` strips the
    marker; ``transform=2`` rewrites it to say YCCK."""
    data = jpeg(photo().convert("CMYK"))
    app14 = [(s, e) for m, s, e in segments(data) if m == 0xEE]
    assert app14, "Pillow writes CMYK JPEGs with an Adobe marker"
    s, e = app14[0]
    if not adobe:
        return data[:s] + data[e:]
    if transform is not None:
        body = bytearray(data)
        body[s + 4 + 5 + 6] = transform  # after FFEE, length, "Adobe": version(2) flags0(2) flags1(2) transform
        return bytes(body)
    return data


def oriented_jpeg(orientation: int, w: int = 40, h: int = 20) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg(photo(w, h), exif=exif)


def sound(path: str, rate: int = 16000, channels: int = 1, seconds: float = 1.0, fmt: str | None = None) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    t = np.arange(int(rate * seconds)) / rate
    mono = 0.3 * np.sin(2 * np.pi * 440 * t)
    soundfile.write(path, np.stack([mono] * channels, axis=1), rate, format=fmt)


def write(root, rel: str, data: bytes) -> str:
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path
