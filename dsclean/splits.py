"""Split roots: a dataset root whose top-level folders are its splits (``DATA/train/<class>/...``, ``DATA/val/...``).

The one place that says what a split is called (:data:`SPLIT_NAMES`; ``--split-names`` replaces them).
``dsclean index`` refuses to make classes out of split names (``--splits`` writes one index per split),
``dsclean dups`` compares the splits for leakage, ``dsclean scan`` counts each split's files; commands
run on ``DATA/train`` reuse the scan of ``DATA`` (:func:`dsclean.locations.find_scan`, step 5).
"""

from __future__ import annotations

import os
from typing import Iterable

#: the default split names, in the order splits are listed (and indexed): the first present is the reference
SPLIT_NAMES = ("train", "val", "valid", "validation", "test")
#: the split whose class layout the others must match (``index --splits``), when present
REFERENCE_SPLIT = "train"
#: top-level entries looked at, at most: a split root holds a few folders (and maybe a README), not a flat set
MAX_TOP_ENTRIES = 65_536


def parse_split_names(text: str) -> tuple[str, ...]:
    """``--split-names train,val,holdout`` -> ``("train", "val", "holdout")``; a name must be a plain folder name."""
    from .errors import UserError

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n in (".", "..") or "/" in n or os.sep in n]
    if not names or bad:
        raise UserError(
            f"--split-names {text!r}: give folder names separated by commas, e.g. train,val,test"
            + (f" ({bad[0]!r} is not a folder name)" if bad else "")
        )
    return names


def split_folders(root: str, names: Iterable[str] = SPLIT_NAMES) -> list[str]:
    """The split folders of ``root`` (in ``names`` order), or ``[]`` when it is not a split root.

    A split root's folders (hidden ones aside) are all named like splits, and there is at least one:
    a class that happens to be called ``train`` (CIFAR-100 has one) sits among other classes and does
    not make its root a split root. One ``scandir`` of the top level, stopped at the first other folder
    (or past :data:`MAX_TOP_ENTRIES` entries: a flat folder of many files is no split root).
    """
    try:
        with os.scandir(root) as it:
            return splits_among(((e.name, _is_dir(e)) for e in it), names)
    except OSError:
        return []


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # a split may be a symlink to another disk
    except OSError:
        return False


def splits_among(entries: Iterable[tuple[str, bool]], names: Iterable[str] = SPLIT_NAMES) -> list[str]:
    """The split names among a top level's ``(name, is a folder)`` entries (a folder's, or a bucket prefix's
    delimited listing), in ``names`` order; ``[]`` at the first other folder or past :data:`MAX_TOP_ENTRIES`."""
    order = {n.lower(): i for i, n in enumerate(names)}
    found: list[tuple[int, str]] = []
    for seen, (name, is_dir) in enumerate(entries):
        if seen >= MAX_TOP_ENTRIES:
            return []
        if name.startswith(".") or not is_dir:
            continue
        rank = order.get(name.lower())
        if rank is None:
            return []
        found.append((rank, name))
    return [name for _, name in sorted(found)]


def split_roots(roots: list[str], names: Iterable[str] = SPLIT_NAMES) -> list[str]:
    """The roots ``dsclean dups`` compares: one split root's splits (``DATA`` -> ``DATA/train``, ``DATA/val``),
    so that leakage across them is found; otherwise ``roots`` as given."""
    if len(roots) != 1:
        return list(roots)
    splits = split_folders(roots[0], names)
    return [os.path.join(roots[0], s) for s in splits] if splits else list(roots)


def reference_split(splits: list[str]) -> str:
    """The split the others' classes are compared with: ``train`` when present, else the first."""
    return next((s for s in splits if s.lower() == REFERENCE_SPLIT), splits[0])


def split_counts(results_paths: list[str], splits: list[str]) -> dict[str, dict[str, int]]:
    """Per split: its files in the scan results and how many are ``bad``/``warn`` (read two columns, a batch at a time)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from . import locations, reasons

    counts = {s: {"files": 0, "bad": 0, "warn": 0} for s in splits}
    prefixes = {s: locations.subtree_prefix(s) for s in splits}
    for path in results_paths:
        if os.path.isdir(path):
            path = os.path.join(path, locations.RESULTS_FILE)
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536, columns=["path", "status"]):
            paths = batch.column(0).cast(pa.binary())
            for split, prefix in prefixes.items():
                mine = pc.fill_null(pc.starts_with(paths, pattern=prefix), False)
                status = batch.column(1).filter(mine)
                c = counts[split]
                c["files"] += len(status)
                c["bad"] += int(pc.sum(pc.fill_null(pc.equal(status, reasons.BAD), False)).as_py() or 0)
                c["warn"] += int(pc.sum(pc.fill_null(pc.equal(status, reasons.WARN), False)).as_py() or 0)
    return counts
