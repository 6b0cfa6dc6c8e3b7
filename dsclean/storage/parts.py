"""``dsclean merge`` of a bucket scan's job-array parts (``dsclean scan s3://B/P --shard I/N``).

Each part checks the keys the local scan's stable hash puts in it (:func:`dsclean.scanning.scanner.in_part`)
and writes ``scan_results.part-I-of-N.parquet``, its problems and summary (in the prefix's state folder, or
``--report``) and its rows' identities ``object_ids.part-I-of-N.npy`` (in the prefix's state folder). The
merge writes the whole scan's results as :func:`dsclean.scanning.merge.write_merged` does for a folder, the
identities in the same row order, a summary of the parts added up, and the prefix's record
(``bucket_scan.json``): ``dsclean index URL``, ``dsclean report URL`` and a re-scan then find the merged
results as they find a whole scan's.
"""

from __future__ import annotations

import json
import logging
import os

from .. import locations
from ..atomic import atomic_output
from ..errors import UserError
from ..scanning.merge import MergeSummary, check_parts, merge, sibling, write_merged
from ..scanning.results import read_results_meta
from .reuse import IDS_FILE, IdsWriter, write_record
from .urls import is_url

log = logging.getLogger("dsclean.storage.parts")

#: summary fields that are no sum of the parts' (a scan's time, its part, its own notes)
_NOT_SUMMED = frozenset({"elapsed", "files_per_s", "signal", "shard", "notes", "command", "jobs", "move_errors"})


def merge_parts(paths: list[str], output_dir: str | None = None, state_dir: str | None = None) -> MergeSummary:
    """Merge the parts of one scan: a bucket scan's here (recorded for its prefix), a folder's by
    :func:`dsclean.scanning.merge.merge`."""
    root, n, meta = check_parts(paths)
    if not meta.get("storage"):
        return merge(paths, output_dir, state_dir)
    if output_dir and is_url(output_dir):
        raise UserError(f"-o {output_dir}: merged results are local (never written into the bucket)")
    from .scan import lock_prefix

    state = locations.url_state_dir(root, state_dir)
    os.makedirs(state, exist_ok=True)
    locks = lock_prefix(state, root)  # no scan or part of the prefix runs while its record changes
    try:
        summary = write_merged(paths, output_dir, root, n, meta)
        summary.notes += _merge_ids(paths, state)
        merge_summaries(paths, os.path.join(os.path.dirname(summary.results_path), locations.SUMMARY_FILE))
        write_record(state, root, summary.results_path, str(meta.get("options")))
    finally:
        for fd in locks:
            os.close(fd)
    return summary


def _merge_ids(paths: list[str], state: str) -> list[str]:
    """``object_ids.npy`` of the merged rows: each part's identities in the merge's row order (a part's
    missing or mismatched file: zeros for its rows, i.e. those objects are read again by the next scan)."""
    import numpy as np
    import pyarrow.parquet as pq

    notes = []
    out = IdsWriter(state)
    try:
        for path in paths:
            part = read_results_meta(path)["shard"]
            rows = pq.ParquetFile(path).metadata.num_rows
            ids_path = os.path.join(state, locations.tagged(IDS_FILE, locations.part_tag(tuple(part))))
            try:
                ids = np.load(ids_path, mmap_mode="r")
                if ids.ndim != 1 or len(ids) != rows:
                    raise ValueError(f"{len(ids)} identities for {rows} rows")
            except (OSError, ValueError) as exc:
                notes.append(
                    f"{ids_path}: not usable ({exc}): part {part[0]}/{part[1]}'s objects are read again by "
                    "the next scan"
                )
                ids = np.zeros(rows, dtype="<u8")
            for start in range(0, rows, 1 << 20):  # bounded memory however many rows a part has
                out.add_array(np.asarray(ids[start : start + (1 << 20)]))
    except BaseException:
        out.discard()
        raise
    out.close()
    return notes


def merge_summaries(paths: list[str], target: str, extra: dict | None = None) -> None:
    """``scan_summary.json`` of the merged scan: the parts' counts added up (``dsclean report`` reads it), then
    ``extra`` (a shard set's merge: its merged results' paths)."""
    total: dict = {}
    for path in paths:
        with open(sibling(path, locations.SUMMARY_FILE), encoding="utf-8") as f:  # check_parts read it
            total = _added(total, {k: v for k, v in json.load(f).items() if k not in _NOT_SUMMED})
    total.update(shard=None, merged_from=[os.path.abspath(p) for p in paths], **(extra or {}))
    with atomic_output(target) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(total, f, indent=2)


def _added(a: dict, b: dict) -> dict:
    """Two summaries' JSON added: numbers summed, flags or'ed, nested counts added, lists joined (first
    thousand), anything else the first part's."""
    out = dict(a)
    for k, v in b.items():
        if k not in out:
            out[k] = v
        elif isinstance(v, bool) or isinstance(out[k], bool):
            out[k] = bool(out[k]) or bool(v)
        elif isinstance(v, (int, float)) and isinstance(out[k], (int, float)):
            out[k] = out[k] + v
        elif isinstance(v, dict) and isinstance(out[k], dict):
            out[k] = _added(out[k], v)
        elif isinstance(v, list) and isinstance(out[k], list):
            out[k] = (out[k] + v)[:1000]
    return out
