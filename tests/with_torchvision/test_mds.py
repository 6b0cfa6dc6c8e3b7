"""Mosaic MDS shard sets written by the real streaming.MDSWriter: every image checked and named by shard
and sample, the per-shard hashes of index.json recomputed, a hostile index.json refused entry by entry."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # tests/support
from support import synth  # noqa: E402

from dsclean import denylist  # noqa: E402
from dsclean.shardsets.detect import detect  # noqa: E402
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set, verify_shard_set  # noqa: E402

streaming = pytest.importorskip("streaming")
FAST = dict(jobs=1, backend="threads")


def write_mds(folder, n=24, bad=(5, 17)) -> None:
    with streaming.MDSWriter(
        out=str(folder),
        columns={"image": "jpeg", "thumb": "bytes", "label": "int"},
        hashes=["sha1", "xxh64"],
        size_limit=6000,
    ) as w:
        for i in range(n):
            jpg = synth.jpeg(32, 32, seed=i)
            if i in bad:
                jpg = synth.truncate(jpg, 0.5)
            w.write({"image": jpg, "thumb": synth.png(8, 8, seed=i), "label": i})


def test_mds_samples_checked_named_and_denied(tmp_path):
    folder = tmp_path / "mds"
    write_mds(folder)
    index = json.loads((folder / "index.json").read_text())
    assert len(index["shards"]) > 2  # several shards: rows numbered across them
    ss = detect([str(folder)])
    assert ss is not None and ss.kind == "mds"
    s = scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), **FAST))
    assert s.samples == 24 and s.checked == 48  # the jpeg column and the PNGs of the bytes column
    assert s.bad_reasons == {"truncated": 2} and not s.problems
    denied = denylist.read_denylist(folder / "denylist.jsonl")
    assert sorted(e["row"] for e in denied.entries) == [5, 17]
    assert all(e["shard"].startswith("shard.") and e["shard"].endswith(".mds") for e in denied.entries)
    # the recipe of docs/guides/foreign-shards.md: the denied rows left out of a StreamingDataset
    import torch.utils.data

    ds = streaming.StreamingDataset(local=str(folder), shuffle=False, batch_size=1)
    rows = {e["row"] for e in denied.entries}
    kept = torch.utils.data.Subset(ds, [i for i in range(len(ds)) if i not in rows])
    labels = [kept[i]["label"] for i in range(len(kept))]
    assert len(labels) == 22 and 5 not in labels and 17 not in labels
    for i in range(len(kept)):
        kept[i]["image"].load()  # every kept image decodes whole


def test_mds_hash_mismatch_and_hostile_index(tmp_path):
    folder = tmp_path / "mds"
    write_mds(folder, bad=())
    index = json.loads((folder / "index.json").read_text())
    first = index["shards"][0]["raw_data"]["basename"]
    data = bytearray((folder / first).read_bytes())
    data[-10] ^= 0xFF  # same size, other bytes: only the hashes tell
    (folder / first).write_bytes(bytes(data))
    second = index["shards"][1]["raw_data"]["basename"]
    os.unlink(folder / second)
    index["shards"][2]["raw_data"]["basename"] = "../../etc/passwd"
    index["shards"][3]["samples"] = 10**12
    (folder / "index.json").write_text(json.dumps(index))
    v = verify_shard_set([str(folder)], ShardScanOptions(**FAST))
    assert not v.ok
    assert v.problems == {"broken_shard": 3, "missing_shard": 1}
    details = " | ".join(p["detail"] for p in v.listed)
    assert "sha1 of the file is" in details and "not a plain file name" in details
    assert "index.json says 1000000000000" in details
    assert any(p["shard"] == second and p["reason"] == "missing_shard" for p in v.listed)


def test_mds_set_refuses_job_array_parts(tmp_path):
    """``--shard I/N`` splits tars and Parquet files by name; an MDS set's tasks come from its index.json: refused,
    pointing to a Dask cluster, nothing written."""
    from dsclean.errors import UserError

    folder = tmp_path / "mds"
    write_mds(folder)
    with pytest.raises(UserError, match="--shard I/N splits a set of tars or Parquet files; an mds set"):
        scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), part=(0, 2), **FAST))
    assert not (tmp_path / "out").exists() and not (folder / "denylist.jsonl").exists()
