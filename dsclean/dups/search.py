"""Near-neighbour search on 64-bit hashes: every pair within Hamming distance K, without O(N^2).

Bit-sampling LSH: each of ``L`` tables keys every hash by ``k`` of its 64 bits
(a fixed pseudo-random choice per table). Two hashes ``d`` bits apart agree on
all ``k`` sampled bits with probability ``C(64-d, k) / C(64, k)``; ``L`` is the
smallest number of tables that finds a pair at distance exactly K with
probability >= ``1 - MISS`` (closer pairs: higher still; identical hashes: always).
A table is one sort of 32-bit keys; pairs are the runs of equal keys, and every
candidate's true distance is checked at once, so nothing farther than K is ever
reported. ``k`` starts near log2(N) and grows while the first table's buckets
hold many more than N candidate pairs (hashes of real pictures are not uniform).
Memory: a few arrays of N plus the pairs found.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from ..quality.phash import popcount64

BITS = 64
#: probability that a pair exactly K bits apart is missed by every table
MISS = 0.01
#: candidate pairs per table above which keys get longer, as a multiple of N
_MAX_CANDIDATES = 8
_MASK32 = np.uint64(0xFFFFFFFF)


@dataclass(frozen=True)
class Plan:
    """Bits per key and number of tables for a search at distance K."""

    k: int
    tables: int


def tables_needed(k: int, radius: int) -> int:
    """Tables so that a pair ``radius`` bits apart shares a key in at least one with probability >= 1 - MISS."""
    p = math.comb(BITS - radius, k) / math.comb(BITS, k)
    return 1 if p >= 1 else int(math.ceil(math.log(MISS) / math.log(1.0 - p)))


def _bit_choices(table: int, k: int) -> np.ndarray:
    """The ``k`` bit positions table ``table`` keys on: a fixed shuffle from SHAKE-256 (same on every machine)."""
    stream = hashlib.shake_256(f"dsclean-lsh-{table}".encode()).digest(2 * BITS)
    order = sorted(range(BITS), key=lambda b: (stream[2 * b] << 8 | stream[2 * b + 1], b))
    return np.array(sorted(order[:k]))


def _lookup_tables(bits: np.ndarray) -> np.ndarray:
    """(8, 256) uint32: for byte position q and byte value v, the key bits that byte contributes."""
    luts = np.zeros((8, 256), dtype=np.uint32)
    values = np.arange(256)
    for j, b in enumerate(bits):
        q, r = divmod(int(b), 8)
        luts[q] |= (((values >> r) & 1) << j).astype(np.uint32)
    return luts


class _Hashes:
    """The hashes, with their 8 byte columns laid out for fast key building."""

    def __init__(self, hashes: np.ndarray) -> None:
        self.h = np.ascontiguousarray(hashes, dtype=np.uint64)
        as_bytes = self.h.astype("<u8").view(np.uint8).reshape(len(self.h), 8)
        self.byte_columns = [np.ascontiguousarray(as_bytes[:, q]) for q in range(8)]
        self.index = np.arange(len(self.h), dtype=np.uint64)

    def sorted_by_key(self, table: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys in order, positions in that order) for one table."""
        luts = _lookup_tables(_bit_choices(table, k))
        key = luts[0][self.byte_columns[0]]
        for q in range(1, 8):
            key |= luts[q][self.byte_columns[q]]
        combined = np.sort((key.astype(np.uint64) << np.uint64(32)) | self.index)
        return (combined >> np.uint64(32)).astype(np.uint32), (combined & _MASK32).astype(np.int64)


