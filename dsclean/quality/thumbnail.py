"""The canonical grey thumbnail every image fact is computed from.

Whatever the source (the scan's 1/8-scale JPEG decode, a Pillow ``draft``, a
full decode), facts are computed on the same thing: the image's luma resized to
``SIZE`` x ``SIZE`` pixels (aspect ignored; area-averaged when shrinking), so the
numbers do not depend on which decoder produced the pixels or at what scale.
"""
from __future__ import annotations

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
    im = pixels if isinstance(pixels, Image.Image) else _as_image(pixels)
    if im.mode != "L":
        im = im.convert("L")
    shrink = im.width >= SIZE and im.height >= SIZE
    return np.asarray(im.resize((SIZE, SIZE), Image.Resampling.BOX if shrink else Image.Resampling.BILINEAR))


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
