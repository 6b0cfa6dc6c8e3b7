"""Whether a shard set is in class blocks (``dsclean verify``'s warning): shards holding one class or two.

Streaming readers (webdataset, litdata, MDS) shuffle only within a buffer of a few thousand
samples, so a set packed in index order (an ImageFolder index is sorted by class) trains on
one class after another. A shard of ``n`` labelled samples drawn in a shuffled order from
classes of frequencies ``p`` holds about ``E = sum(1 - (1 - p) ** n)`` distinct classes; a shard
holding at most half of that is in a block. Only shards where ``E`` is 2.5 or more say anything
(a set of two classes, or shards of a sample or two, never warn). Per shard: one slice of the
label column and a ``np.unique`` of it, so memory stays that of the biggest shard.
"""

from __future__ import annotations

import numpy as np

#: a shard says something when a shuffled shard of its size would hold this many classes or more
MIN_EXPECTED = 2.5


def class_blocks(labels: np.ndarray, bounds: np.ndarray) -> str | None:
    """A warning when most of the informative shards are class blocks, else None.

    ``labels``: the packed index's label column (-1: unlabelled), in shard order; ``bounds``:
    shard ``k`` is rows ``bounds[k]:bounds[k + 1]``.
    """
    shards = len(bounds) - 1
    if shards < 2:
        return None
    counts = np.bincount(_labelled(labels, 0, len(labels)))
    counts = counts[counts > 0]
    if len(counts) < 3:
        return None
    p = counts / counts.sum()
    informative = blocky = most = 0
    expected_sum = 0.0
    for k in range(shards):
        mine = _labelled(labels, int(bounds[k]), int(bounds[k + 1]))
        expected = float(np.sum(1 - (1 - p) ** len(mine)))
        if expected < MIN_EXPECTED:
            continue
        informative += 1
        distinct = len(np.unique(mine))
        if distinct <= expected / 2:
            blocky += 1
            most = max(most, distinct)
            expected_sum += expected
    if informative < 2 or blocky * 2 < informative:
        return None
    return (
        f"{blocky} of {informative} shards hold samples of at most {most} of the set's {len(counts)} classes "
        f"each, where shuffled shards of their size would hold about {expected_sum / blocky:.0f}: the shards are "
        "in class blocks (packed in index order, e.g. with --no-shuffle), and streaming readers shuffle only "
        "within a buffer, so training would see one class at a time. Pack again without --no-shuffle: "
        "dsclean pack shuffles by default (--shuffle SEED fixes the seed)"
    )


def _labelled(labels: np.ndarray, lo: int, hi: int) -> np.ndarray:
    part = np.asarray(labels[lo:hi], np.int64)
    return part[part >= 0]
