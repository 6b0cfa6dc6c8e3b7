"""dups' second signal: which pictures' perceptual hash is unstable, and a hash that holds for them.

The perceptual hash (:mod:`.phash`) signs the lowest DCT frequencies of the canonical
64 x 64 thumbnail, which is area-averaged (``BOX``). A texture (a brick wall, grass,
gravel) keeps almost all of its energy at fine scales and next to none at the low
frequencies the hash reads; the box filter folds (aliases) some fine-scale energy
into those low frequencies, and how much depends on the scale the picture is stored
at. So a 60%-resized copy of a brick wall, whose thumbnail correlates 0.99 with the
original's, can differ from it in up to 20 of the 64 bits: the search never proposes it.

1. *Unstable* pictures are told from facts the scan already stores (no decode): the
   sharpness (variance of the thumbnail's Laplacian) against the luma variance. A photo
   keeps that ratio below about 2; textures measure 3 to 9 (``scripts/bench_dups.py``).
2. For those, the *anti-aliased hash* is the same 64-bit hash taken of a thumbnail made
   with a Lanczos filter instead of the box: what the filter removes no longer folds
   into the low frequencies, and a resized copy of a brick wall lands within 0-2 bits
   of its original (area-averaged: up to 20).
3. A crop moves a texture's fine detail under the hash as a resize does not; a few
   percent is enough to flip 10-16 bits. So the anti-aliased hash is also taken of
   :data:`WINDOWS` of the picture: 7% off each side in turn, 3.5% off every side. A copy
   cropped by 2-10% lands near one of its original's windows (all but 1 of 144 texture
   copies within 8 bits, ``scripts/bench_dups.py``).

dups searches these hashes of unstable pictures with the same LSH index as the
perceptual hashes (:mod:`dsclean.dups.search`): a whole-picture hash against every
hash of the other pictures. What it proposes goes to the same fine check; nothing
is grouped on a hash alone.
"""

from __future__ import annotations

import math
from typing import BinaryIO

import numpy as np
from PIL import Image

from . import thumbnail
from .phash import phash

#: sharpness / luma variance (0..255 units) at or above which a picture's perceptual hash is unstable
UNSTABLE_RATIO = 2.5
#: a large picture is first box-reduced by an integer factor to at least this many times the thumbnail
_REDUCE_TO = 4
#: how much of the picture each window of the second signal leaves out, per side (fraction)
WINDOW_CROP = 0.07
#: the windows hashed, as (left, top, right, bottom) fractions: the whole picture (a copy's hash), then
#: WINDOW_CROP off each side in turn and half of it off every side (what a crop of the picture would hash to)
WINDOWS = (
    (0.0, 0.0, 1.0, 1.0),
    (WINDOW_CROP, 0.0, 1.0, 1.0),
    (0.0, 0.0, 1.0 - WINDOW_CROP, 1.0),
    (0.0, WINDOW_CROP, 1.0, 1.0),
    (0.0, 0.0, 1.0, 1.0 - WINDOW_CROP),
    (WINDOW_CROP / 2, WINDOW_CROP / 2, 1.0 - WINDOW_CROP / 2, 1.0 - WINDOW_CROP / 2),
)


def is_unstable(sharpness: float | None, contrast: float | None) -> bool:
    """Whether a picture has most of its detail at the finest scale (a texture), from its stored facts.

    ``sharpness`` and ``contrast`` as the facts hold them; None when unknown (a picture under 64 px
    has no sharpness: it is upsampled to the thumbnail, nothing aliases). Plain floats: dups asks per file.
    """
    if sharpness is None or contrast is None or not (math.isfinite(sharpness) and math.isfinite(contrast)):
        return False
    c = contrast * 255.0
    return c > 0 and sharpness >= UNSTABLE_RATIO * c * c


def antialiased_thumbnails(im: Image.Image) -> np.ndarray:
    """The 64 x 64 grey thumbnails of :data:`WINDOWS` of an open Pillow image through a Lanczos filter:
    (len(WINDOWS), 64, 64) float64, 0..255. The first is the whole picture."""
    grey = thumbnail.to_uint8(im)
    if grey.mode != "L":
        grey = grey.convert("L")
    factor = min(grey.width, grey.height) // (_REDUCE_TO * thumbnail.SIZE)
    if factor >= 2:  # one integer box reduction for all windows; the Lanczos filter does the rest
        grey = grey.reduce(factor)
    w, h = grey.size
    size = (thumbnail.SIZE, thumbnail.SIZE)
    # upsampled (under 64 px): nothing to alias; the canonical thumbnail's filter
    kind = Image.Resampling.LANCZOS if min(w, h) >= thumbnail.SIZE else Image.Resampling.BILINEAR
    out = np.empty((len(WINDOWS), *size))
    for k, (x0, y0, x1, y1) in enumerate(WINDOWS):
        small = grey.resize(size, kind, box=(x0 * w, y0 * h, x1 * w, y1 * h))
        out[k] = np.asarray(small, dtype=np.float64)
    return out


def antialiased_hashes(im: Image.Image) -> list[int]:
    """The anti-aliased hashes of an open Pillow image, one per window of :data:`WINDOWS` (whole picture first)."""
    return [phash(t) for t in antialiased_thumbnails(im)]


def antialiased_hashes_from_path(path: str | BinaryIO) -> list[int]:
    """:func:`antialiased_hashes` of an image file's first frame (JPEG: decoded at the smallest scale >= 64 px)."""
    from .image import open_reduced

    im, _ = open_reduced(path)
    with im:
        return antialiased_hashes(im)
