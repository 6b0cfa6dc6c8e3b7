"""From per-file hashes to groups: exact (same bytes) and near (same picture), each file in at most one.

Exact groups are runs of equal content hashes. Near grouping runs on one
representative per exact group (and on files without an exact twin): the LSH
search (:mod:`.search`) proposes pairs within K bits (for textures, whose
perceptual hash is unstable, also pairs within K on the anti-aliased hash:
:mod:`dsclean.quality.texture`), the fine check
(:func:`dsclean.quality.compare.similarity`) confirms them, and groups are
*centred*: taking representatives by most confirmed neighbours first (then in
(root, path) order), each one not yet grouped gathers its confirmed neighbours
not yet grouped. Every member is thus
within K of its group's representative; nothing chains A~B~C into one group.
A near group carries the exact copies of each representative in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .collect import Inventory, path_rank
from .search import near_pairs

EXACT = "exact"
NEAR = "near"


@dataclass
class Group:
    """File indices into the inventory, representative first, with each member's distance to it."""

    kind: str
    members: list[int]
    distance: list[int]

    def splits(self, inv: Inventory) -> list[int]:
        return sorted({int(inv.root[i]) for i in self.members})


@dataclass
class NearStats:
    searched: int = 0  # representatives in the near search
    low_information: int = 0  # left out: near-constant pictures
    unstable: int = 0  # searched also on the second signal: textures (dsclean.quality.texture)
    second_hashed: int = 0  # of those, decoded for their anti-aliased hash
    second_candidates: int = 0  # candidate pairs only the second signal proposed
    candidates: int = 0  # pairs within K bits (on either signal)
    confirmed: int = 0  # pairs the fine check confirmed
    rejected: int = 0  # pairs the fine check rejected
    unverifiable: int = 0  # pairs with a picture that could not be decoded again


def exact_runs(inv: Inventory, rank: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """(exact groups as index arrays in rank order, representative of each file: itself or its group's first)."""
    rep = np.arange(len(inv))
    idx = np.flatnonzero(inv.has_hash & ~_aliases(inv))
    if len(idx) < 2:
        return [], rep
    halves = np.ascontiguousarray(inv.content_hash[idx]).view(np.uint64).reshape(-1, 2)
    order = idx[np.lexsort((rank[idx], halves[:, 1], halves[:, 0]))]
    h = np.ascontiguousarray(inv.content_hash[order]).view(np.uint64).reshape(-1, 2)
    new = np.concatenate(([True], (h[1:] != h[:-1]).any(axis=1)))
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(order))
    groups = [order[s:e] for s, e in zip(starts, ends) if e - s >= 2]
    for g in groups:
        rep[g] = g[0]
    return groups, rep


def _aliases(inv: Inventory) -> np.ndarray:
    """Later names of a file already in the inventory (:func:`.collect.mark_same_files`): never grouped."""
    if inv.alias_of is None:
        return np.zeros(len(inv), dtype=bool)
    return inv.alias_of >= 0


Verifier = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: files -> (their anti-aliased hashes, (files, windows) uint64 with the whole picture first; whether computed)
SecondHasher = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def group(
    inv: Inventory, radius: int, verify: Verifier | None, second: SecondHasher | None = None
) -> tuple[list[Group], NearStats]:
    """Exact and near groups of the inventory, in output order (see :func:`ordered`).

    ``second``: the second signal; when given, unstable pictures are also searched on it.
    """
    rank = path_rank(inv)
    exact, rep = exact_runs(inv, rank)
    stats = NearStats()
    near: list[Group] = []
    absorbed = np.zeros(len(inv), dtype=bool)  # representatives now in a near group
    if radius > 0:
        is_rep = (rep == np.arange(len(inv))) & ~_aliases(inv)
        image = (inv.kind == 0) & inv.has_phash
        stats.low_information = int((is_rep & image & inv.low_information).sum())
        cand = np.flatnonzero(is_rep & image & ~inv.low_information)
        cand = cand[np.argsort(rank[cand], kind="stable")]  # position p = the p-th representative in path order
        stats.searched = len(cand)
        a, b, d = near_pairs(inv.phash[cand], radius)
        if second is not None:
            a, b, d = _with_second_signal(inv, cand, radius, second, (a, b, d), stats)
        stats.candidates = len(a)
        if len(a) and verify is not None:
            ok = verify(cand[a], cand[b])
            stats.unverifiable = int((ok < 0).sum())
            stats.confirmed, stats.rejected = int((ok > 0).sum()), int((ok == 0).sum())
            keep = ok > 0
            a, b, d = a[keep], b[keep], d[keep]
        else:
            stats.confirmed = len(a)
        near = _centred(cand, a, b, d)
        members_of = {int(g[0]): g for g in exact}
        for g in near:
            full, dist = [], []
            for m, dm in zip(g.members, g.distance):
                absorbed[m] = True
                copies = members_of.get(m, np.array([m]))
                full += [int(c) for c in copies]
                dist += [dm] * len(copies)
            g.members, g.distance = full, dist
    groups = [Group(EXACT, [int(i) for i in g], [0] * len(g)) for g in exact if not absorbed[g[0]]] + near
    return ordered(groups, inv, rank), stats


