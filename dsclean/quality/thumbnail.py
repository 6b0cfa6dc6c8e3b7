"""The canonical grey thumbnail every image fact is computed from.

Whatever the source (the scan's 1/8-scale JPEG decode, a Pillow ``draft``, a
full decode), facts are computed on the same thing: the image's luma resized to
``SIZE`` x ``SIZE`` pixels (aspect ignored; area-averaged when shrinking), so the
numbers do not depend on which decoder produced the pixels or at what scale.
"""

from __future__ import annotations

import functools

import numpy as np
from PIL import Image

#: side of the canonical grey thumbnail, pixels
SIZE = 64


def to_uint8(im: Image.Image) -> Image.Image:
    """``im`` as 8-bit L or RGB (16-bit and float modes rescaled, palettes and alpha dropped)."""
    if im.mode in ("L", "RGB"):
        return im
    if im.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        a = np.asarray(im, dtype=np.float64)
        hi = 65535.0 if im.mode.startswith("I;16") else max(float(a.max()), 1.0) if im.mode == "I" else 1.0
        if im.mode == "F" and a.size and float(np.nanmax(a)) > 1.0:
            hi = float(np.nanmax(a))
        return Image.fromarray(np.clip(np.nan_to_num(a) / hi * 255.0, 0, 255).astype(np.uint8), "L")
    if im.mode in ("1", "LA", "La"):
        return im.convert("L")
    return im.convert("RGB")


