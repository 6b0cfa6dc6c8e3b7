"""The fine check of a near-duplicate candidate pair: do two thumbnails show the same picture?

The hash search is deliberately loose (it must let slightly cropped copies
through); this check is strict. It compares the two canonical 64x64 grey
thumbnails by normalised cross-correlation (so brightness and contrast changes
drop out), first as they are, then allowing either to be a crop of the other:
each side of the crop window may move in by up to ``MAX_CROP`` of the width or
height. The window is searched per axis (rows, then columns, twice), which is
exact for crops because a crop resamples rows and columns independently.

Two different pictures that share a layout (two portraits, two tiles of one
texture) correlate weakly once aligned pixel for pixel; a copy correlates
strongly. Measured in ``scripts/bench_dups.py`` on photos and textures.
"""
from __future__ import annotations

import numpy as np

#: how far each side of a crop window may move in, as a fraction of the side
MAX_CROP = 0.08
#: correlation at or above which two thumbnails show the same picture (copies measured >= 0.84,
#: different pictures <= 0.63 on the real-photo set of scripts/bench_dups.py)
DEFAULT_MIN_CORRELATION = 0.75
_N = 64
_STEPS = int(round(MAX_CROP * _N))


def _resampler(lo: float, hi: float, n: int = _N) -> np.ndarray:
    """(n x n) matrix that linearly resamples the window [lo, hi) of a length-n axis back to n samples."""
    pos = lo + (np.arange(n) + 0.5) * (hi - lo) / n - 0.5
    pos = np.clip(pos, 0, n - 1)
    left = np.floor(pos).astype(int)
    right = np.minimum(left + 1, n - 1)
    w = pos - left
    m = np.zeros((n, n))
    m[np.arange(n), left] += 1 - w
    m[np.arange(n), right] += w
    return m


#: every crop window of one axis: (len(windows), n, n)
_WINDOWS = np.stack([_resampler(lo, _N - hi) for lo in range(_STEPS + 1) for hi in range(_STEPS + 1)])
_IDENTITY = 0  # index of the (0, 0) window


def _normalise(x: np.ndarray) -> np.ndarray:
    """Zero mean, unit norm over the last two axes (a flat image stays zero)."""
    x = x - x.mean(axis=(-2, -1), keepdims=True)
    norm = np.sqrt((x * x).sum(axis=(-2, -1), keepdims=True))
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 1e-9)


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised cross-correlation of two equal-size thumbnails, -1..1."""
    return float((_normalise(np.asarray(a, np.float64)) * _normalise(np.asarray(b, np.float64))).sum())


def _best_crop_of(big: np.ndarray, small: np.ndarray) -> float:
    """Best correlation of ``small`` with a crop window of ``big`` (alternating per-axis search)."""
    target = _normalise(small)
    iy = ix = _IDENTITY
    best = -1.0
    for _ in range(2):
        rows = _WINDOWS @ big @ _WINDOWS[ix].T  # every row window, columns fixed
        scores = (_normalise(rows) * target).sum(axis=(-2, -1))
        iy = int(scores.argmax())
        cols = (_WINDOWS[iy] @ big) @ _WINDOWS.transpose(0, 2, 1)  # every column window, rows fixed
        scores = (_normalise(cols) * target).sum(axis=(-2, -1))
        ix = int(scores.argmax())
        best = max(best, float(scores[ix]))
    return best


def similarity(a: np.ndarray, b: np.ndarray, enough: float = DEFAULT_MIN_CORRELATION) -> float:
    """How well two 64x64 grey thumbnails match, allowing brightness, contrast and slight crops: -1..1.

    Stops searching crops as soon as the thumbnails correlate ``enough`` as they are.
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.shape != (_N, _N) or b.shape != (_N, _N):
        raise ValueError(f"thumbnails must be {_N}x{_N}, got {a.shape} and {b.shape}")
    direct = correlation(a, b)
    if direct >= enough:
        return direct
    return max(direct, _best_crop_of(a, b), _best_crop_of(b, a))
