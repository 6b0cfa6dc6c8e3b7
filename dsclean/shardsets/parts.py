"""``dsclean merge`` of a shard-set scan's job-array parts (``dsclean scan SHARDS --shard I/N``).

Each part checks the whole shards whose name the file scan's stable hash puts in it and writes
``scan_results.part-I-of-N.parquet``, its problems and its summary (tagged, in the set's state folder or
``--report``); its bad samples go to the one deny-list beside the shards (whole lines, ``O_APPEND``). The merge
checks the parts are exactly the N of one scan (:func:`dsclean.scanning.merge.check_parts`) and that no shard is
in two of them, then writes the untagged results (the parts' shard tables, streamed), problems and summed summary,
and records them as the set's last scan: ``dsclean report SHARDS`` finds them as a whole scan's.
"""

from __future__ import annotations

import json
import logging
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import locations
from .. import reasons as R
from ..atomic import atomic_output, publish, temp_next_to
from ..errors import UserError
from ..scanning.merge import MergeSummary, check_parts, sibling
from ..scanning.results import META_KEY
from ..storage.parts import merge_summaries
from ..storage.urls import is_url
from .rows import SHARD_SCHEMA

log = logging.getLogger("dsclean.shardsets.parts")


def merge_shard_parts(paths: list[str], output_dir: str | None = None, state_dir: str | None = None) -> MergeSummary:
    """Merge the parts ``paths`` of one shard-set scan into ``output_dir`` (default: the first part's folder)."""
    root, n, meta = check_parts(paths)
    if output_dir and is_url(output_dir):
        raise UserError(f"-o {output_dir}: merged results are local (never written into the bucket)")
    output_dir = os.path.abspath(output_dir or os.path.dirname(os.path.abspath(paths[0])))
    if not is_url(root) and locations.is_inside(output_dir, root):
        raise UserError(f"-o {output_dir}: inside the shard set {root}; dsclean writes nothing among the shards")
    _refuse_shared_shards(paths)
    os.makedirs(output_dir, exist_ok=True)
    summary = MergeSummary(root=root, parts=n)
    summary.results_path = os.path.join(output_dir, locations.RESULTS_FILE)
    summary.problems_path = os.path.join(output_dir, locations.PROBLEMS_FILE)
    # as a whole scan's metadata (options: None), plus the parts it came from
    merged_meta = {**meta, "shard": None, "options": None, "merged_from": [os.path.abspath(p) for p in paths]}
    schema = SHARD_SCHEMA.with_metadata({META_KEY: json.dumps(merged_meta)})
    tmp = temp_next_to(summary.results_path)
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for path in paths:  # streamed: bounded memory however many rows a part has
                for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
                    batch = pa.Table.from_batches([batch]).select(SHARD_SCHEMA.names).cast(SHARD_SCHEMA)
                    writer.write_table(batch.replace_schema_metadata(schema.metadata))
                    summary.rows += batch.num_rows
                    summary.bad += pc.sum(pc.equal(batch["status"], R.BAD)).as_py() or 0
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    publish(tmp, summary.results_path)
    with atomic_output(summary.problems_path) as tmp_problems, open(tmp_problems, "wb") as out:
        for path in paths:
            problems = sibling(path, locations.PROBLEMS_FILE)
            if not os.path.isfile(problems):
                raise UserError(f"{problems}: missing; part {path}'s bad samples and structure problems are there")
            with open(problems, "rb") as f:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
    summary_path = os.path.join(output_dir, locations.SUMMARY_FILE)
    merged = {"results_path": summary.results_path, "problems_path": summary.problems_path}
    merge_summaries(paths, summary_path, merged)
    if is_url(root):  # a set in a bucket: recorded for its prefix, as a whole scan's (dsclean report URL)
        from ..storage.reuse import write_record
        from .run import SHARD_SET_RECORD

        state = locations.url_state_dir(root, state_dir)
        os.makedirs(state, exist_ok=True)
        write_record(state, root, summary.results_path, SHARD_SET_RECORD)
    else:
        note = locations.write_pointer(
            root, [summary.results_path], problems=[summary.problems_path], state_dir=state_dir
        )
        summary.notes += [note] if note else []
    return summary


def _refuse_shared_shards(paths: list[str]) -> None:
    """A shard in two parts' results: parts of differently named sets, or a set whose names changed between them."""
    seen: dict[str, str] = {}
    for path in paths:
        shards = pc.unique(pq.read_table(path, columns=["shard"])["shard"]).to_pylist()
        for shard in shards:
            if shard in seen:
                raise UserError(
                    f"{shard} is in two parts' results ({seen[shard]} and {path}): overlapping parts; re-run the parts"
                )
            seen[shard] = path
