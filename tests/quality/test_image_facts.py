"""Image facts and flags on generated pictures: each number and each flag can fail."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
from PIL import Image, ImageFilter
from support import synth
from support.files import write

from dsclean.quality import flags as F
from dsclean.quality.facts import Facts
from dsclean.quality.files import facts_from_path
from dsclean.quality.flags import FlagOptions, image_flags
from dsclean.quality.image import image_facts, image_facts_from_path, image_facts_from_pil
from dsclean.quality.phash import hamming, phash
from dsclean.quality.thumbnail import canonical


def _arr(img: Image.Image) -> np.ndarray:
    return np.asarray(img)


def test_flat_black_image_has_no_brightness_contrast_or_entropy():
    f = image_facts(np.zeros((100, 120), np.uint8))
    assert (f.brightness, f.contrast, f.entropy, f.sharpness) == (0.0, 0.0, 0.0, 0.0)


def test_half_black_half_white_is_one_bit_of_entropy():
    a = np.zeros((128, 128), np.uint8)
    a[:, 64:] = 255
    f = image_facts(a)
    assert f.brightness == pytest.approx(0.5)
    assert f.contrast == pytest.approx(0.5)
    assert f.entropy == pytest.approx(1.0)


def test_phash_same_picture_resized_and_recompressed_is_close_others_far():
    a = synth.photo_like(256, 256, seed=1)
    small = a.resize((100, 100), Image.Resampling.BILINEAR)
    recompressed = Image.open(io.BytesIO(synth.encode_image(a, "JPEG", quality=40)))
    h = image_facts(_arr(a)).phash
    assert hamming(h, image_facts(_arr(small)).phash) <= 4
    assert hamming(h, image_facts(_arr(recompressed)).phash) <= 4
    others = [image_facts(_arr(synth.photo_like(256, 256, seed=s))).phash for s in range(2, 8)]
    assert min(hamming(h, o) for o in others) > 8


def test_phash_is_pinned():
    # The hash definition is part of the results format: a change must be deliberate (and re-scan noted).
    y, x = np.mgrid[0:64, 0:64]
    thumb = (128 + 60 * np.sin(x / 9.0) + 40 * np.cos(y / 5.0)).astype(np.float64)
    assert phash(thumb) == phash(thumb.copy())
    assert phash(thumb) == 0x5124C224C04B6007  # coefficients zero in exact arithmetic give bit 0 (not float noise)


def test_scan_route_to_the_hash_agrees_with_phash():
    """image_facts (what the scan runs: folded DCT matrix, mean taken out of the coefficients) gives phash()'s bits."""
    y, x = np.mgrid[0:64, 0:64]
    pinned = (128 + 60 * np.sin(x / 9.0) + 40 * np.cos(y / 5.0)).astype(np.uint8)
    assert image_facts(pinned).phash == phash(pinned.astype(np.float64))
    for seed in range(12):
        thumb = np.asarray(synth.photo_like(64, 64, seed=seed).convert("L"))
        assert image_facts(thumb).phash == phash(thumb.astype(np.float64))
    for level in (0, 77, 255):  # constant: every coefficient is zero in exact arithmetic, so every bit is 0
        assert image_facts(np.full((64, 64), level, np.uint8)).phash == 0 == phash(np.full((64, 64), float(level)))


def test_hamming_on_arrays_and_ints():
    a = np.array([0, 0xFF, 2**64 - 1], dtype=np.uint64)
    b = np.array([1, 0, 0], dtype=np.uint64)
    assert hamming(a, b).tolist() == [1, 8, 64]
    assert hamming(0b1011, 0b0001) == 2


def test_sharpness_drops_with_blur_and_is_unknown_for_small_pictures():
    img = synth.photo_like(256, 256, seed=3)
    sharp = image_facts(_arr(img)).sharpness
    blurred = image_facts(_arr(img.filter(ImageFilter.GaussianBlur(8)))).sharpness
    assert sharp > 4 * blurred
    assert image_facts(_arr(img.resize((40, 40)))).sharpness is None


def test_grayscale_stored_as_colour():
    grey = synth.photo_like(64, 64, seed=4).convert("L")
    assert image_facts(_arr(grey.convert("RGB"))).grayscale is True
    assert image_facts(_arr(synth.photo_like(64, 64, seed=4))).grayscale is False
    assert image_facts(_arr(grey), colour_stored=False).grayscale is False
    assert image_facts(_arr(grey)).grayscale is None  # grey pixels of a file whose storage is unknown


def test_grey_jpeg_stored_as_ycbcr_is_grayscale(tmp_path):
    grey = synth.photo_like(128, 128, seed=5).convert("L").convert("RGB")
    path = write(tmp_path, "g.jpg", synth.encode_image(grey, "JPEG", quality=85))
    assert image_facts_from_path(str(path)).grayscale is True


