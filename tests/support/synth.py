"""Synthetic media for tests, benchmarks and the bundled sample data.

Deterministic (seeded) photo-like images and tones, encoded in every format
dsclean checks, plus the ways files get damaged in the wild (cut short, bytes
overwritten, a chunk's CRC broken). Not part of the product: it lives with the
tests (``tests/support``), and the scripts that need it put ``tests/`` on
``sys.path``, so tests, benchmarks and ``sample_data`` share one implementation.
"""
from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def photo_like(width: int = 256, height: int = 256, seed: int = 0, mode: str = "RGB") -> Image.Image:
    """A smooth, textured picture that compresses like a photo (not like noise or flat colour)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack(
        [
            128 + 100 * np.sin(x / (width / (2 + 3 * rng.random())) + rng.random() * 6),
            128 + 100 * np.cos(y / (height / (2 + 3 * rng.random())) + rng.random() * 6),
            128 + 80 * np.sin((x + y) / ((width + height) / 6)),
        ],
        axis=-1,
    )
    noise = rng.normal(0, 12, size=(height, width, 3))
    img = Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(6):
        x0, y0 = int(rng.integers(0, max(1, width))), int(rng.integers(0, max(1, height)))
        x1, y1 = x0 + int(rng.integers(1, max(2, width // 3))), y0 + int(rng.integers(1, max(2, height // 3)))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=color)
    img = img.filter(ImageFilter.GaussianBlur(1.2))
    return img.convert(mode) if mode != "RGB" else img


def encode_image(img: Image.Image, fmt: str, **params) -> bytes:
    """Encode with Pillow (``fmt`` as Pillow names it: JPEG, PNG, GIF, BMP, TIFF, WEBP)."""
    buf = io.BytesIO()
    img.save(buf, fmt, **params)
    return buf.getvalue()


def jpeg(width: int = 256, height: int = 256, seed: int = 0, **params) -> bytes:
    params.setdefault("quality", 90)
    return encode_image(photo_like(width, height, seed), "JPEG", **params)


def png(width: int = 64, height: int = 64, seed: int = 0, mode: str = "RGB") -> bytes:
    return encode_image(photo_like(width, height, seed, mode), "PNG")


def animated_gif(frames: int = 3, size: int = 32, seed: int = 0) -> bytes:
    imgs = [photo_like(size, size, seed + i).convert("P") for i in range(frames)]
    buf = io.BytesIO()
    imgs[0].save(buf, "GIF", save_all=True, append_images=imgs[1:], duration=100, loop=0)
    return buf.getvalue()


def tone(seconds: float = 0.25, rate: int = 16_000, channels: int = 1, seed: int = 0) -> np.ndarray:
    """A float32 signal in [-1, 1] shaped (frames, channels): a few sines plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate), dtype=np.float32) / rate
    cols = []
    for c in range(channels):
        f = 220.0 * (1 + c) * (1 + rng.random())
        cols.append(0.5 * np.sin(2 * np.pi * f * t) + 0.2 * np.sin(2 * np.pi * 3 * f * t) + 0.02 * rng.standard_normal(t.size))
    return np.stack(cols, axis=1).astype(np.float32)


def encode_audio(data: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    """Encode with soundfile: fmt WAV / FLAC / OGG / MP3 (libsndfile names)."""
    import soundfile as sf

    buf = io.BytesIO()
    if fmt == "MP3" and subtype is None:
        subtype = "MPEG_LAYER_III"
    sf.write(buf, data, rate, format=fmt, subtype=subtype)
    out = buf.getvalue()
    peak = out.find(b"PEAK", 12, 512)
    if fmt == "WAV" and peak > 0:
        # libsndfile stamps float WAVs' PEAK chunk with the current time: zero it for reproducible bytes
        out = out[: peak + 12] + b"\0\0\0\0" + out[peak + 16 :]
    return out


# --- damage ---------------------------------------------------------------------------------


def truncate(data: bytes, fraction: float) -> bytes:
    """The first ``fraction`` of the bytes: a download or copy cut short."""
    return data[: max(1, int(len(data) * fraction))]


def overwrite(data: bytes, at: float = 0.5, length: int = 64, seed: int = 0) -> bytes:
    """``length`` random bytes written over the middle: a bad sector or a bit-rotted block."""
    rng = np.random.default_rng(seed)
    pos = int(len(data) * at)
    junk = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
    return data[:pos] + junk + data[pos + length :]


def png_break_crc(data: bytes, chunk: bytes = b"IDAT") -> bytes:
    """Flip one byte inside a PNG chunk's data so its CRC no longer matches."""
    pos = data.index(chunk) + 4 + 2
    return data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :]


def png_chunk(ctype: bytes, payload: bytes) -> bytes:
    """One well-formed PNG chunk (length, type, data, CRC)."""
    return struct.pack(">I", len(payload)) + ctype + payload + struct.pack(">I", zlib.crc32(ctype + payload))


def png_bomb(width: int = 20_000, height: int = 20_000) -> bytes:
    """A tiny PNG whose header claims ``width x height`` pixels (a decompression bomb)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grayscale
    row = b"\x00" + b"\x00" * width
    idat = zlib.compress(row * 16, 9)  # a few rows are enough: the header is what is checked first
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


HTML_PAGE = b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>Not Found</body></html>\n"


def ogg_set_serial(data: bytes, serial: int = 1) -> bytes:
    """Rewrite every Ogg page's stream serial number (and its CRC).

    libsndfile picks a random serial per file; fixing it makes generated Ogg
    files byte-for-byte reproducible.
    """
    from dsclean.scanning.ogg import ogg_crc

    out, pos = bytearray(data), 0
    while pos + 27 <= len(out) and out[pos : pos + 4] == b"OggS":
        nseg = out[pos + 26]
        length = 27 + nseg + sum(out[pos + 27 : pos + 27 + nseg])
        struct.pack_into("<I", out, pos + 14, serial)
        struct.pack_into("<I", out, pos + 22, 0)
        struct.pack_into("<I", out, pos + 22, ogg_crc(bytes(out[pos : pos + length])))
        pos += length
    return bytes(out)
