"""The LSH search against brute force: nothing farther than K, (almost) everything within."""

from __future__ import annotations

import numpy as np

from dsclean.dups.search import _Hashes, near_pairs, plan, tables_needed
from dsclean.quality.phash import popcount64


def _flip(h: np.uint64, bits) -> np.uint64:
    for b in bits:
        h ^= np.uint64(1) << np.uint64(int(b))
    return h


def _data(n=4000, planted=400, radius=8, seed=0):
    rng = np.random.default_rng(seed)
    h = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) << np.uint64(1) | rng.integers(0, 2, n).astype(
        np.uint64
    )
    for k in range(planted):
        h[n - 1 - k] = _flip(h[k], rng.choice(64, int(rng.integers(0, radius + 1)), replace=False))
    return h


def _brute(h, radius):
    i, j = np.triu_indices(len(h), 1)
    d = popcount64(h[i] ^ h[j])
    keep = d <= radius
    return set(zip(i[keep].tolist(), j[keep].tolist()))


def test_matches_brute_force():
    h = _data()
    truth = _brute(h, 8)
    i, j, d = near_pairs(h, 8)
    found = set(zip(i.tolist(), j.tolist()))
    assert found <= truth  # never a pair farther than K
    assert (d <= 8).all() and (d == popcount64(h[i] ^ h[j])).all()
    assert len(found) >= 0.97 * len(truth) and len(truth) >= 400
    assert list(zip(i.tolist(), j.tolist())) == sorted(found)


def test_identical_hashes_always_found():
    h = np.array([7, 7, 7, 123456789, 7], dtype=np.uint64)
    i, j, d = near_pairs(h, 0)
    assert set(zip(i.tolist(), j.tolist())) == {(0, 1), (0, 2), (0, 4), (1, 2), (1, 4), (2, 4)}
    assert (d == 0).all()


def test_tables_cover_distance_k_with_99_percent():
    from math import comb

    for k, radius in [(14, 8), (18, 8), (18, 10)]:
        p = comb(64 - radius, k) / comb(64, k)
        t = tables_needed(k, radius)
        assert (1 - p) ** t <= 0.01 < (1 - p) ** (t - 1)


def test_crowded_buckets_make_keys_longer():
    rng = np.random.default_rng(1)
    base = rng.integers(0, 2**63, 50, dtype=np.int64).astype(np.uint64)
    # 20000 hashes that agree on their low 40 bits in clusters: short keys would bucket them together
    h = base[rng.integers(0, 50, 20000)] ^ (rng.integers(0, 2**24, 20000).astype(np.uint64) << np.uint64(40))
    uniform = rng.integers(0, 2**63, 20000, dtype=np.int64).astype(np.uint64)
    assert plan(_Hashes(h), 8).k > plan(_Hashes(uniform), 8).k


def test_small_inputs():
    assert all(len(x) == 0 for x in near_pairs(np.zeros(1, np.uint64), 8))
    assert all(len(x) == 0 for x in near_pairs(np.array([0, 2**64 - 1], np.uint64), 8))