def test_exif_orientation(tmp_path):
    img = synth.photo_like(64, 48, seed=6)
    exif = Image.Exif()
    exif[0x0112] = 6
    rotated = write(tmp_path, "r.jpg", synth.encode_image(img, "JPEG", exif=exif.tobytes()))
    plain = write(tmp_path, "p.jpg", synth.encode_image(img, "JPEG"))
    assert image_facts_from_path(str(rotated)).orientation == 6
    assert image_facts_from_path(str(plain)).orientation is None


def test_scan_decode_and_path_entry_agree(tmp_path):
    """The scan's 1/8-scale grey JPEG decode and the path entry (Pillow draft) give the same facts."""
    data = synth.jpeg(640, 480, seed=7)
    path = write(tmp_path, "a.jpg", data)
    grey = simplejpeg.decode_jpeg(data, colorspace="GRAY", min_height=64, min_width=64, fastdct=True, fastupsample=True)
    from_scan = image_facts(grey, colour_stored=True)
    from_path = image_facts_from_path(str(path))
    assert hamming(from_scan.phash, from_path.phash) <= 3
    assert from_scan.brightness == pytest.approx(from_path.brightness, abs=0.01)
    assert from_scan.contrast == pytest.approx(from_path.contrast, abs=0.01)


def test_sixteen_bit_and_palette_pictures(tmp_path):
    a = (np.linspace(0, 65535, 96 * 96).reshape(96, 96)).astype(np.uint16)
    im16 = Image.fromarray(a)
    assert im16.mode.startswith("I;16")
    f = image_facts_from_pil(im16)
    assert f.brightness == pytest.approx(0.5, abs=0.02) and f.grayscale is False
    pal = synth.photo_like(80, 80, seed=8).convert("P")
    assert image_facts_from_pil(pal).phash is not None


@pytest.mark.parametrize(
    "make, flag",
    [
        (lambda: Image.fromarray((_arr(synth.photo_like(128, 128, seed=1)) * 0.08).astype(np.uint8)), F.DARK),
        (lambda: Image.fromarray((255 - _arr(synth.photo_like(128, 128, seed=1)) * 0.1).astype(np.uint8)), F.BRIGHT),
        (lambda: Image.new("RGB", (128, 128), (90, 90, 91)), F.LOW_INFORMATION),
        (lambda: synth.photo_like(256, 256, seed=2).filter(ImageFilter.GaussianBlur(10)), F.BLURRY),
        (lambda: synth.photo_like(20, 20, seed=3), F.TINY),
        (lambda: synth.photo_like(400, 60, seed=4), F.ODD_ASPECT),
    ],
)
def test_each_image_flag_on_generated_media(tmp_path, make, flag):
    img = make()
    path = write(tmp_path, "x.png", synth.encode_image(img, "PNG"))
    got = facts_from_path(str(path)).facts.flags
    assert flag in got
    clean = facts_from_path(str(write(tmp_path, "ok.png", synth.png(128, 128, seed=9)))).facts.flags
    assert clean == []


def test_thresholds_are_options():
    dim = image_facts((_arr(synth.photo_like(128, 128, seed=1)) * 0.08).astype(np.uint8))
    assert F.DARK in image_flags(dim, 128, 128)
    assert F.DARK not in image_flags(dim, 128, 128, FlagOptions(dark=0.01))
    assert F.TINY in image_flags(None, 100, 100, FlagOptions(tiny=128))
    assert F.ODD_ASPECT not in image_flags(None, 400, 60, FlagOptions(odd_aspect=10))
    flat = image_facts(np.full((64, 64), 100, np.uint8))
    assert F.BLURRY not in image_flags(flat, 64, 64)  # a flat picture is low_information, not blurry


def test_undecodable_image_keeps_its_hash(tmp_path):
    data = synth.truncate(synth.png(64, 64), 0.5)
    ff = facts_from_path(str(write(tmp_path, "cut.png", data)))
    assert ff.error and ff.facts.content_hash is not None and ff.facts.phash is None


def test_facts_record_has_every_column():
    row = Facts.of_image(image_facts(np.zeros((64, 64), np.uint8)), 64, 64).row()
    assert row["flags"] == [F.DARK, F.LOW_INFORMATION]
    assert set(row) >= {"phash", "brightness", "peak", "flags", "content_hash"}


