"""dsclean.quality.texture: which pictures are unstable, and the anti-aliased hashes of any image mode or size."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dsclean.quality.phash import hamming
from dsclean.quality.texture import UNSTABLE_RATIO, WINDOWS, antialiased_hashes, is_unstable


def test_unstable_is_sharpness_against_the_luma_variance():
    contrast = 0.2  # std 51 of 255: variance 2601
    variance = (255 * contrast) ** 2
    assert is_unstable(UNSTABLE_RATIO * variance * 1.01, contrast)
    assert not is_unstable(UNSTABLE_RATIO * variance * 0.99, contrast)


@pytest.mark.parametrize(
    "sharpness, contrast", [(None, 0.2), (1e6, None), (float("nan"), 0.2), (1e6, float("inf")), (5.0, 0.0)]
)
def test_unknown_or_flat_is_not_unstable(sharpness, contrast):
    assert not is_unstable(sharpness, contrast)


def _noise(w, h, mode="L", seed=0):
    rng = np.random.default_rng(seed)
    if mode == "RGB":
        return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    if mode == "I;16":
        return Image.fromarray(rng.integers(0, 65536, (h, w), dtype=np.uint16))  # mode I;16
    return Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")


@pytest.mark.parametrize("size", [(40, 30), (64, 64), (300, 200), (2000, 1500)])
@pytest.mark.parametrize("mode", ["L", "RGB", "I;16"])
def test_one_hash_per_window_for_any_size_and_mode(size, mode):
    hashes = antialiased_hashes(_noise(*size, mode=mode))
    assert len(hashes) == len(WINDOWS) and all(0 <= h < 2**64 for h in hashes)
    assert len(set(hashes)) > 1  # the windows see different parts of a noise picture


def test_a_flat_picture_hashes_to_zero():
    assert antialiased_hashes(Image.new("L", (200, 100), 128)) == [0] * len(WINDOWS)


def test_a_window_is_the_crop_it_names():
    im = _noise(400, 300, seed=3)
    smooth = im.resize((40, 30), Image.Resampling.BOX).resize((400, 300), Image.Resampling.BICUBIC)  # some structure
    whole = antialiased_hashes(smooth)
    left_cut = round(WINDOWS[1][0] * 400)
    cropped = antialiased_hashes(smooth.crop((left_cut, 0, 400, 300)))
    assert hamming(whole[1], cropped[0]) <= 2  # the first side window is 7% off the left
    assert hamming(whole[1], cropped[0]) < hamming(whole[0], cropped[0])
