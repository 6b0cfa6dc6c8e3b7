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

from . import DEFAULT_MIN_CORRELATION as _DEFAULT

#: how far each side of a crop window may move in, as a fraction of the side
MAX_CROP = 0.08
#: correlation at or above which two thumbnails show the same picture (copies measured >= 0.84,
#: different pictures <= 0.63 on the real-photo set of scripts/bench_dups.py)
DEFAULT_MIN_CORRELATION = _DEFAULT
_N = 64
_STEPS = int(round(MAX_CROP * _N))


def _window(lo: float, hi: float, n: int = _N) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linear resampling of the window [lo, hi) of a length-n axis back to n samples: (left, right, weight)."""
    pos = np.clip(lo + (np.arange(n) + 0.5) * (hi - lo) / n - 0.5, 0, n - 1)
    left = np.floor(pos).astype(np.intp)
    return left, np.minimum(left + 1, n - 1), pos - left


# Every crop window of one axis: each side moves in by 0.._STEPS pixels (of 64). Index 0 is the whole axis.
_W = [_window(lo, _N - hi) for lo in range(_STEPS + 1) for hi in range(_STEPS + 1)]
_LEFT = np.stack([w[0] for w in _W])  # (windows, n)
_RIGHT = np.stack([w[1] for w in _W])
_WEIGHT = np.stack([w[2] for w in _W])
_IDENTITY = 0


def _normalise(x: np.ndarray) -> np.ndarray:
    """Zero mean, unit norm over the last two axes (a flat image stays zero)."""
    x = x - x.mean(axis=(-2, -1), keepdims=True)
    norm = np.sqrt((x * x).sum(axis=(-2, -1), keepdims=True))
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 1e-9)


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised cross-correlation of two equal-size thumbnails, -1..1."""
    return float((_normalise(np.asarray(a, np.float64)) * _normalise(np.asarray(b, np.float64))).sum())


def _rows(img: np.ndarray, k: np.ndarray | int) -> np.ndarray:
    """Row window(s) ``k`` of ``img``: (n, n) -> (n, n) for one window, (len(k), n, n) for an array of them."""
    w = _WEIGHT[k][..., None]
    return img[_LEFT[k]] * (1 - w) + img[_RIGHT[k]] * w


def _cols(img: np.ndarray, k: np.ndarray | int) -> np.ndarray:
    """Column window(s) ``k`` of ``img`` (see :func:`_rows`)."""
    return np.swapaxes(_rows(np.swapaxes(img, -1, -2), k), -1, -2)


def _scores(stack: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Correlation of each image in ``stack`` (k, n, n) with a normalised ``target`` (zero mean, unit norm).

    Plain element-wise numpy (no BLAS): these products are small, and a threaded BLAS on a
    busy machine spends more time synchronising than multiplying.
    """
    flat = stack.reshape(len(stack), -1)
    dot = (flat * target.ravel()).sum(axis=1)  # the target has zero mean: the stack's means drop out
    var = (flat * flat).sum(axis=1) - flat.sum(axis=1) ** 2 / flat.shape[1]
    return np.divide(dot, np.sqrt(np.maximum(var, 0.0)), out=np.zeros_like(dot), where=var > 1e-9)


_ALL = np.arange(len(_W))


def _best_crop_of(big: np.ndarray, small: np.ndarray, enough: float) -> float:
    """Best correlation of ``small`` with a crop window of ``big``: rows, then columns, twice."""
    target = _normalise(small)
    ix = _IDENTITY
    best = -1.0
    for _ in range(2):
        iy = int(_scores(_rows(_cols(big, ix), _ALL), target).argmax())  # every row window, columns fixed
        scores = _scores(_cols(_rows(big, iy), _ALL), target)  # every column window, rows fixed
        ix = int(scores.argmax())
        best = max(best, float(scores[ix]))
        if best >= enough:
            break
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
    best = max(direct, _best_crop_of(a, b, enough))
    return best if best >= enough else max(best, _best_crop_of(b, a, enough))
