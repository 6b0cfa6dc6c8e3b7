"""What an index build did (:class:`IndexSummary`), and the notes it tells the user about it.

Every part of the build (:mod:`.walk`, :mod:`.judge`, :mod:`.write`) counts into one summary; a note
is kept in it and logged on the ``dsclean.index`` logger (the CLI prints it as ``note: ...``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

import numpy as np

from ..scanning.discover import DiscoverStats

logger = logging.getLogger("dsclean.index")

#: bad paths kept for the summary (all of them are counted)
MAX_LISTED = 1000


@dataclass
class IndexSummary:
    """What a build did: written rows and everything left out, with the reason."""

    output: str
    format: str
    rows: int = 0
    classes: int = 0
    labels: str = "folder"  # folder / csv / none
    files: str = "dsclean"  # the file rule: dsclean / imagefolder
    symlinks: str = "none"
    excluded_bad: int = 0  # marked bad by the scan results
    checked: int = 0  # files without a current verdict, checked by the index itself
    checked_from_cache: int = 0  # ... of which the scan cache already knew (unchanged since an earlier check)
    checked_bad: int = 0  # ... found bad and left out
    checked_bad_reasons: dict[str, int] = field(default_factory=dict)
    bad_paths: list[str] = field(default_factory=list)  # the first MAX_LISTED files left out as bad by the check
    not_media: int = 0  # --no-check: magic bytes do not match any media format
    unreadable: int = 0  # could not be stat'ed or read while indexing
    not_regular: int = 0  # a FIFO, socket or device named like media (the scan's warn/not_regular): never opened
    unlabeled: int = 0  # no class: a file directly in the root (folder labels) or not in the CSV
    unscanned: int = 0  # not in the scan results
    changed_since_scan: int = 0  # size or mtime differ from the scan's
    rechecked: int = 0  # unchanged, but the scan's verdict judged the moment, not the file (too_large, timeout, ...)
    warned: int = 0  # left out: a warn verdict of a reason in reasons.LEFT_OUT_WARNINGS (not judged, or --lenient)
    warned_reasons: dict[str, int] = field(default_factory=dict)
    warned_paths: list[str] = field(default_factory=list)  # the first MAX_LISTED of them
    include_warn: list[str] = field(default_factory=list)  # --include-warn: such reasons shipped anyway
    exclude_warn: list[str] = field(default_factory=list)  # --exclude-warn: warnings otherwise shipped, left out
    duplicates: int = 0  # --dedup: exact duplicates left out (the first by path order kept)
    hashed: int = 0  # --dedup: files hashed here because the scan results had no current content_hash
    scan_results: str | None = None
    results_source: str = ""  # which step of the lookup rule found the scan results
    media_bytes: int = 0
    index_bytes: int = 0
    large_paths: bool = False
    elapsed: float = 0.0
    discovery: DiscoverStats = field(default_factory=DiscoverStats)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- build


def note(summary: IndexSummary, message: str, progress: bool) -> None:
    """A note for the user: kept in the summary and logged (the CLI prints it as ``note: ...``)."""
    summary.notes.append(message)
    logger.warning(message)


def empty_message(root: str, s: IndexSummary) -> str:
    """Why nothing is left to index, from the counts."""
    d = s.discovery
    why = [
        f"{n:,} {what}"
        for n, what in (
            (s.excluded_bad + s.checked_bad, "bad"),
            (s.not_media, "not media"),
            (s.unreadable, "unreadable"),
            (s.not_regular, "not a regular file"),
            (s.warned, "warnings left out (not judged, or accepted by --lenient; --include-warn ships them)"),
            (
                s.unlabeled,
                "without a label (files directly in ROOT have no class folder)"
                if s.labels == "folder"
                else "not in the labels CSV",
            ),
            (d.symlinks, "symlinks not followed (--symlinks inside|all)"),
            (d.outside_links, "symlinks leading outside ROOT (--symlinks all follows them)"),
            (d.hidden, "hidden files skipped"),
            (d.ignored, "files with other extensions"),
        )
        if n
    ]
    return (
        f"{root}: the index would be empty, refusing to write {s.output}: "
        + ("; ".join(why) if why else "no media files found")
        + "."
    )


def empty_class_notes(s: IndexSummary, counts: np.ndarray, classes: list[str], mode: str, progress: bool) -> None:
    """ImageFolder refuses a class folder without files (unless allow_empty=True); say which ones."""
    if mode != "folder" or not classes:
        return
    empty = [c for c, n in zip(classes, counts) if n == 0]
    if empty:
        note(
            s,
            f"{len(empty)} class folders have no files in the index ({', '.join(empty[:5])}"
            f"{', ...' if len(empty) > 5 else ''}): they keep their label (like ImageFolder(allow_empty=True)); "
            "ImageFolder without allow_empty refuses them",
            progress,
        )


def discovery_notes(d: DiscoverStats, files: str) -> list[str]:
    notes = []
    if d.outside_links:
        notes.append(f"{d.outside_links:,} symlinks lead outside ROOT and were not followed (--symlinks all)")
    if d.loops:
        notes.append(f"{d.loops:,} linked folders were already visited (a loop or a second link) and were skipped")
    if d.excluded_dirs and files == "imagefolder":
        notes.append(
            f"{d.excluded_dirs} dsclean folders (a quarantine, or a legacy .dsclean) were left out; "
            "torchvision's ImageFolder would list them as classes"
        )
    return notes
