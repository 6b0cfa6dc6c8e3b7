"""Combine the results of a job array's parts (``dsclean scan --shard I/N``) into one scan's results.

Refuses what would silently give a wrong dataset: files that are not part
results, parts of different scans (root, N or check options differ), a part
given twice, a missing part, or a path that appears in two parts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import locations
from ..atomic import atomic_output, publish, temp_next_to
from ..errors import UserError
from .results import META_KEY, SCHEMA, read_results_meta


@dataclass
class MergeSummary:
    root: str
    parts: int
    rows: int = 0
    bad: int = 0
    results_path: str = ""
    problems_path: str = ""
    notes: list[str] = field(default_factory=list)


def check_parts(paths: list[str]) -> tuple[str, int, dict]:
    """Validate that ``paths`` are exactly the N parts of one scan; returns (root, N, meta of part 0)."""
    if not paths:
        raise UserError("no results files given")
    metas: list[tuple[str, dict]] = []
    for path in paths:
        if not os.path.isfile(path):
            raise UserError(f"{path}: no such results file")
        try:
            meta = read_results_meta(path)
        except (OSError, pa.ArrowInvalid) as exc:
            raise UserError(f"{path}: not a readable results file ({exc})") from exc
        if not meta.get("shard"):
            raise UserError(f"{path}: not a part's results (scan it with --shard I/N)")
        _refuse_unfinished(path)
        metas.append((path, meta))
    first_path, first = metas[0]
    n = first["shard"][1]
    seen: dict[int, str] = {}
    for path, meta in metas:
        for key in ("root", "options"):
            if meta.get(key) != first.get(key):
                raise UserError(f"{path} and {first_path} are parts of different scans ({key} differs)")
        i, m = meta["shard"]
        if m != n:
            raise UserError(f"{path} is part {i}/{m} but {first_path} is one of {n} parts")
        if i in seen:
            raise UserError(f"part {i}/{n} is given twice: {seen[i]} and {path}")
        seen[i] = path
    missing = sorted(set(range(n)) - set(seen))
    if missing:
        raise UserError(f"missing parts of {n}: " + ", ".join(f"{i}/{n}" for i in missing))
    return first["root"], n, first


def read_parts(paths: list[str]) -> pa.Table:
    """The validated parts' rows as one table (for ``dsclean index --scan-results A B ...``)."""
    check_parts(paths)
    table = pa.concat_tables([pq.read_table(p).cast(SCHEMA) for p in paths])
    _refuse_overlap(table, paths)
    return table


def _refuse_overlap(table: pa.Table, paths: list[str]) -> None:
    if pc.count_distinct(table["path"]).as_py() != table.num_rows:
        counts = pc.value_counts(table["path"])
        dup = next(c["values"] for c in counts.to_pylist() if c["counts"] > 1)
        raise UserError(
            f"{os.fsdecode(dup)} appears in more than one part's results: overlapping parts "
            "(did the tree change between the tasks?); re-run the parts"
        )


def merge(paths: list[str], output_dir: str | None = None, state_dir: str | None = None) -> MergeSummary:
    """Write ``scan_results.parquet`` + ``problems.jsonl`` of the whole scan into ``output_dir``.

    Default output: the folder of the first part. Also records the merged results
    as the root's last scan (its state folder's ``last_scan.json``), so
    ``dsclean index ROOT`` finds them.
    """
    root, n, meta = check_parts(paths)
    if meta.get("storage"):
        raise UserError(
            f"{paths[0]}: a part of a bucket scan ({root}): merge it with dsclean merge "
            "(dsclean.storage.parts.merge_parts, which also records it for the prefix's re-scans)"
        )
    _refuse_inside(root, output_dir, locations.root_state_dir(root, state_dir))
    summary = write_merged(paths, output_dir, root, n, meta)
    # the parts' own summaries stay where they are: `status` adds them up (files, bad, moved) as for the parts
    summaries = [p for p in (sibling(path, locations.SUMMARY_FILE) for path in paths) if os.path.isfile(p)]
    note = locations.write_pointer(
        root,
        [summary.results_path],
        problems=[summary.problems_path],
        summary=summaries,
        quarantine=_part_quarantine(paths[0]),
        options=meta.get("options"),
        state_dir=state_dir,
    )
    summary.notes += [note] if note else []
    return summary


