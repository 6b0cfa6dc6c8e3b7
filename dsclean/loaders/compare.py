"""When two decodes of one file disagree "beyond rounding" (``loader_differs``).

Images: the shape (height, width, channels) must be the same; the pixels, scaled to 0..255 (a 16-bit
decode divided by 257) and box-downscaled so the longer side is at most :data:`SIDE` pixels, may differ by
at most :data:`MAX_MEAN_LEVELS` levels on average (rounding, IDCT and chroma upsampling of two libjpeg
builds differ by about 0.5). Audio: the same sample rate and channels; the same frame count for lossless
formats, within :data:`LOSSY_FRAMES` (or 1%) for lossy ones (decoders treat encoder delay differently);
where the counts agree, a mean absolute difference of at most :data:`MAX_MEAN_SAMPLE` (full scale is 1).
"""

from __future__ import annotations

import numpy as np

SIDE = 64
MAX_MEAN_LEVELS = 2.0
MAX_MEAN_SAMPLE = 1e-3
LOSSY_FRAMES = 2304  # two MP3 frames
LOSSLESS = frozenset({"wav", "flac"})


def _levels(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == np.uint16:
        return arr.astype(np.float32) / 257.0
    if arr.dtype.kind == "f":
        return arr.astype(np.float32) * (255.0 if float(arr.max(initial=0)) <= 1.0 else 1.0)
    return arr.astype(np.float32)


def _shrink(arr: np.ndarray) -> np.ndarray:
    """Box-downscale (H, W, C) so that the longer side is at most SIDE (whole blocks; the rest cut)."""
    h, w = arr.shape[:2]
    f = max(1, -(-max(h, w) // SIDE))
    hh, ww = (h // f) * f or h, (w // f) * f or w
    if f == 1 or hh < f or ww < f:
        return arr
    a = arr[:hh, :ww]
    return a.reshape(hh // f, f, ww // f, f, a.shape[2]).mean(axis=(1, 3))


def image_difference(ref: np.ndarray, other: np.ndarray) -> str | None:
    """None when the two decodes agree within the tolerance, else what differs."""
    if ref.shape != other.shape:
        return f"shape {_shape(other)}, the reference decode's is {_shape(ref)}"
    diff = float(np.abs(_shrink(_levels(ref)) - _shrink(_levels(other))).mean())
    if diff > MAX_MEAN_LEVELS:
        return f"pixels differ by {diff:.1f} levels on average at {SIDE} px (tolerance {MAX_MEAN_LEVELS:g})"
    return None


def _shape(a: np.ndarray) -> str:
    return f"{a.shape[1]}x{a.shape[0]}x{a.shape[2]}"


def audio_difference(ref: tuple[np.ndarray, int], other: tuple[np.ndarray, int], fmt: str | None) -> str | None:
    """None when the two decodes agree within the tolerance, else what differs."""
    (a, ra), (b, rb) = ref, other
    if ra != rb:
        return f"sample rate {rb} Hz, the reference decode's is {ra} Hz"
    if a.shape[0] != b.shape[0]:
        return f"{b.shape[0]} channels, the reference decode has {a.shape[0]}"
    na, nb = a.shape[1], b.shape[1]
    allowed = 0 if fmt in LOSSLESS else max(LOSSY_FRAMES, na // 100)
    if abs(na - nb) > allowed:
        return f"{nb} frames, the reference decode has {na} (tolerance {allowed})"
    if na == nb and na:
        diff = float(np.abs(a - b).mean())
        if diff > MAX_MEAN_SAMPLE:
            return f"samples differ by {diff:.2g} on average (tolerance {MAX_MEAN_SAMPLE:g})"
    return None