def _with_second_signal(
    inv: Inventory,
    cand: np.ndarray,
    radius: int,
    second: SecondHasher,
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
    stats: NearStats,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The perceptual-hash pairs plus the pairs of unstable pictures the second signal proposes.

    Each unstable picture has one anti-aliased hash per window (the whole picture first): a pair is
    proposed when one picture's whole-picture hash lies within ``radius`` of any hash of the other
    (a copy cropped by a few percent matches its original's window). All the hashes go through one
    LSH search. Positions are into ``cand``; a pair proposed twice keeps the smaller distance.
    """
    if inv.unstable is None:
        return pairs
    shaky = np.flatnonzero(inv.unstable[cand])
    stats.unstable = len(shaky)
    if len(shaky) < 2:
        return pairs
    hashes, ok = second(cand[shaky])
    stats.second_hashed = int(ok.sum())
    where = shaky[ok]
    windows = hashes.shape[1] if hashes.ndim == 2 else 1
    flat = np.ascontiguousarray(np.asarray(hashes, np.uint64)[ok]).reshape(-1)
    owner = np.repeat(where, windows)
    whole = np.tile(np.arange(windows) == 0, len(where))
    x, y, d2 = near_pairs(flat, radius)
    keep = (owner[x] != owner[y]) & (whole[x] | whole[y])
    i2, j2, d2 = owner[x][keep], owner[y][keep], d2[keep]
    a, b, d = pairs
    n = np.int64(len(cand))
    codes = np.concatenate((a * n + b, np.minimum(i2, j2) * n + np.maximum(i2, j2)))
    dist = np.concatenate((d, d2))
    order = np.lexsort((dist, codes))  # by pair, smallest distance first
    codes, dist = codes[order], dist[order]
    first = np.concatenate(([True], codes[1:] != codes[:-1])) if len(codes) else np.zeros(0, bool)
    codes, dist = codes[first], dist[first]
    stats.second_candidates = len(codes) - len(a)  # near_pairs gives each pair once
    return codes // n, codes % n, dist


def _centred(cand: np.ndarray, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> list[Group]:
    """Groups around centres: ``a``, ``b`` are positions in ``cand`` (path order).

    The representative with the most confirmed neighbours goes first (an original
    is close to all its edited copies; one copy may be far from another), ties in
    path order; it takes its neighbours not yet taken, and so on.
    """
    if not len(a):
        return []
    # both directions: a later representative's neighbours include earlier ones
    src = np.concatenate((a, b))
    dst = np.concatenate((b, a))
    dd = np.concatenate((d, d))
    order = np.lexsort((dst, src))
    src, dst, dd = src[order], dst[order], dd[order]
    starts = np.searchsorted(src, np.arange(len(cand) + 1))
    degree = np.diff(starts)
    centres = np.flatnonzero(degree)
    centres = centres[np.lexsort((centres, -degree[centres]))]  # most confirmed neighbours first, then path order
    taken = np.zeros(len(cand), dtype=bool)
    out = []
    for centre in centres:
        if taken[centre]:
            continue
        lo, hi = starts[centre], starts[centre + 1]
        free = ~taken[dst[lo:hi]]
        if not free.any():
            continue
        nb, nd = dst[lo:hi][free], dd[lo:hi][free]
        taken[centre] = True
        taken[nb] = True
        out.append(Group(NEAR, [int(cand[centre])] + [int(cand[x]) for x in nb], [0] + [int(x) for x in nd]))
    return out


def ordered(groups: list[Group], inv: Inventory, rank: np.ndarray) -> list[Group]:
    """Members: representative first, then by (distance, root, path). Groups: spanning splits first,
    then larger, then by the representative's (root, path)."""
    for g in groups:
        head, rest = g.members[0], list(zip(g.distance[1:], g.members[1:]))
        rest.sort(key=lambda t: (t[0], rank[t[1]]))
        g.members = [head] + [m for _, m in rest]
        g.distance = [0] + [dist for dist, _ in rest]
    return sorted(groups, key=lambda g: (len(g.splits(inv)) < 2, -len(g.members), rank[g.members[0]]))
