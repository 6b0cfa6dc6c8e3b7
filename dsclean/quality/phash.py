"""The 64-bit perceptual hash: signs of the lowest DCT frequencies of a windowed grey thumbnail.

Classic pHash (the 8x8 lowest DCT coefficients against their median) is robust to
resizing, recompression and brightness, but not to crops: a 5% crop shifts the
picture under the fixed DCT basis, and the coefficients that describe the border
change most (measured in ``scripts/bench_dups.py``: 73-76% of 3-5% crops within 8
bits). This hash keeps the rest of pHash and damps the border:

1. the canonical grey thumbnail averaged down to 32 x 32, mean removed (brightness drops out);
2. a Hann window, so the border a crop removes weighs little;
3. the 2-D DCT; its 64 lowest-frequency AC coefficients (1 <= u + v <= 10, zig-zag order);
4. bit i is set when coefficient i is positive (the window and the mean removal centre
   them on zero; scaling the contrast changes no sign).

A near-constant image has no structure to hash: its bits are noise. Such images are
flagged ``low_information`` and left out of near search.
"""

from __future__ import annotations

import numpy as np

#: side of the thumbnail the DCT is taken of
DCT_SIZE = 32
#: the hash takes the first 64 AC coefficients (u, v) with 1 <= u + v <= MAX_FREQUENCY, zig-zag order
MAX_FREQUENCY = 10
BITS = 64
#: coefficients within this fraction of the largest one are zero (float noise), not positive
_ZERO = 1e-9


def _dct_matrix(n: int) -> np.ndarray:
    """Orthonormal DCT-II matrix: ``D @ x`` is the DCT of a length-n column."""
    k = np.arange(n)[:, None]
    x = np.arange(n)[None, :]
    m = np.cos(np.pi * (2 * x + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    m[0] /= np.sqrt(2.0)
    return m


def _low_frequencies() -> list[tuple[int, int]]:
    """The first BITS (u, v) with 1 <= u + v <= MAX_FREQUENCY in zig-zag order (diagonal by diagonal)."""
    cells = [(u, v) for u in range(MAX_FREQUENCY + 1) for v in range(MAX_FREQUENCY + 1) if 1 <= u + v <= MAX_FREQUENCY]
    return sorted(cells, key=lambda p: (p[0] + p[1], p[1] if (p[0] + p[1]) % 2 else p[0]))[:BITS]


_D = _dct_matrix(DCT_SIZE)
_ZZ = _low_frequencies()
_ROWS = np.array([u for u, _ in _ZZ])
_COLS = np.array([v for _, v in _ZZ])
#: the DCT rows the hash needs (frequencies 0..MAX_FREQUENCY): two small products instead of two 32x32 ones
_DK = np.ascontiguousarray(_D[: MAX_FREQUENCY + 1])
_hann = np.hanning(DCT_SIZE + 8)[4:-4]
_WINDOW = np.outer(_hann, _hann)
_WINDOW_QUARTER = _WINDOW * 0.25


def _coefficients(windowed: np.ndarray) -> np.ndarray:
    """The 64 zig-zag low-frequency DCT coefficients of a windowed, mean-free 32x32 array."""
    return ((_DK @ windowed) @ _DK.T)[_ROWS, _COLS]


#: the coefficients of the window itself: a picture's mean contributes mean times these
_WINDOW_COEFFICIENTS = _coefficients(_WINDOW)


def low_frequencies(thumb: np.ndarray) -> np.ndarray:
    """The 64 windowed low-frequency DCT coefficients of a 64x64 (or 32x32) grey thumbnail."""
    t = np.asarray(thumb, dtype=np.float64)
    if t.shape == (2 * DCT_SIZE, 2 * DCT_SIZE):
        t = t.reshape(DCT_SIZE, 2, DCT_SIZE, 2).mean(axis=(1, 3))
    if t.shape != (DCT_SIZE, DCT_SIZE):
        raise ValueError(
            f"phash needs a {2 * DCT_SIZE}x{2 * DCT_SIZE} or {DCT_SIZE}x{DCT_SIZE} thumbnail, got {t.shape}"
        )
    return _coefficients((t - t.mean()) * _WINDOW)


#: bit i's value, so that a boolean vector @ _POWERS is the hash (one call instead of packbits + bytes + int)
_POWERS = np.left_shift(np.uint64(1), np.arange(BITS, dtype=np.uint64))


def _bits(coefficients: np.ndarray) -> int:
    """Bit i set where coefficient i is positive, as an int in [0, 2**64).

    "Positive" means above rounding noise (``_ZERO`` of the largest magnitude): a coefficient that
    is zero in exact arithmetic (symmetric or separable pictures) gets bit 0 whichever way the
    float sums were ordered, so every route to the hash (scan, dups, a float or uint8 thumbnail) agrees.
    """
    scale = float(np.abs(coefficients).max()) if coefficients.size else 0.0
    return int((coefficients > _ZERO * scale) @ _POWERS)


def phash(thumb: np.ndarray) -> int:
    """The 64-bit hash of a canonical grey thumbnail, as an int in [0, 2**64)."""
    return _bits(low_frequencies(thumb))


#: the 2x2 area mean to 32x32, the window and the DCT rows folded into one (MAX_FREQUENCY + 1, 64) matrix:
#: ``_DK @ ((pool @ t @ pool.T) * _WINDOW) @ _DK.T == _FOLDED @ t @ _FOLDED.T`` (the window is an outer product)
_POOL = np.kron(np.eye(DCT_SIZE), [[0.5, 0.5]])
_FOLDED = np.ascontiguousarray((_DK * _hann) @ _POOL)
#: where the zig-zag coefficients lie in the flattened (MAX_FREQUENCY + 1)^2 product
_FLAT = _ROWS * (MAX_FREQUENCY + 1) + _COLS


def phash_float(thumb: np.ndarray, mean: float) -> int:
    """:func:`phash` of a 64x64 float64 thumbnail whose mean is known: the same hash in fewer steps (pooling,
    window and DCT as two products with one precomputed matrix; the mean removed from the coefficients,
    not the pixels); what the scan runs per image."""
    return _bits(((_FOLDED @ thumb) @ _FOLDED.T).ravel().take(_FLAT) - mean * _WINDOW_COEFFICIENTS)


def phash_floats(thumbs: np.ndarray, means: np.ndarray) -> np.ndarray:
    """:func:`phash_float` of each of (n, 64, 64) float64 thumbnails with known means, as uint64 (n,):
    the same per-thumbnail products, then the bits of all of them in a few whole-array calls."""
    c = ((_FOLDED @ thumbs) @ _FOLDED.T).reshape(len(thumbs), -1)[:, _FLAT]
    c -= means[:, None] * _WINDOW_COEFFICIENTS
    scale = np.abs(c).max(axis=1, keepdims=True)
    return (c > _ZERO * scale) @ _POWERS


def hamming(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray | int:
    """Bits that differ between 64-bit hashes (ints, or uint64 arrays element-wise)."""
    if isinstance(a, int) and isinstance(b, int):
        return (a ^ b).bit_count()
    return popcount64(np.bitwise_xor(np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64)))


_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def popcount64(x: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 (numpy >= 2 has a native kernel; older numpy a byte table)."""
    x = np.ascontiguousarray(x, dtype=np.uint64)
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    return _BYTE_BITS[x.view(np.uint8)].reshape(*x.shape, 8).sum(axis=-1, dtype=np.uint8)
