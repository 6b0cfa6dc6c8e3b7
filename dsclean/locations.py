"""Where dsclean's own files live: one place for every file name and default folder."""
from __future__ import annotations

import json
import os

#: hidden folder inside a scanned root for default reports (skipped by discovery: it is a dot-name)
STATE_DIR = ".dsclean"
RESULTS_FILE = "scan_results.parquet"  # every verdict, one row per file
PROBLEMS_FILE = "problems.jsonl"  # bad and warn verdicts, one JSON object per line
SUMMARY_FILE = "scan_summary.json"  # counts, elapsed time, options
CACHE_FILE = "scan_cache.sqlite"  # in <root>/.dsclean: verdicts by (path, size, mtime) for re-scans
LAST_SCAN_FILE = "last_scan.json"  # in <root>/.dsclean: where the last scan of this root wrote its results
MANIFEST_FILE = "manifest.jsonl"  # in a quarantine folder: the move journal
LOCK_FILE = ".dsclean.lock"  # in a quarantine folder: held while a scan or restore runs; in a shard folder: by pack
# A packed shard set (dsclean pack): the shards plus these three files, side by side.
PACKED_INDEX_FILE = "index.arrow"  # the packed index: per sample its shard, offset, size, label, kind, checksum
SHARD_LIST_FILE = "shardindex.json"  # the shard list in wids' format (relative urls, nsamples, filesize)
PACK_STATE_FILE = "pack.json"  # the source index's identity and the options, for resuming


def part_tag(part: tuple[int, int] | None) -> str:
    """'' for a whole scan; '.part-0003-of-0016' for part 3 of 16 (file names of a job-array task)."""
    return "" if part is None else f".part-{part[0]:04d}-of-{part[1]:04d}"


def tagged(name: str, tag: str) -> str:
    """``scan_results.parquet`` + tag -> ``scan_results.part-0003-of-0016.parquet``."""
    stem, ext = os.path.splitext(name)
    return f"{stem}{tag}{ext}"


def state_dir(root: str) -> str:
    return os.path.join(root, STATE_DIR)


def default_report_dir(root: str, quarantine: str | None) -> str:
    """Reports go next to the quarantine when there is one, else into ``<root>/.dsclean``."""
    return quarantine if quarantine else state_dir(root)


def find_scan_results(root: str) -> str | None:
    """The results file of the last scan of ``root``, or None.

    Looks at ``<root>/.dsclean/last_scan.json`` (written by every scan that
    could write there), then at ``<root>/.dsclean/scan_results.parquet``.
    """
    pointer = os.path.join(state_dir(root), LAST_SCAN_FILE)
    results = _read_pointer(pointer)
    if results and os.path.exists(results):
        return results
    fixed = os.path.join(state_dir(root), RESULTS_FILE)
    return fixed if os.path.exists(fixed) else None


def _read_pointer(pointer: str) -> str | None:
    """The results path recorded in a last-scan pointer; None if there is no usable pointer."""
    if not os.path.isfile(pointer):
        return None
    try:
        with open(pointer, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):  # unreadable or half-written by hand: fall back to the fixed location
        return None
    return data.get("results") if isinstance(data, dict) else None
