"""The fine check: copies (brightened, cropped) match, different pictures and flat frames do not."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageEnhance
from support import synth

from dsclean.quality.compare import DEFAULT_MIN_CORRELATION, similarity
from dsclean.quality.thumbnail import canonical


def _t(img: Image.Image) -> np.ndarray:
    return canonical(img)


def test_copies_match_and_different_pictures_do_not():
    a = synth.photo_like(320, 240, seed=1)
    assert similarity(_t(a), _t(a)) > 0.999
    assert similarity(_t(a), _t(ImageEnhance.Brightness(a).enhance(1.3))) > 0.95
    cropped = a.crop((12, 8, 320 - 4, 240 - 6))  # about 5% off two sides
    assert similarity(_t(a), _t(cropped)) >= DEFAULT_MIN_CORRELATION
    assert similarity(_t(cropped), _t(a)) >= DEFAULT_MIN_CORRELATION  # either may be the crop
    for seed in range(2, 6):
        assert similarity(_t(a), _t(synth.photo_like(320, 240, seed=seed))) < DEFAULT_MIN_CORRELATION


def test_flat_frames_correlate_with_nothing():
    flat = np.full((64, 64), 7.0)
    assert similarity(flat, flat) == 0.0
    assert similarity(flat, _t(synth.photo_like(64, 64, seed=1))) == 0.0
