"""Per-file warnings of what silently changes the data (issue 27 section 3), from the check's own facts."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
from PIL import Image
from support.consistency_media import cmyk_jpeg, jpeg, oriented_jpeg, photo, png, tiff

from dsclean import reasons as R
from dsclean.scanning.check import CheckOptions, check_bytes


def test_16_bit_png_and_tiff_are_high_bit_depth():
    ramp = (np.arange(1024, dtype=np.uint32).reshape(32, 32) * 64).astype(np.uint16)
    for name, data in (("a.png", png(Image.fromarray(ramp))), ("a.tif", tiff(Image.fromarray(ramp)))):
        v = check_bytes(data, name)
        assert (v.status, v.reason) == (R.WARN, R.HIGH_BIT_DEPTH), v
    v = check_bytes(tiff(Image.fromarray(np.zeros((8, 8), np.float32), "F")), "f.tif")
    assert v.reason == R.HIGH_BIT_DEPTH and "mode F" in v.detail


def test_8_bit_images_stay_ok():
    for name, data in (
        ("a.png", png(photo())),
        ("a.jpg", jpeg(photo())),
        ("a.tif", tiff(photo())),
        ("g.png", png(photo().convert("L"))),
    ):
        assert check_bytes(data, name).status == R.OK, name


def test_cmyk_with_and_without_the_adobe_marker():
    with_marker, without = cmyk_jpeg(), cmyk_jpeg(adobe=False)
    assert b"Adobe" not in without
    for data, says in ((with_marker, "with an Adobe APP14 marker"), (without, "without an Adobe APP14 marker")):
        assert simplejpeg.decode_jpeg_header(data)[2] == "CMYK"
        v = check_bytes(data, "c.jpg")
        assert (v.status, v.reason) == (R.WARN, R.CMYK) and says in v.detail, v.detail


def test_ycck_is_told_from_cmyk_by_the_adobe_transform():
    data = cmyk_jpeg(transform=2)
    assert simplejpeg.decode_jpeg_header(data)[2] == "YCCK"  # libjpeg-turbo reads it as YCCK
    v = check_bytes(data, "y.jpg")
    assert (v.status, v.reason) == (R.WARN, R.YCCK), v


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientations(orientation):
    data = oriented_jpeg(orientation)
    assert Image.open(io.BytesIO(data)).getexif()[0x0112] == orientation
    v = check_bytes(data, "o.jpg")
    if orientation == 1:
        assert v.status == R.OK
    else:
        assert (v.status, v.reason) == (R.WARN, R.EXIF_ROTATED) and f"orientation {orientation}" in v.detail


def test_exif_orientation_of_a_png_from_its_facts():
    exif = Image.Exif()
    exif[0x0112] = 8
    v = check_bytes(png(photo(), exif=exif), "o.png")
    assert v.reason == R.EXIF_ROTATED


def test_progressive_jpeg_is_ok():
    data = jpeg(photo(64, 48), progressive=True)
    assert b"\xff\xc2" in data  # SOF2: progressive
    v = check_bytes(data, "p.jpg")
    assert v.status == R.OK and (v.width, v.height) == (64, 48)


def test_palette_with_transparency():
    im = photo().convert("P")
    v = check_bytes(png(im, transparency=0), "t.png")
    assert (v.status, v.reason) == (R.WARN, R.PALETTE_TRANSPARENCY)
    assert check_bytes(png(im), "p.png").status == R.OK
    buf = io.BytesIO()
    im.save(buf, "GIF", transparency=0)
    assert check_bytes(buf.getvalue(), "t.gif").reason == R.PALETTE_TRANSPARENCY


def test_extension_mismatch_names_the_loaders_and_keeps_its_reason():
    v = check_bytes(oriented_jpeg(6), "really_a_jpeg.png")
    assert (v.status, v.reason) == (R.WARN, R.EXTENSION_MISMATCH)
    assert "DALI" in v.detail and "exif_rotated" in v.detail


def test_a_bad_file_gets_no_trait():
    data = cmyk_jpeg()[:200]
    v = check_bytes(data, "c.jpg")
    assert v.status == R.BAD and R.CMYK not in v.detail


def test_expect_keys_each():
    img = jpeg(photo(100, 20))
    cases = {"mode=L": R.MODE_MISMATCH, "min-side=50": R.TOO_SMALL, "max-aspect=4": R.ASPECT_RATIO}
    for spec, reason in cases.items():
        v = check_bytes(img, "a.jpg", CheckOptions(expect=spec))
        assert (v.status, v.reason) == (R.WARN, reason), spec
    assert check_bytes(png(photo().convert("L")), "g.png", CheckOptions(expect="mode=RGB")).reason == R.GRAYSCALE
    assert check_bytes(png(photo().convert("RGBA")), "a.png", CheckOptions(expect="mode=RGB")).reason == R.ALPHA
    assert check_bytes(img, "a.jpg", CheckOptions(expect="mode=RGB,min-side=20,max-aspect=5")).status == R.OK


def test_expect_strict_makes_it_bad():
    v = check_bytes(jpeg(photo(100, 20)), "a.jpg", CheckOptions(expect="min-side=50", strict_expect=True))
    assert (v.status, v.reason) == (R.BAD, R.TOO_SMALL)
