"""Image facts from a thumbnail: brightness, contrast, entropy, sharpness, grayscale, orientation, phash.

The scan calls :func:`image_facts` with the pixels its own check decoded (the
1/8-scale JPEG decode, or a Pillow frame through :func:`image_facts_from_pil`);
``dsclean dups`` and unscanned roots use :func:`image_facts_from_path`, which
decodes as little as Pillow allows (``draft`` for JPEG: the DCT-domain downscale).
All of them end in the same canonical 64 x 64 grey thumbnail (:mod:`.thumbnail`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from PIL import Image

from . import thumbnail
from .phash import phash_float, phash_floats

#: EXIF tag number of Orientation
_ORIENTATION = 0x0112
#: a colour image is stored grey when no thumbnail pixel's channels spread by more than this (0..255)
GRAY_SPREAD = 4


@dataclass
class ImageFacts:
    """What an image is like; every field None when it could not be computed (see the facts schema, docs/reference/facts.md)."""

    phash: int | None = None  # 64-bit perceptual hash (dsclean.quality.phash)
    brightness: float | None = None  # mean luma, 0..1
    contrast: float | None = None  # std of luma, 0..1
    entropy: float | None = None  # Shannon entropy of the 256-bin luma histogram, bits
    sharpness: float | None = None  # variance of the Laplacian of the 64x64 thumbnail (0..255 units)
    grayscale: bool | None = None  # a colour-stored image whose channels are all equal
    orientation: int | None = None  # EXIF orientation 1..8


def image_facts(pixels: np.ndarray, *, colour_stored: bool | None = None, orientation: int | None = None) -> ImageFacts:
    """Facts of a decoded image or thumbnail: an (H, W) grey or (H, W, 3) RGB uint8 array.

    ``colour_stored``: whether the file stores colour (a grey array of a colour
    file leaves ``grayscale`` unknown); RGB pixels imply it. Sharpness needs the
    pixels at least 64 x 64 (a smaller image would be upsampled, which blurs it):
    the scan passes its decode at the smallest scale that keeps both sides >= 64.
    """
    pixels = np.asarray(pixels)
    is_rgb = pixels.ndim == 3 and pixels.shape[2] >= 3
    sharp = pixels.shape[0] >= thumbnail.SIZE and pixels.shape[1] >= thumbnail.SIZE
    small = thumbnail.resized_grey(pixels) if pixels.ndim == 2 and pixels.dtype == np.uint8 else None
    if small is not None:  # the scan's JPEG decodes: no Pillow round trip, no uint8 copy
        facts = _whole_thumbnail_facts(small, sharp)
    else:
        facts = thumbnail_facts(thumbnail.canonical_uint8(pixels), sharp=sharp)
    facts.orientation = orientation if orientation in range(1, 9) else None
    if is_rgb:
        facts.grayscale = is_grey_rgb(pixels[..., :3])
    elif colour_stored is False:
        facts.grayscale = False
    return facts


_LEVELS = np.arange(256, dtype=np.float64)
#: counts @ _MOMENTS = (sum of grey values, sum of their squares) of a thumbnail, from its histogram
_MOMENTS = np.stack([_LEVELS, _LEVELS * _LEVELS], axis=1)
_N = thumbnail.SIZE * thumbnail.SIZE
#: c * log2(c) for every bin count c a SIZE x SIZE thumbnail can have: entropy = log2(N) - sum(table[counts]) / N
_C_LOG2_C = np.concatenate([[0.0], np.arange(1, _N + 1) * np.log2(np.arange(1, _N + 1))])
_LOG2_N = float(np.log2(_N))


def thumbnail_facts(thumb: np.ndarray, *, sharp: bool = True) -> ImageFacts:
    """Brightness, contrast, entropy, sharpness and phash of a canonical 64x64 grey thumbnail.

    Takes uint8 (as :func:`thumbnail.canonical_uint8` gives) or float values 0..255 (rounded).
    The scan runs this per image, so it is a few whole-array numpy calls: mean, spread and entropy
    from one 256-bin histogram (entropy through a table of c log2 c), the hash from one float copy.
    """
    if thumb.dtype != np.uint8:
        thumb = np.clip(np.rint(thumb), 0, 255).astype(np.uint8)
    if thumb.shape != (thumbnail.SIZE, thumbnail.SIZE):
        raise ValueError(f"thumbnail must be {thumbnail.SIZE}x{thumbnail.SIZE}, got {thumb.shape}")
    return _whole_thumbnail_facts(thumb.astype(np.float64), sharp)


def _whole_thumbnail_facts(t: np.ndarray, sharp: bool) -> ImageFacts:
    """:func:`thumbnail_facts` of a SIZE x SIZE float64 thumbnail of whole values 0..255 (what the scan runs per
    image: about fifteen whole-array numpy calls). Every sum is exact in float64, so the facts are the same
    whatever dtype the thumbnail came in."""
    counts = np.bincount(t.astype(np.intp).ravel(), minlength=256)
    total, squares = counts @ _MOMENTS
    mean = float(total) / _N
    variance = max(float(squares) / _N - mean * mean, 0.0)
    entropy = max(_LOG2_N - float(_C_LOG2_C.take(counts).sum()) / _N, 0.0)
    return ImageFacts(
        # a constant picture's coefficients are all zero in exact arithmetic: bit 0 each, as phash() gives
        phash=phash_float(t, mean) if variance > 0.0 else 0,
        brightness=mean / 255.0,
        contrast=math.sqrt(variance) / 255.0,
        entropy=entropy,
        sharpness=_laplacian_variance_whole(t) if sharp else None,
    )


def grey_facts_batch(greys: list[np.ndarray]) -> list[ImageFacts]:
    """``image_facts(g)`` of each 2-D uint8 grey array, computed together: the same values (tests compare them).

    What the scan runs on a worker's queue of JPEG decodes (:func:`dsclean.scanning.facts.batched`). Each numpy
    call costs about the same for one picture or thirty, and in the scan, where a decoder runs between two
    pictures and leaves the CPU caches full of its own data, one picture's fifteen calls cost two to three
    times what they cost in a tight loop (BENCHMARKS.md "What the quality facts cost the scan"): so the decodes are queued and their facts
    computed in one go, a handful of calls for the lot (one Pillow resize per size, one histogram).
    """
    n = len(greys)
    if n == 0:
        return []
    if n > _MAX_BATCH:
        return [f for i in range(0, n, _MAX_BATCH) for f in grey_facts_batch(greys[i : i + _MAX_BATCH])]
    thumbs = np.empty((n, thumbnail.SIZE, thumbnail.SIZE), np.uint8)
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, g in enumerate(greys):
        by_shape.setdefault(g.shape, []).append(i)
    for shape, at in by_shape.items():
        small = thumbnail.resized_greys(np.stack([greys[i] for i in at]))
        if small is None:  # both sides differ from SIZE: Pillow, one picture at a time
            small = np.stack([thumbnail.canonical_uint8(greys[i]) for i in at])
        thumbs[at] = small
    sharp = np.array([g.shape[0] >= thumbnail.SIZE and g.shape[1] >= thumbnail.SIZE for g in greys])
    return thumbnails_facts(thumbs, sharp)


#: thumbnails per histogram call: their n * 256 bins are numbered in uint16
_MAX_BATCH = 256


def thumbnails_facts(thumbs: np.ndarray, sharp: np.ndarray) -> list[ImageFacts]:
    """:func:`thumbnail_facts` of up to 256 uint8 thumbnails at once, (n, SIZE, SIZE), and per thumbnail whether
    its sharpness is known. The same numbers as one call per thumbnail: every sum of whole values is exact,
    and the hash's products are the same per-thumbnail BLAS products."""
    n = len(thumbs)
    bins = thumbs.reshape(n, _N).astype(np.uint16)
    bins += np.arange(0, 256 * n, 256, dtype=np.uint16)[:, None]  # one histogram of n * 256 bins
    counts = np.bincount(bins.ravel(), minlength=256 * n).reshape(n, 256)
    thumbs = thumbs.astype(np.float64)
    moments = counts @ _MOMENTS
    mean = moments[:, 0] / _N
    variance = np.maximum(moments[:, 1] / _N - mean * mean, 0.0)
    entropy = np.maximum(_LOG2_N - _C_LOG2_C.take(counts).sum(axis=1) / _N, 0.0)
    hashes = phash_floats(thumbs, mean)
    hashes[variance == 0.0] = 0  # a constant picture's coefficients are all zero in exact arithmetic: bit 0 each
    sharpness = np.zeros(n)
    if sharp.any():
        sharpness[sharp] = _laplacian_variances(thumbs[sharp])
    brightness, contrast = mean / 255.0, np.sqrt(variance) / 255.0
    return [
        ImageFacts(phash=h, brightness=b, contrast=c, entropy=e, sharpness=s if k else None)
        for h, b, c, e, s, k in zip(
            hashes.tolist(),
            brightness.tolist(),
            contrast.tolist(),
            entropy.tolist(),
            sharpness.tolist(),
            sharp.tolist(),
        )
    ]