def write_merged(paths: list[str], output_dir: str | None, root: str, n: int, meta: dict) -> MergeSummary:
    """The merged ``scan_results.parquet`` and ``problems.jsonl`` of the checked parts ``paths`` (rows part by
    part, in the order given) in ``output_dir`` (default: the first part's folder); records nothing."""
    output_dir = os.path.abspath(output_dir or os.path.dirname(os.path.abspath(paths[0])))
    os.makedirs(output_dir, exist_ok=True)
    summary = MergeSummary(root=root, parts=n)
    summary.results_path = os.path.join(output_dir, locations.RESULTS_FILE)
    summary.problems_path = os.path.join(output_dir, locations.PROBLEMS_FILE)
    table = read_parts(paths)  # the path column decides overlap; rows are then streamed part by part
    summary.rows, summary.bad = table.num_rows, pc.sum(pc.equal(table["status"], "bad")).as_py() or 0
    del table
    tmp = temp_next_to(summary.results_path)
    merged_meta = {**meta, "shard": None, "merged_from": [os.path.abspath(p) for p in paths]}
    schema = SCHEMA.with_metadata({META_KEY: json.dumps(merged_meta)})
    with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        for path in paths:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
                writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))
    publish(tmp, summary.results_path)
    with atomic_output(summary.problems_path) as tmp_problems, open(tmp_problems, "wb") as out:
        for path in paths:
            problems = _problems_of(path)
            if os.path.exists(problems):
                with open(problems, "rb") as f:
                    out.write(f.read())
            else:
                summary.notes.append(f"{problems} not found: its part's bad/warn list is not in the merged one")
    return summary


def _refuse_inside(root: str, output_dir: str | None, state: str) -> None:
    """An output or state folder inside ROOT would become one more class of the dataset (as for scan and index).
    The default output, the parts' own folder, was already accepted by the scan that wrote them."""
    for what, folder, flag in (
        ("output folder", output_dir, "-o"),
        ("state folder", state, "--state-dir / DSCLEAN_STATE_DIR"),
    ):
        if folder and locations.is_inside(folder, root):
            raise UserError(
                f"the {what} {os.path.abspath(folder)} is inside the dataset root {root}: torchvision's "
                f"ImageFolder (and anything else that lists the tree) would see it as one more class and "
                f"shift the labels after it. Choose a {flag} outside ROOT"
            )


def sibling(results_path: str, name: str) -> str:
    """``x/scan_results.part-0001-of-0004.parquet`` + problems.jsonl -> ``x/problems.part-0001-of-0004.jsonl``."""
    folder, base = os.path.split(results_path)
    stem, _ = os.path.splitext(locations.RESULTS_FILE)
    tag = os.path.splitext(base)[0][len(stem) :]
    return os.path.join(folder, locations.tagged(name, tag))


def _part_quarantine(results_path: str) -> str | None:
    """The quarantine folder a part moved its bad files into (from its summary), if any."""
    try:
        with open(sibling(results_path, locations.SUMMARY_FILE), encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return None
    q = summary.get("quarantine") if isinstance(summary, dict) and not summary.get("dry_run") else None
    return q if isinstance(q, str) else None


def _problems_of(results_path: str) -> str:
    return sibling(results_path, locations.PROBLEMS_FILE)


def _refuse_unfinished(results_path: str) -> None:
    """A part stopped by a signal (e.g. a job array's time limit) published only part of its files."""
    summary_path = sibling(results_path, locations.SUMMARY_FILE)
    try:
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{results_path}: its summary {summary_path} is missing or unreadable ({exc}); "
            "cannot tell whether the part finished"
        ) from exc
    if summary.get("interrupted"):
        raise UserError(
            f"{results_path}: that part was interrupted before it finished; run it again "
            "(it resumes from its scan cache), then merge"
        )