def luma(rgb: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma of an (H, W, 3) uint8 array, as Pillow's ``convert('L')`` computes it."""
    return Image.fromarray(np.ascontiguousarray(rgb[..., :3]), "RGB").convert("L")


def canonical(pixels: np.ndarray | Image.Image) -> np.ndarray:
    """The ``SIZE`` x ``SIZE`` float64 grey thumbnail (0..255) of an (H, W) or (H, W, 3) uint8 array."""
    return canonical_uint8(pixels).astype(np.float64)


def canonical_uint8(pixels: np.ndarray | Image.Image) -> np.ndarray:
    """The same thumbnail as uint8 (Pillow's resize of an 8-bit image gives whole values: nothing is lost)."""
    if isinstance(pixels, np.ndarray) and pixels.dtype == np.uint8 and pixels.ndim == 2:
        fast = resized_grey(pixels)  # the scan's JPEG decodes: small, often 64 wide already
        if fast is not None:
            return fast.astype(np.uint8)
    im = pixels if isinstance(pixels, Image.Image) else _as_image(pixels)
    if im.mode != "L":
        im = im.convert("L")
    shrink = im.width >= SIZE and im.height >= SIZE
    small = im.resize((SIZE, SIZE), Image.Resampling.BOX if shrink else Image.Resampling.BILINEAR)
    return np.frombuffer(small.tobytes(), dtype=np.uint8).reshape(SIZE, SIZE)  # cheaper than np.asarray(small)


#: Pillow's fixed-point precision for 8-bit resampling (libImaging/Resample.c: 32 - 8 - 2 bits)
_PRECISION_BITS = 22
#: up to this many pixels per side, weight matrix products beat a Pillow round trip (two Image objects)
_DENSE_LIMIT = 2 * SIZE


def resized_grey(grey: np.ndarray) -> np.ndarray | None:
    """Pillow's resize of a 2-D uint8 grey array to SIZE x SIZE, bit for bit, as whole float64 values 0..255,
    when at most one side differs from SIZE and that side is at most ``_DENSE_LIMIT``; else None (Pillow does it).

    Pillow resamples each axis separately in integer arithmetic: output = (sum of pixel x fixed-point weight +
    half) >> 22, clipped to 0..255. The weights divided by 2**22 are exact in float64 and so are those sums
    (below 2**53), so one product with the scaled weights, + 0.5 and floor, gives Pillow's exact values without
    building two Image objects (tests/quality/test_image_facts.py compares every size 1..128 against Pillow).
    Both sides differing is left to Pillow: which pass it runs first (each rounds to 8 bits) depends on
    its version (Pillow 13 runs the vertical pass first when the height shrinks much more than the width).
    Float, because every fact computed next wants floats.
    """
    h, w = grey.shape
    if w == SIZE and 0 < h <= _DENSE_LIMIT:
        if h == SIZE:
            return grey.astype(np.float64)
        out = _scaled_weights(h, h >= SIZE) @ grey.astype(np.float64)
    elif h == SIZE and 0 < w <= _DENSE_LIMIT:
        out = grey.astype(np.float64) @ _scaled_weights(w, w >= SIZE).T
    else:
        return None
    out += 0.5
    # no clip needed: BOX and BILINEAR weights are >= 0 and sum to 2**22 within half a unit per tap (<= 5 taps
    # here), so 255 in everywhere floors to 255 out (checked against Pillow, all-255 included, by the test)
    return np.floor(out, out=out)


def resized_greys(greys: np.ndarray) -> np.ndarray | None:
    """The canonical thumbnails of (n, H, W) uint8 greys of one size with H or W equal to SIZE, as (n, SIZE, SIZE)
    uint8; None when neither side is SIZE.

    One Pillow resize for the lot: resizing only the height of the pictures laid side by side (or only the
    width of them stacked) resizes each one as Pillow would alone, since a one-axis resize never mixes
    columns (rows). Pillow's integer passes do a fifth of the arithmetic of :func:`resized_grey`'s dense
    product, in C (the tests compare the two, every size 1..128).
    """
    n, h, w = greys.shape
    if h == SIZE and w == SIZE:
        return greys
    kind = Image.Resampling.BOX if h >= SIZE and w >= SIZE else Image.Resampling.BILINEAR
    if w == SIZE:  # heights only: side by side, (h, n * SIZE)
        wide = np.ascontiguousarray(greys.transpose(1, 0, 2)).reshape(h, n * SIZE)
        small = Image.frombuffer("L", (n * SIZE, h), wide, "raw", "L", 0, 1).resize((n * SIZE, SIZE), kind)
        return np.frombuffer(small.tobytes(), np.uint8).reshape(SIZE, n, SIZE).transpose(1, 0, 2)
    if h == SIZE:  # widths only: stacked, (n * SIZE, w)
        tall = np.ascontiguousarray(greys).reshape(n * SIZE, w)
        small = Image.frombuffer("L", (w, n * SIZE), tall, "raw", "L", 0, 1).resize((SIZE, n * SIZE), kind)
        return np.frombuffer(small.tobytes(), np.uint8).reshape(n, SIZE, SIZE)
    return None


@functools.lru_cache(maxsize=4 * _DENSE_LIMIT)
def _scaled_weights(in_size: int, shrink: bool) -> np.ndarray:
    """:func:`_pillow_weights` / 2**22 (exact: a power of two), so the product needs no rescaling."""
    m = _pillow_weights(in_size, shrink) * (1.0 / (1 << _PRECISION_BITS))
    m.setflags(write=False)
    return m


@functools.lru_cache(maxsize=4 * _DENSE_LIMIT)
def _pillow_weights(in_size: int, shrink: bool) -> np.ndarray:
    """The (SIZE, in_size) integer weights Pillow's BOX (shrink) or BILINEAR resample gives one axis.

    Transcribed from ``precompute_coeffs`` and ``normalize_coeffs_8bpc`` in Pillow's libImaging/Resample.c.
    """
    support = 0.5 if shrink else 1.0

    def weight(x: float) -> float:
        if shrink:
            return 1.0 if -0.5 < x <= 0.5 else 0.0
        x = abs(x)
        return 1.0 - x if x < 1.0 else 0.0

    scale = in_size / SIZE
    filterscale = max(scale, 1.0)
    support *= filterscale
    m = np.zeros((SIZE, in_size))
    for xx in range(SIZE):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        ws = [weight((x + xmin - center + 0.5) * (1.0 / filterscale)) for x in range(xmax)]
        total = sum(ws)
        for x, k in enumerate(ws):
            k = k / total if total != 0.0 else k
            m[xx, xmin + x] = int(k * (1 << _PRECISION_BITS) + (-0.5 if k < 0 else 0.5))
    m.setflags(write=False)
    return m


def _as_image(a: np.ndarray) -> Image.Image:
    a = np.asarray(a)
    if a.dtype != np.uint8:
        raise TypeError(f"thumbnail pixels must be uint8, got {a.dtype}")
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[..., 0]
    if a.ndim == 2:  # frombuffer: no copy, less overhead than fromarray (the scan calls this per JPEG)
        a = np.ascontiguousarray(a)
        return Image.frombuffer("L", (a.shape[1], a.shape[0]), a, "raw", "L", 0, 1)
    if a.ndim == 3 and a.shape[2] in (3, 4):
        return Image.fromarray(np.ascontiguousarray(a[..., :3]), "RGB")
    raise ValueError(f"thumbnail must be (H, W) grey or (H, W, 3) RGB, got shape {a.shape}")
