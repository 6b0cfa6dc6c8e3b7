"""The default image loader scales 16/32-bit images to 8 bits instead of clipping them white (issue 27)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from dsclean.data.loaders import exif_pil_loader, pil_loader, to_rgb


def _ramp16() -> np.ndarray:
    """A 64x64 16-bit ramp over the whole range (0 .. 65535)."""
    return (np.arange(64 * 64, dtype=np.uint32).reshape(64, 64) * 16).astype(np.uint16)


def _saved(im: Image.Image, fmt: str, tmp_path, name: str) -> str:
    path = str(tmp_path / name)
    im.save(path, fmt)
    return path


@pytest.mark.parametrize("fmt,name", [("PNG", "g16.png"), ("TIFF", "g16.tif")])
def test_16_bit_file_is_scaled_not_white(tmp_path, fmt, name):
    ramp = _ramp16()
    path = _saved(Image.fromarray(ramp), fmt, tmp_path, name)
    assert Image.open(path).mode.startswith("I")  # Pillow reads it back as a 16/32-bit mode
    naive = np.asarray(Image.open(path).convert("RGB"))
    assert (naive == 255).mean() > 0.9  # what torchvision's rule gives: saturated white
    out = np.asarray(pil_loader(path))
    assert out.shape == (64, 64, 3) and out.dtype == np.uint8
    assert (out == 255).mean() < 0.01
    np.testing.assert_array_equal(out[..., 0], (ramp >> 8).astype(np.uint8))
    np.testing.assert_array_equal(out[..., 0], out[..., 2])


def test_16_bit_from_memory_too(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(_ramp16()).save(buf, "PNG")
    buf.seek(0)
    assert (
        np.asarray(pil_loader(buf))[..., 0].max() == 255
        and np.asarray(pil_loader(io.BytesIO(buf.getvalue())))[0, 0, 0] == 0
    )


def test_16_bit_rgb_png_keeps_its_high_byte(tmp_path):
    """A 16-bit RGB PNG (written raw: Pillow cannot write one) reads as its high byte per channel."""
    import struct
    import zlib

    h = w = 8
    rgb = (np.random.default_rng(0).integers(0, 65536, (h, w, 3))).astype(">u2")
    raw = b"".join(b"\0" + rgb[y].tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    data = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    out = np.asarray(pil_loader(io.BytesIO(data)))
    np.testing.assert_array_equal(out, (rgb.astype(np.uint32) >> 8).astype(np.uint8))


def test_32_bit_int_and_float_arrays():
    wide = Image.fromarray((np.arange(16, dtype=np.int64).reshape(4, 4) << 27).astype(np.int32), "I")
    assert np.asarray(to_rgb(wide))[..., 0].max() == 15 << 3  # top 8 bits of 32
    narrow = Image.fromarray(np.full((4, 4), 0x8000, np.int32), "I")  # a 16-bit image Pillow widened to I
    assert (np.asarray(to_rgb(narrow)) == 128).all()
    unit = Image.fromarray(np.linspace(0, 1, 16, dtype=np.float32).reshape(4, 4), "F")
    out = np.asarray(to_rgb(unit))[..., 0]
    assert out.min() == 0 and out.max() == 255 and (out == 255).sum() == 1
    big = Image.fromarray(np.full((2, 2), 65535.0, np.float32), "F")
    assert (np.asarray(to_rgb(big)) == 255).all()
    nan = Image.fromarray(np.full((2, 2), np.nan, np.float32), "F")
    assert (np.asarray(to_rgb(nan)) == 0).all()


@pytest.mark.parametrize("mode", ["RGB", "L", "P", "RGBA", "LA", "CMYK", "1"])
def test_8_bit_images_are_byte_identical_to_convert(mode):
    im = Image.fromarray(np.random.default_rng(1).integers(0, 256, (16, 16, 3), dtype=np.uint8)).convert(mode)
    assert to_rgb(im).tobytes() == im.convert("RGB").tobytes()


def test_exif_loader_turns_the_image(tmp_path):
    im = Image.new("RGB", (40, 20), (10, 20, 30))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW to display
    path = str(tmp_path / "r.jpg")
    im.save(path, exif=exif)
    assert pil_loader(path).size == (40, 20)
    assert exif_pil_loader(path).size == (20, 40)
