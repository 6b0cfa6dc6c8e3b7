"""Verdicts of related roots for a scan: a scanned parent's scan cache and a split root's splits' caches.

``dsclean scan DATA`` then ``dsclean scan DATA/train``: the split's unchanged files are answered by the
cache of ``DATA`` (its rows under ``train/``, their paths made relative to ``DATA/train``). ``dsclean index
DATA/train`` or ``scan DATA/train`` (whose checks are cached under ``DATA/train``), then ``scan DATA``: the
files they checked are answered by the split's cache (their paths prefixed with ``train/``). The rule is the
root's own cache's: same check options and checker version (the cache's options folder), same size and
mtime (the scan compares them, as for its own cache). Read only: another root's cache is never written to.
"""

from __future__ import annotations

import logging
import os

from .. import locations
from ..splits import SPLIT_NAMES, split_folders
from .cache import ScanCache
from .check import CheckOptions
from .verdict import encode_path

log = logging.getLogger("dsclean.scanning.related")


class RelatedCache:
    """Another root's scan cache seen from the scanned root: its path ``inner + x`` is the root's ``outer + x``."""

    def __init__(self, cache: ScanCache, root: str, inner: str, outer: str, how: str) -> None:
        self.cache, self.root, self.inner, self.outer, self.how = cache, root, inner, outer, how
        self.hits = 0  # verdicts the scan took from it (counted by the scan, after its size and mtime check)

    def rows_of(self, rels: list[str]) -> dict[str, tuple]:
        """Cached rows of those of ``rels`` this cache covers, keyed by ``rels`` and with their path re-rooted."""
        n = len(self.outer)
        asked = {self.inner + rel[n:]: rel for rel in rels if rel.startswith(self.outer)}
        if not asked:
            return {}
        return {asked[key]: (encode_path(asked[key]), *row[1:]) for key, row in self.cache.rows_of(list(asked)).items()}

    def note(self) -> str:
        """One line for the scan's notes: how many verdicts came from where."""
        return f"re-used {self.hits:,} verdicts of unchanged files from the scan cache of {self.root} ({self.how})"


def _cache_of(root: str, state_dir: str | None, options: CheckOptions) -> ScanCache | None:
    """``root``'s scan cache for these options, in the first state base that has one (read only)."""
    for base, _ in locations.state_bases(state_dir):
        try:
            cache = ScanCache.existing(
                os.path.join(locations.root_state_dir(root, base), locations.CACHE_FILE), options
            )
        except OSError as exc:
            log.debug("scan cache of %s unreadable: %s", root, exc)
            continue
        if cache is not None:
            return cache
    return None


def open_related(
    root: str, state_dir: str | None, options: CheckOptions, split_names: tuple[str, ...] = SPLIT_NAMES
) -> list[RelatedCache]:
    """The caches a scan of ``root`` may answer from after its own: its nearest scanned parent's (rows under
    ``root``), then, on a split root, each split's (rows of that split's own runs). Those that exist only."""
    out: list[RelatedCache] = []
    parent = locations.scanned_parent(root, state_dir)
    if parent is not None:
        top, subdir = parent
        cache = _cache_of(top, state_dir, options)
        if cache is not None:
            inner = subdir.replace("/", os.sep) + os.sep
            out.append(RelatedCache(cache, top, inner, "", f"parent: its verdicts under {subdir}/"))
    for split in split_folders(root, split_names):
        folder = os.path.join(root, split)
        cache = _cache_of(folder, state_dir, options)
        if cache is not None:
            out.append(
                RelatedCache(cache, folder, "", split + os.sep, "a split: verdicts of its own scans and indexing")
            )
    return out
