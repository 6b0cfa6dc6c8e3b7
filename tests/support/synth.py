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
import tarfile
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
        cols.append(
            0.5 * np.sin(2 * np.pi * f * t) + 0.2 * np.sin(2 * np.pi * 3 * f * t) + 0.02 * rng.standard_normal(t.size)
        )
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
    from dsclean.scanning.formats.ogg import ogg_crc

    out, pos = bytearray(data), 0
    while pos + 27 <= len(out) and out[pos : pos + 4] == b"OggS":
        nseg = out[pos + 26]
        length = 27 + nseg + sum(out[pos + 27 : pos + 27 + nseg])
        struct.pack_into("<I", out, pos + 14, serial)
        struct.pack_into("<I", out, pos + 22, 0)
        struct.pack_into("<I", out, pos + 22, ogg_crc(bytes(out[pos : pos + length])))
        pos += length
    return bytes(out)


# --- containers built piece by piece (for the structural rules) ------------------------------


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """(type, payload) of every chunk of a well-formed PNG."""
    out, pos = [], 8
    while pos < len(data):
        length = struct.unpack_from(">I", data, pos)[0]
        out.append((data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    return out


def png_build(chunks: list[tuple[bytes, bytes]]) -> bytes:
    """A PNG from (type, payload) pairs, every CRC computed."""
    return PNG_SIGNATURE + b"".join(png_chunk(t, p) for t, p in chunks)


def png_ihdr(width: int, height: int, bit_depth: int = 8, colour_type: int = 2, interlace: int = 0) -> bytes:
    return struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, interlace)


def png_from_stream(
    width: int,
    height: int,
    stream: bytes,
    *,
    bit_depth: int = 8,
    colour_type: int = 2,
    interlace: int = 0,
    plte: bytes | None = None,
) -> bytes:
    """A PNG whose IDAT holds ``stream`` (a zlib stream of filtered rows, made by the caller)."""
    chunks = [(b"IHDR", png_ihdr(width, height, bit_depth, colour_type, interlace))]
    if plte is not None:
        chunks.append((b"PLTE", plte))
    return png_build(chunks + [(b"IDAT", stream), (b"IEND", b"")])


def png_filtered_rows(width: int, height: int, channels: int = 3, filter_type: int = 0, seed: int = 0) -> bytes:
    """Non-interlaced 8-bit rows, each led by its filter type byte: what a PNG's zlib stream inflates to."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 256, (height, width * channels), dtype=np.uint8)
    return b"".join(bytes([filter_type]) + r.tobytes() for r in rows)


def apng(frames: int = 3, size: int = 24, seed: int = 0, default_image: bool = False) -> bytes:
    """An animated PNG written by Pillow (``default_image``: the IDAT image is not part of the animation)."""
    imgs = [photo_like(size, size, seed + i) for i in range(frames + default_image)]
    buf = io.BytesIO()
    imgs[0].save(buf, "PNG", save_all=True, append_images=imgs[1:], default_image=default_image)
    return buf.getvalue()


def mpo(images: int = 2, width: int = 48, height: int = 32, seed: int = 0) -> bytes:
    """A multi-picture JPEG (MPO: an MPF index in the first image's APP2), written by Pillow."""
    imgs = [photo_like(width, height, seed + i) for i in range(images)]
    buf = io.BytesIO()
    imgs[0].save(buf, "MPO", save_all=True, append_images=imgs[1:])
    return buf.getvalue()


def tiff_pages(pages: int = 3, size: int = 16, seed: int = 0, **params) -> bytes:
    """A multi-page TIFF written by Pillow."""
    imgs = [photo_like(size, size, seed + i) for i in range(pages)]
    buf = io.BytesIO()
    imgs[0].save(buf, "TIFF", save_all=True, append_images=imgs[1:], **params)
    return buf.getvalue()


def bmp_rle(width: int, height: int, rle: bytes, bits: int = 8) -> bytes:
    """A BI_RLE8 (bits=8) or BI_RLE4 (bits=4) BMP holding the run-length stream ``rle`` and a grey palette."""
    colours = 1 << bits
    palette = b"".join(bytes([i * 255 // (colours - 1)] * 3 + [0]) for i in range(colours))
    offset = 14 + 40 + len(palette)
    info = struct.pack(
        "<IiiHHIIiiII", 40, width, height, 1, bits, 1 if bits == 8 else 2, len(rle), 2835, 2835, colours, 0
    )
    return b"BM" + struct.pack("<IHHI", offset + len(rle), 0, 0, offset) + info + palette + rle


def rle8_rows(width: int, height: int, seed: int = 0) -> bytes:
    """A valid RLE8 stream: every row as runs of up to 255 pixels, end of line, then end of bitmap."""
    rng = np.random.default_rng(seed)
    out = bytearray()
    for _ in range(height):
        x = 0
        while x < width:
            n = int(rng.integers(1, min(255, width - x) + 1))
            out += bytes([n, int(rng.integers(0, 256))])
            x += n
        out += b"\x00\x00"
    return bytes(out[:-2]) + b"\x00\x01"  # the last end-of-line is replaced by end-of-bitmap


def png_interlaced(width: int, height: int, seed: int = 0, bit_depth: int = 8, colour_type: int = 2) -> bytes:
    """An Adam7-interlaced PNG of random pixels (Pillow cannot write interlaced PNGs; it reads them)."""
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour_type]
    rng = np.random.default_rng(seed)
    raw = bytearray()
    for x0, y0, dx, dy in (
        (0, 0, 8, 8),
        (4, 0, 8, 8),
        (0, 4, 4, 8),
        (2, 0, 4, 4),
        (0, 2, 2, 4),
        (1, 0, 2, 2),
        (0, 1, 1, 2),
    ):
        w, h = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if w <= 0 or h <= 0:
            continue
        stride = (w * channels * bit_depth + 7) // 8
        for _ in range(h):
            raw += b"\0" + rng.integers(0, 256, stride, dtype=np.uint8).tobytes()
    return png_from_stream(
        width, height, zlib.compress(bytes(raw)), bit_depth=bit_depth, colour_type=colour_type, interlace=1
    )


def tar_bytes(members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar (``tarfile``'s writer, PAX by default) of ``(name, bytes)`` members, in order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()
