"""Grouping rules on a hand-made inventory: exact runs, centred near groups, no chaining, output order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dsclean.dups.collect import Inventory
from dsclean.dups.grouping import group
from dsclean.hashing import content_hash
from dsclean.quality.phash import hamming


def _inv(rows, roots=("train", "val")) -> Inventory:
    """rows: (root index, path, content bytes or None, phash or None)."""
    n = len(rows)
    return Inventory(
        roots=list(roots),
        root=np.array([r[0] for r in rows], np.int32),
        path=pa.array([r[1].encode() for r in rows], pa.binary()),
        size=np.full(n, 10, np.int64),
        mtime_ns=np.zeros(n, np.int64),
        kind=np.zeros(n, np.int8),
        pixels=np.full(n, 100, np.int64),
        content_hash=np.stack([np.frombuffer(content_hash(r[2] or r[1].encode()), np.uint8) for r in rows]),
        has_hash=np.array([r[2] is not None for r in rows]),
        phash=np.array([r[3] or 0 for r in rows], np.uint64),
        has_phash=np.array([r[3] is not None for r in rows]),
        low_information=np.zeros(n, bool),
    )


def _flip(h: int, bits) -> int:
    for b in bits:
        h ^= 1 << b
    return h


def _accept(a, b):
    return np.ones(len(a), np.int8)


def _paths(inv, g):
    return [inv.rel(i).decode() for i in g.members]


def test_exact_groups_span_splits_first_then_size_then_path():
    inv = _inv(
        [
            (0, "b.jpg", b"x", None),
            (0, "a.jpg", b"x", None),
            (0, "c.jpg", b"y", None),
            (1, "c.jpg", b"y", None),
            (0, "d.jpg", b"z", None),
            (0, "e.jpg", b"z", None),
            (0, "f.jpg", b"z", None),
            (0, "solo.jpg", b"w", None),
        ]
    )
    groups, _ = group(inv, 8, _accept)
    assert [(g.kind, _paths(inv, g)) for g in groups] == [
        ("exact", ["c.jpg", "c.jpg"]),  # spans train and val: first
        ("exact", ["d.jpg", "e.jpg", "f.jpg"]),  # then the larger group
        ("exact", ["a.jpg", "b.jpg"]),  # representative: first by path
    ]
    assert groups[0].splits(inv) == [0, 1]


def test_near_groups_are_centred_without_chaining():
    a = 0x0123456789ABCDEF
    b = _flip(a, range(0, 6))
    c = _flip(b, range(10, 16))  # 6 from b, 12 from a
    d = _flip(c, range(20, 26))  # 6 from c, 18 from a
    inv = _inv([(0, "a.jpg", None, a), (0, "b.jpg", None, b), (0, "c.jpg", None, c), (0, "d.jpg", None, d)])
    groups, stats = group(inv, 8, _accept)
    seen = [m for g in groups for m in g.members]
    assert len(seen) == len(set(seen))  # each file in at most one group
    for g in groups:
        rep = int(inv.phash[g.members[0]])
        for m, dist in zip(g.members, g.distance):
            assert dist == hamming(rep, int(inv.phash[m])) <= 8
    assert not any({"a.jpg", "d.jpg"} <= set(_paths(inv, g)) for g in groups)
    assert stats.candidates == 3


def test_the_picture_closest_to_most_copies_is_the_centre():
    orig = 0x0F0F0F0F0F0F0F0F
    copies = [_flip(orig, range(k, k + 5)) for k in (0, 10, 20, 30)]  # 5 from orig, 10 from each other
    inv = _inv([(0, f"copy{i}.jpg", None, h) for i, h in enumerate(copies)] + [(0, "z_orig.jpg", None, orig)])
    groups, _ = group(inv, 8, _accept)
    assert len(groups) == 1 and _paths(inv, groups[0])[0] == "z_orig.jpg" and len(groups[0].members) == 5


def test_near_group_carries_exact_copies_and_rejections_are_respected():
    h = 0xAAAA5555AAAA5555
    inv = _inv(
        [
            (0, "a.jpg", b"1", h),
            (1, "a2.jpg", b"1", h),
            (0, "b.jpg", b"2", _flip(h, [1, 2])),
            (0, "c.jpg", b"3", _flip(h, [3, 4, 5])),
        ]
    )
    c_pos = 3

    def reject_c(a, b):
        return np.array([0 if c_pos in (i, j) else 1 for i, j in zip(a.tolist(), b.tolist())], np.int8)

    groups, stats = group(inv, 8, reject_c)
    assert len(groups) == 1
    g = groups[0]
    assert g.kind == "near" and _paths(inv, g) == ["a.jpg", "a2.jpg", "b.jpg"] and g.distance == [0, 0, 2]
    assert stats.rejected == 2 and stats.confirmed == 1


def test_near_zero_means_exact_only():
    h = 0x1234
    inv = _inv([(0, "a.jpg", None, h), (0, "b.jpg", None, h)])
    assert group(inv, 0, _accept)[0] == []