def _laplacian_variances(g: np.ndarray) -> np.ndarray:
    """:func:`laplacian_variance` of each of (n, H, W) whole grey values (exact: whole sums below 2**53)."""
    lap = g[:, 1:-1, :-2] + g[:, 1:-1, 2:]
    lap += g[:, :-2, 1:-1]
    lap += g[:, 2:, 1:-1]
    lap -= 4 * g[:, 1:-1, 1:-1]
    flat = lap.reshape(len(g), -1)
    m = flat.sum(axis=1) / flat.shape[1]
    return np.maximum(np.einsum("ij,ij->i", flat, flat) / flat.shape[1] - m * m, 0.0)


def laplacian_variance(grey: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian over the interior pixels: high when edges are crisp."""
    g = np.asarray(grey)
    if g.dtype == np.uint8:
        return _laplacian_variance_int16(g.astype(np.int16))
    g = g.astype(np.float64)
    lap = g[1:-1, :-2] + g[1:-1, 2:] + g[:-2, 1:-1] + g[2:, 1:-1] - 4 * g[1:-1, 1:-1]
    return float(lap.var())


def _laplacian_variance_int16(g: np.ndarray) -> float:
    """:func:`laplacian_variance` of grey values held in int16 (exact: |Laplacian| <= 1020), in few passes."""
    return _laplacian_variance_whole(g)


def _laplacian_variance_whole(g: np.ndarray) -> float:
    """:func:`laplacian_variance` of whole grey values (int16 or float64: either is exact, |Laplacian| <= 1020)."""
    lap = g[1:-1, :-2] + g[1:-1, 2:]
    lap += g[:-2, 1:-1]
    lap += g[2:, 1:-1]
    lap -= 4 * g[1:-1, 1:-1]
    flat = lap.ravel().astype(np.float64, copy=False)
    m = flat.sum() / flat.size
    return max(float(flat @ flat) / flat.size - m * m, 0.0)


def is_grey_rgb(rgb: np.ndarray) -> bool:
    """True if the channels of an RGB image agree everywhere (after area-averaging to 64x64)."""
    im = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8), "RGB")
    if im.width > thumbnail.SIZE and im.height > thumbnail.SIZE:
        im = im.resize((thumbnail.SIZE, thumbnail.SIZE), Image.Resampling.BOX)
    a = np.asarray(im, dtype=np.int16)
    return bool((a.max(axis=2) - a.min(axis=2)).max() <= GRAY_SPREAD)


def exif_orientation(im: Image.Image) -> int | None:
    """EXIF orientation (1..8) of an open image, or None (no EXIF, no tag, unreadable EXIF)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = im.getexif().get(_ORIENTATION)
    except Exception:  # a damaged EXIF block says nothing about the pixels; the fact is just unknown
        return None
    return value if isinstance(value, int) and 1 <= value <= 8 else None


def image_facts_from_pil(im: Image.Image) -> ImageFacts:
    """Facts of an open (loaded or draft-reduced) Pillow image, e.g. the first frame the scan decoded."""
    orientation = exif_orientation(im)
    colour = im.mode not in ("1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F")
    small = thumbnail.to_uint8(im)
    if small.width > 4 * thumbnail.SIZE and small.height > 4 * thumbnail.SIZE:
        factor = min(small.width, small.height) // (2 * thumbnail.SIZE)
        small = small.reduce(factor)  # cheap box reduction before the exact resize
    return image_facts(np.asarray(small), colour_stored=colour, orientation=orientation)


def open_reduced(path: str | BinaryIO) -> tuple[Image.Image, tuple[int, int]]:
    """Open an image (a path, or a binary file object: an object read from a bucket) and decode its first frame
    as cheaply as Pillow allows (JPEG: DCT-domain 1/2..1/8).

    Returns the image and its stored (width, height): ``draft`` makes ``im.size`` the reduced size.
    """
    im = Image.open(path)
    size = im.size
    try:
        if im.format == "JPEG":
            im.draft(im.mode if im.mode in ("L", "RGB") else "RGB", (thumbnail.SIZE, thumbnail.SIZE))
        im.load()
    except BaseException:
        im.close()
        raise
    return im, size


def image_facts_from_path(path: str) -> ImageFacts:
    """Facts of an image file, decoding only its first frame, at the smallest scale that keeps 64 px."""
    im, _ = open_reduced(path)
    with im:
        return image_facts_from_pil(im)


def thumbnail_from_path(path: str | BinaryIO) -> np.ndarray:
    """The canonical 64x64 grey thumbnail of an image file (or file object), as uint8 (what dups' fine check compares)."""
    im, _ = open_reduced(path)
    with im:
        small = thumbnail.to_uint8(im)
        return np.clip(np.rint(thumbnail.canonical(small)), 0, 255).astype(np.uint8)