def _candidates(sorted_keys: np.ndarray) -> int:
    """Pairs that share a key: sum of m(m-1)/2 over runs of equal keys."""
    if len(sorted_keys) < 2:
        return 0
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    m = np.diff(np.append(starts, len(sorted_keys))).astype(np.int64)
    return int((m * (m - 1) // 2).sum())


def plan(hashes: _Hashes, radius: int) -> Plan:
    """Key length: about log2(N) - 2 bits, longer while one table yields more than 8N candidate pairs."""
    n = len(hashes.h)
    top = min(32, BITS - radius)
    k = min(top, max(8, math.ceil(math.log2(max(n, 2))) - 2))
    while k < top and _candidates(hashes.sorted_by_key(0, k)[0]) > _MAX_CANDIDATES * n:
        k = min(top, k + 2)
    return Plan(k=k, tables=tables_needed(k, radius))


def near_pairs(hashes: np.ndarray, radius: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (i, j), i < j, of positions whose hashes differ in at most ``radius`` bits, and their distances.

    Sorted by (i, j). Each pair at distance <= radius is found with probability
    >= 99% (identical hashes: always); no farther pair is returned. Identical
    hashes are searched once (resized copies often share every bit).
    """
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
    if len(hashes) < 2 or radius < 0:
        return empty
    if len(hashes) >= 1 << 32:
        raise ValueError("near_pairs handles fewer than 2**32 hashes")
    unique, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
    ua, ub, ud = _unique_pairs(unique, radius)
    members = np.argsort(inverse, kind="stable")  # positions grouped by hash value, ascending
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    parts = [_across(ua, ub, ud, members, starts, counts), _within(members, starts, counts)]
    i = np.concatenate([p[0] for p in parts])
    j = np.concatenate([p[1] for p in parts])
    d = np.concatenate([p[2] for p in parts])
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    order = np.lexsort((hi, lo))
    return lo[order], hi[order], d[order]


def _unique_pairs(unique: np.ndarray, radius: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The LSH search over distinct hash values."""
    if len(unique) < 2 or radius == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    hs = _Hashes(unique)
    p = plan(hs, radius)
    found: list[np.ndarray] = []  # pair codes i << 32 | j
    stored = 0
    for t in range(p.tables):
        keys, order = hs.sorted_by_key(t, p.k)
        for codes in _close_pairs(keys, order, hs.h, radius):
            found.append(codes)
            stored += len(codes)
        if stored > len(hs.h) + (1 << 18):  # many near pairs: drop those found by several tables
            found = [np.unique(np.concatenate(found))]
            stored = len(found[0])
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    codes = np.unique(np.concatenate(found))
    i = (codes >> np.uint64(32)).astype(np.int64)
    j = (codes & _MASK32).astype(np.int64)
    return i, j, popcount64(hs.h[i] ^ hs.h[j]).astype(np.int64)


def _across(ua, ub, ud, members, starts, counts):
    """Every (position of value a, position of value b) for each close pair of distinct values (a, b)."""
    ca, cb = counts[ua], counts[ub]
    n = ca * cb
    pair = np.repeat(np.arange(len(ua)), n)
    k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)  # index inside the pair's ca x cb block
    i = members[starts[ua][pair] + k // cb[pair]]
    j = members[starts[ub][pair] + k % cb[pair]]
    return i, j, ud[pair]


def _within(members, starts, counts):
    """Every pair of positions that share one hash value (distance 0): offset 1 inside each run, then 2, ..."""
    multi = np.flatnonzero(counts >= 2)
    run_start, run_len = starts[multi], counts[multi]
    pos = (
        np.repeat(run_start, run_len) + np.arange(int(run_len.sum())) - np.repeat(np.cumsum(run_len) - run_len, run_len)
    )
    end = np.repeat(run_start + run_len, run_len)
    i_parts, j_parts = [], []
    offset = 1
    while len(pos):
        live = pos + offset < end
        pos, end = pos[live], end[live]
        i_parts.append(members[pos])
        j_parts.append(members[pos + offset])
        offset += 1
    i = np.concatenate(i_parts) if i_parts else np.zeros(0, np.int64)
    j = np.concatenate(j_parts) if j_parts else np.zeros(0, np.int64)
    return i, j, np.zeros(len(i), np.int64)


def _close_pairs(keys: np.ndarray, order: np.ndarray, h: np.ndarray, radius: int):
    """Codes of the pairs that share a key and lie within ``radius``: offset 1 in the sorted keys, then 2, ..."""
    n = len(keys)
    pos = np.flatnonzero(keys[1:] == keys[:-1])
    in_order = h[order] if len(pos) else h[:0]  # one gather; then every comparison reads sequentially
    offset = 1
    while len(pos):
        close = popcount64(in_order[pos] ^ in_order[pos + offset]) <= radius
        if close.any():
            a, b = order[pos[close]], order[pos[close] + offset]
            yield (np.minimum(a, b).astype(np.uint64) << np.uint64(32)) | np.maximum(a, b).astype(np.uint64)
        offset += 1
        pos = pos[pos + offset < n]
        pos = pos[keys[pos] == keys[pos + offset]]