@pytest.mark.parametrize("axis", [0, 1])
def test_grey_thumbnail_shortcut_is_pillows_resize_bit_for_bit(axis):
    """The scan's JPEG decodes are often SIZE wide: their thumbnail skips Pillow but must equal its resize."""
    from dsclean.quality import thumbnail

    rng = np.random.default_rng(axis)
    for n in range(1, 2 * thumbnail.SIZE + 1):
        shape = (n, thumbnail.SIZE) if axis == 0 else (thumbnail.SIZE, n)
        for a in (
            rng.integers(0, 256, shape, dtype=np.uint8),
            np.full(shape, 255, np.uint8),
            (rng.random(shape) < 0.5).astype(np.uint8) * 255,
        ):
            im = Image.fromarray(a, "L")
            shrink = min(a.shape) >= thumbnail.SIZE
            want = np.asarray(
                im.resize((thumbnail.SIZE,) * 2, Image.Resampling.BOX if shrink else Image.Resampling.BILINEAR)
            )
            got = thumbnail.canonical_uint8(a)
            assert got.dtype == np.uint8 and np.array_equal(got, want), (
                shape,
                int(np.abs(got.astype(int) - want).max()),
            )


def _mixed_greys() -> list[np.ndarray]:
    """Grey decodes of the shapes the scan meets: one side SIZE (resized by a product), 64 x 64, both sides
    different (Pillow), large, tiny, constant, symmetric (hash coefficients exactly zero)."""
    rng = np.random.default_rng(11)
    photos = [np.asarray(synth.photo_like(72 + 9 * i, 64, seed=i).convert("L")) for i in range(6)]
    shapes = [(57, 64), (57, 64), (64, 64), (64, 40), (100, 64), (47, 63), (375, 500), (1, 64), (64, 1), (3, 5)]
    greys = [np.ascontiguousarray(p[: 40 + 5 * i]) for i, p in enumerate(photos)]
    greys += [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]
    greys += [np.full((57, 64), 200, np.uint8), np.tile(np.arange(64, dtype=np.uint8), (64, 1))]
    return greys


@pytest.mark.parametrize("size", [1, 4, 32])
def test_batched_grey_facts_equal_one_picture_at_a_time(size):
    """The scan's batched JPEG facts are exactly image_facts' (phash bits, every float), whatever the batch."""
    from dsclean.quality.image import grey_facts_batch

    greys = _mixed_greys()
    one = [image_facts(g) for g in greys]
    batched = [f for i in range(0, len(greys), size) for f in grey_facts_batch(greys[i : i + size])]
    assert batched == one
    assert {f.sharpness is None for f in one} == {True, False}  # both kinds of picture are in the set


def test_scan_batches_jpeg_facts_with_the_same_values(tmp_path):
    """check_file inside facts.batched (what a worker's chunk runs) fills the same facts as one at a time, every
    verdict complete when the block ends, also when the files outnumber one batch."""
    from dsclean.scanning import facts
    from dsclean.scanning.check import CheckOptions, check_file
    from dsclean.scanning.verdict import FACT_FIELDS

    names = []
    for i in range(facts.BATCH + 5):
        w, h = (512, 400 + 3 * i) if i % 3 else (300 + 5 * i, 200)
        names.append(write(tmp_path, f"p{i:02d}.jpg", synth.jpeg(w, h, seed=i)).name)
    alone = [check_file(str(tmp_path), n, CheckOptions()) for n in names]
    with facts.batched():
        together = [check_file(str(tmp_path), n, CheckOptions()) for n in names]
        assert together[0].phash is not None and together[-1].phash is None  # the first batch is done, the rest queued
    for a, b in zip(alone, together):
        assert a.status == b.status == "ok"
        assert [getattr(a, f) for f in FACT_FIELDS] == [getattr(b, f) for f in FACT_FIELDS]
        assert b.phash is not None and b.brightness is not None


@pytest.mark.parametrize("axis", [0, 1])
def test_batched_resize_is_each_pictures_own(axis):
    """resized_greys (one Pillow resize of the pictures side by side or stacked) gives each picture's thumbnail."""
    from dsclean.quality import thumbnail

    rng = np.random.default_rng(axis + 5)
    for n in list(range(1, 2 * thumbnail.SIZE + 1, 3)) + [200, 500]:
        shape = (n, thumbnail.SIZE) if axis == 0 else (thumbnail.SIZE, n)
        greys = np.stack(
            [
                rng.integers(0, 256, shape, dtype=np.uint8),
                np.full(shape, 255, np.uint8),
                (rng.random(shape) < 0.5).astype(np.uint8) * 255,
            ]
        )
        got = thumbnail.resized_greys(greys)
        want = np.stack([thumbnail.canonical_uint8(g) for g in greys])
        assert got.shape == (3, thumbnail.SIZE, thumbnail.SIZE) and np.array_equal(got, want), shape
    assert thumbnail.resized_greys(np.zeros((2, 40, 50), np.uint8)) is None
