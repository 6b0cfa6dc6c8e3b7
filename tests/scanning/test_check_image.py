"""Image checks, each rule measured on a real damaged file.

Where a comment says "Pillow's load() accepts this", the test below it also
asserts that, so the rule under test is proven to be what catches the damage.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image
from support import synth

from dsclean.reasons import CONSISTENCY


def pillow_loads(data: bytes) -> bool:
    """The usual hand-written check: open and load every frame."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            for i in range(getattr(im, "n_frames", 1)):
                im.seek(i)
                im.load()
        return True
    except Exception:
        return False


# ---- valid files pass ---------------------------------------------------------------------


def _exif_orientation_jpeg() -> bytes:
    img = synth.photo_like(48, 32)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW
    return synth.encode_image(img, "JPEG", exif=exif.tobytes())


VALID = {
    "baseline.jpg": lambda: synth.jpeg(64, 48),
    "progressive.jpg": lambda: synth.jpeg(64, 48, progressive=True),
    "cmyk.jpg": lambda: synth.encode_image(synth.photo_like(40, 40, mode="CMYK"), "JPEG"),
    "gray.jpg": lambda: synth.encode_image(synth.photo_like(40, 40, mode="L"), "JPEG"),
    "exif.jpg": _exif_orientation_jpeg,
    "one.jpg": lambda: synth.jpeg(1, 1),
    "rgb.png": lambda: synth.png(mode="RGB"),
    "rgba.png": lambda: synth.png(mode="RGBA"),
    "palette.png": lambda: synth.png(mode="P"),
    "sixteen.png": lambda: synth.encode_image(synth.photo_like(32, 32, mode="L").convert("I;16"), "PNG"),
    "one.png": lambda: synth.png(1, 1),
    "anim.gif": lambda: synth.animated_gif(frames=4),
    "lossy.webp": lambda: synth.encode_image(synth.photo_like(40, 40), "WEBP"),
    "lossless.webp": lambda: synth.encode_image(synth.photo_like(40, 40), "WEBP", lossless=True),
    "pic.bmp": lambda: synth.encode_image(synth.photo_like(40, 40), "BMP"),
    "pic.tif": lambda: synth.encode_image(synth.photo_like(40, 40), "TIFF"),
    "deflate.tiff": lambda: synth.encode_image(synth.photo_like(40, 40), "TIFF", compression="tiff_deflate"),
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_images_pass(check, name):
    data = VALID[name]()
    v = check(name, data)
    # a valid file is ok, or warned about what a loader silently changes (issue 27: cmyk, exif_rotated, ...)
    assert (v.status, v.reason) == ("ok", None) or (v.status == "warn" and v.reason in CONSISTENCY), v.detail
    assert v.kind == "image" and v.width and v.height and v.frames >= 1 and v.mode
    assert v.size == len(data) and v.mtime_ns > 0


def test_facts_recorded(check):
    v = check("a.jpg", synth.jpeg(64, 48))
    assert (v.format, v.width, v.height, v.mode, v.frames) == ("jpeg", 64, 48, "RGB", 1)
    assert check("c.jpg", VALID["cmyk.jpg"]()).mode == "CMYK"
    assert check("g.jpg", VALID["gray.jpg"]()).mode == "L"
    v = check("a.gif", synth.animated_gif(frames=4))
    assert (v.format, v.frames) == ("gif", 4)


# ---- JPEG ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.6, 0.9, 0.99])
def test_truncated_jpeg(check, fraction):
    v = check("t.jpg", synth.truncate(synth.jpeg(128, 96), fraction))
    assert (v.status, v.reason) == ("bad", "truncated"), v.detail


def test_jpeg_missing_only_end_marker(check):
    data = synth.jpeg(128, 96)
    assert data.endswith(b"\xff\xd9")
    v = check("noeoi.jpg", data[:-2])
    assert (v.status, v.reason) == ("bad", "truncated")
    assert "Premature end" in v.detail


# JPEG has no checksums: some overwrites decode without a warning from any decoder (seeds 0, 2, 3
# here). Seed 1 produces damage libjpeg notices but Pillow's load() hides.
def test_jpeg_corrupt_mid_stream_that_pillow_accepts(check):
    data = synth.overwrite(synth.jpeg(256, 192), at=0.5, length=24, seed=1)
    assert pillow_loads(data)  # Pillow discards libjpeg's warning and returns wrong pixels
    v = check("mid.jpg", data)
    assert (v.status, v.reason) == ("bad", "corrupt")
    assert "Corrupt JPEG data" in v.detail


def test_fast_jpeg_decode_flags_exactly_what_a_full_decode_flags():
    """The checker decodes at 1/8 scale, grey, fast DCT; damage detection must not change."""
    import numpy as np
    import simplejpeg

    from dsclean.scanning.check_image import _FAST, fast_decode_space

    bases = [synth.jpeg(256, 192, seed=s) for s in range(2)] + [synth.jpeg(256, 192, seed=7, progressive=True)]
    rng = np.random.default_rng(0)
    flagged = []
    for i in range(90):
        data = bases[i % 3]
        if i % 3 == 0:
            data = synth.truncate(data, float(rng.uniform(0.1, 0.99)))
        elif i % 3 == 1:
            data = synth.overwrite(data, float(rng.uniform(0.2, 0.9)), int(rng.integers(1, 64)), seed=i)
        else:
            pos = int(rng.integers(700, len(data) - 10))
            data = data[:pos] + bytes([data[pos] ^ (1 << int(rng.integers(0, 8)))]) + data[pos + 1 :]
        results = []
        for kw in ({}, {"colorspace": fast_decode_space("YCbCr"), **_FAST}):
            try:
                simplejpeg.decode_jpeg(data, **kw)
                results.append(False)
            except ValueError:
                results.append(True)
        assert results[0] == results[1], f"damaged file {i}: full decode flagged={results[0]}, fast={results[1]}"
        flagged.append(results[0])
    assert 20 < sum(flagged) < 90  # the damage mix really has both detectable and undetectable cases


def test_lenient_makes_recoverable_jpeg_warnings_warn(check):
    data = synth.overwrite(synth.jpeg(256, 192), at=0.5, length=24, seed=1)
    v = check("mid.jpg", data, lenient=True)
    assert (v.status, v.reason) == ("warn", "corrupt")
    v = check("cut.jpg", synth.truncate(synth.jpeg(128, 96), 0.7), lenient=True)
    assert (v.status, v.reason) == ("warn", "truncated")


def test_lenient_keeps_fatal_jpeg_errors_bad(check):
    data = synth.jpeg(64, 64)
    header_damaged = data[:2] + b"\xff\xc0\x00\x02" + data[6:40]  # a frame marker with an impossible length
    v = check("fatal.jpg", header_damaged, lenient=True)
    assert v.status == "bad"


# ---- PNG ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_truncated_png(check, fraction):
    v = check("t.png", synth.truncate(synth.png(), fraction))
    assert (v.status, v.reason) == ("bad", "truncated"), v.detail


def test_png_cut_inside_iend_crc_is_truncated_though_pillow_loads_it(check):
    data = synth.png()[:-1]
    assert pillow_loads(data)
    v = check("t.png", data)
    assert (v.status, v.reason) == ("bad", "truncated")
    assert "IEND" in v.detail


def test_png_damaged_chunk_crc(check):
    v = check("crc.png", synth.png_break_crc(synth.png()))
    assert (v.status, v.reason) == ("bad", "corrupt")
    assert "CRC" in v.detail and "IDAT" in v.detail


def test_png_bad_ancillary_chunk_crc(check):
    data = synth.png()
    pos = data.index(b"IDAT") - 4
    text = synth.png_chunk(b"tEXt", b"Comment\x00hello")
    broken = text[:-1] + bytes([text[-1] ^ 1])
    data = data[:pos] + broken + data[pos:]
    v = check("text.png", data)
    assert (v.status, v.reason) == ("bad", "corrupt") and "tEXt" in v.detail


def test_png_pixel_damage_with_valid_crcs_is_caught_by_decoding(check):
    # Rewrite IDAT with garbage but a correct CRC: only a pixel-level decode sees it.
    data = synth.png()
    start = data.index(b"IDAT") - 4
    length = int.from_bytes(data[start : start + 4], "big")
    garbage = bytes(range(256)) * (length // 256 + 1)
    forged = synth.png_chunk(b"IDAT", garbage[:length])
    data = data[:start] + forged + data[start + 12 + length :]
    v = check("forged.png", data)
    assert (v.status, v.reason) == ("bad", "corrupt")


def test_png_trailing_bytes_after_iend_are_ok_and_noted(check):
    v = check("trail.png", synth.png() + b"junk")
    assert v.status == "ok" and "after IEND" in v.detail


# ---- GIF, WebP, TIFF, BMP -------------------------------------------------------------------


def test_gif_missing_trailer_that_pillow_accepts(check):
    data = synth.animated_gif()[:-1]
    assert pillow_loads(data)
    v = check("t.gif", data)
    assert (v.status, v.reason) == ("bad", "truncated")


@pytest.mark.parametrize("fraction", [0.3, 0.8])
def test_truncated_gif(check, fraction):
    assert check("t.gif", synth.truncate(synth.animated_gif(), fraction)).status == "bad"


@pytest.mark.parametrize("lossless", [False, True])
def test_truncated_webp(check, lossless):
    data = synth.encode_image(synth.photo_like(40, 40), "WEBP", lossless=lossless)
    v = check("t.webp", synth.truncate(data, 0.7))
    assert (v.status, v.reason) == ("bad", "truncated") and "RIFF" in v.detail


@pytest.mark.parametrize("compression", [None, "tiff_deflate"])
@pytest.mark.parametrize("fraction", [0.3, 0.9])
def test_truncated_tiff(check, compression, fraction):
    params = {"compression": compression} if compression else {}
    data = synth.encode_image(synth.photo_like(40, 40), "TIFF", **params)
    v = check("t.tif", synth.truncate(data, fraction))
    assert (v.status, v.reason) == ("bad", "truncated"), v.detail


@pytest.mark.parametrize("fraction", [0.3, 0.99])
def test_truncated_bmp(check, fraction):
    v = check("t.bmp", synth.truncate(synth.encode_image(synth.photo_like(40, 40), "BMP"), fraction))
    assert (v.status, v.reason) == ("bad", "truncated")


# ---- whole-file problems ------------------------------------------------------------------


def test_zero_bytes_is_empty(check):
    assert (lambda v: (v.status, v.reason))(check("zero.png", b"")) == ("bad", "empty")


def test_html_saved_as_jpg_is_not_media(check):
    v = check("page.jpg", synth.HTML_PAGE)
    assert (v.status, v.reason) == ("bad", "not_media")
    assert v.detail.startswith("content is not jpeg: it is an HTML page titled '404 Not Found' — the server sent")


def test_random_bytes_are_not_media(check):
    import numpy as np

    data = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    data = b"\x00" + data[1:]  # make sure no magic matches by chance
    assert (check("noise.png", data).reason) == "not_media"


def test_file_cut_inside_its_signature_is_truncated(check):
    assert check("sig.png", b"\x89PN").reason == "truncated"
    assert check("sig.jpg", b"\xff\xd8").reason == "truncated"


def test_png_saved_as_jpg_is_a_warning(check):
    v = check("really_png.jpg", synth.png())
    assert (v.status, v.reason, v.format) == ("warn", "extension_mismatch", "png")


def test_broken_png_saved_as_jpg_stays_bad(check):
    v = check("really_png.jpg", synth.truncate(synth.png(), 0.5))
    assert (v.status, v.reason) == ("bad", "truncated")


def test_decompression_bomb_caught_before_decoding(check):
    v = check("bomb.png", synth.png_bomb(20_000, 20_000))
    assert (v.status, v.reason) == ("bad", "decompression_bomb")
    assert "400000000" in v.detail.replace(",", "")


def test_max_pixels_option_moves_the_limit(check):
    data = synth.jpeg(64, 64)
    assert check("a.jpg", data, max_pixels=64 * 64 - 1).reason == "decompression_bomb"
    assert check("a.jpg", data, max_pixels=64 * 64).status == "ok"
    assert check("b.png", synth.png(64, 64), max_pixels=100).reason == "decompression_bomb"


def test_zero_sized_image_is_empty(check):
    import struct

    ihdr = struct.pack(">IIBBBBB", 0, 10, 8, 0, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + synth.png_chunk(b"IHDR", ihdr) + synth.png_chunk(b"IEND", b"")
    v = check("zero.png", data)
    assert v.status == "bad" and v.reason in ("empty", "corrupt")


def test_max_frames_bounds_decoding_but_counts_frames(check):
    v = check("a.gif", synth.animated_gif(frames=6), max_frames=2)
    assert v.status == "ok" and v.frames == 6 and "first 2 of 6" in v.detail


def test_unreadable_file(check, tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads any file; permission errors cannot be produced")
    p = tmp_path / "locked.jpg"
    p.write_bytes(synth.jpeg(8, 8))
    p.chmod(0)
    from dsclean.scanning.check import check_file

    assert check_file(str(tmp_path), "locked.jpg").reason == "unreadable"


def test_vanished_file_is_a_warning(tmp_path):
    from dsclean.scanning.check import check_file

    v = check_file(str(tmp_path), "gone.jpg")
    assert (v.status, v.reason) == ("warn", "vanished")


def test_c_level_stderr_is_captured_into_detail(tmp_path, capfd):
    import os

    from dsclean.scanning.check import capture_c_stderr

    with capture_c_stderr() as captured:
        os.write(2, b"libfoo: warning from C\n")
    assert "libfoo: warning from C" in captured.text()
    assert "libfoo" not in capfd.readouterr().err


def test_png_with_an_unknown_critical_chunk_is_unsupported(check):
    data = synth.png()
    pos = data.index(b"IDAT") - 4
    data = data[:pos] + synth.png_chunk(b"XyZw", b"future feature") + data[pos:]
    v = check("future.png", data)
    assert (v.status, v.reason) == ("bad", "unsupported") and "XyZw" in v.detail
    # the same chunk name, ancillary (lower-case first letter), is simply skipped
    assert check("ok.png", synth.png()[:33] + synth.png_chunk(b"xyZw", b"x") + synth.png()[33:]).status == "ok"


def test_file_changing_while_checked_is_a_warning_not_bad(tmp_path, monkeypatch):
    """A file still being written must not be judged truncated (and quarantined)."""
    from dsclean.scanning import check_image
    from dsclean.scanning.check import check_file

    data = synth.jpeg(64, 64)
    (tmp_path / "growing.jpg").write_bytes(data[: len(data) // 2])
    real = check_image.CHECKERS["jpeg"]

    def grows_while_read(data, v, opts):
        real(data, v, opts)  # sees half a JPEG: truncated
        with open(tmp_path / "growing.jpg", "ab") as f:  # ... while the writer finishes the file
            f.write(data[len(data) // 2 :])

    monkeypatch.setitem(check_image.CHECKERS, "jpeg", grows_while_read)
    monkeypatch.setattr("dsclean.scanning.check._CHECKERS", {})
    v = check_file(str(tmp_path), "growing.jpg")
    assert (v.status, v.reason) == ("warn", "changed")
    assert "truncated" in v.detail  # what the check saw is kept for the record
