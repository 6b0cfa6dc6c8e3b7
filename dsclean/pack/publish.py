"""Write what sits beside the shards once they are all there: the packed index and ``shardindex.json``.

The packed index is a dsclean index (:mod:`dsclean.index.store`, Arrow) of the
packed samples in shard order, with three more columns: ``shard`` (its number),
``offset`` (of the media member's data inside the tar) and ``checksum``
(:func:`dsclean.hashing.content_hash` of the original bytes). Its metadata is
the source index's, plus a ``packed`` entry; ``created`` is the source index's
too, so every file of a pack is a pure function of the source index and the
options (a rebuilt or finished pack is byte-identical).

``shardindex.json`` is wids' shard list, with urls relative to the folder
(the set is relocatable).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa

from .. import locations
from ..data.shards import SHARD_COLUMNS
from ..hashing import DIGEST_SIZE
from ..index.store import FORMAT_VERSION, read_table, write_arrow
from .plan import Plan
from .shardjob import ShardResult
from .write import make_readable, output_file

WIDS_KIND = "wids-shard-index-v1"


def packed_meta(source_meta: dict, rows: int) -> dict:
    """The packed index's metadata: the source index's (``created``, ``include_warn``, ``check_options``,
    ``files``, ``symlinks``, ``extensions``, ...: a reader of the shards loads and judges the samples as a
    reader of the index does), with this file's row count, format and writer's version."""
    from .. import __version__

    return {**source_meta, "format_version": FORMAT_VERSION, "dsclean_version": __version__, "rows": rows}


def publish(
    output: str,
    index: str,
    source_meta: dict,
    plan: Plan,
    results: dict[int, ShardResult],
    identity: str,
    *,
    fsync: bool = True,
) -> int:
    """Write ``index.arrow`` and ``shardindex.json`` (temp + rename each; fsynced unless ``fsync`` is
    False, ``--no-fsync``); returns the packed rows."""
    ordered = [results[k] for k in range(plan.shards)]
    rows = np.concatenate([r.rows for r in ordered]) if ordered else np.zeros(0, np.int64)
    table = read_table(index, rows)
    shard = np.concatenate([np.full(len(r.rows), r.number, np.int32) for r in ordered])
    offset = np.concatenate([r.offsets for r in ordered])
    checksum = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(DIGEST_SIZE), len(rows), [None, pa.py_buffer(b"".join(r.checksums for r in ordered))]
    )
    for name, values in (("shard", pa.array(shard)), ("offset", pa.array(offset)), ("checksum", checksum)):
        table = table.append_column(pa.field(name, SHARD_COLUMNS[name], nullable=False), values)
    table = table.combine_chunks()
    meta = packed_meta(source_meta, len(rows))
    meta["packed"] = {
        "name": plan.layout.name,
        "shards": plan.shards,
        "source_identity": identity,
        "layout": plan.layout.to_json(),
    }
    with output_file(os.path.join(output, locations.PACKED_INDEX_FILE), fsync=fsync) as tmp:
        write_arrow(table, tmp, meta)
        make_readable(tmp)
    shardlist = {
        "__kind__": WIDS_KIND,
        "wids_version": 1,
        "name": os.path.basename(str(source_meta["root"]).rstrip("/")) or "dsclean",
        "shardlist": [{"url": r.name, "nsamples": len(r.rows), "filesize": r.filesize} for r in ordered],
    }
    with output_file(os.path.join(output, locations.SHARD_LIST_FILE), fsync=fsync) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(shardlist, f, indent=1)
            f.write("\n")
        make_readable(tmp)
    return len(rows)
