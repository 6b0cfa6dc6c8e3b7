"""Mosaic MDS shards in a bucket (a real S3 server, moto): the prefix holding index.json is recognised as an MDS
set; each shard goes through a temp file of its own (removed after), the results equal the local folder's."""

from __future__ import annotations

import os
import sys
import tempfile

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # tests/support
from support import synth  # noqa: E402

from dsclean.shardsets import remote  # noqa: E402
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set, verify_shard_set  # noqa: E402

streaming = pytest.importorskip("streaming")
pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


def write_mds(folder, n=24, bad=(5, 17)) -> None:
    with streaming.MDSWriter(out=str(folder), columns={"image": "jpeg", "label": "int"}, size_limit=6000) as w:
        for i in range(n):
            jpg = synth.jpeg(32, 32, seed=i)
            if i in bad:
                jpg = synth.truncate(jpg, 0.5)
            w.write({"image": jpg, "label": i})


def test_mds_set_in_a_bucket_read_a_shard_at_a_time(bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch):
    local = tmp_path / "mds"
    write_mds(local)
    names = sorted(os.listdir(local))
    for name in names:
        s3fs_direct.put_file(str(local / name), f"{bucket}/m/{name}")
    staging = tmp_path / "tmp"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    copies: list[str] = []

    def shard_copies() -> list[str]:
        return [n for n in os.listdir(staging) if n.startswith("dsclean-shard-")]

    real_staged = remote.staged

    def watched(store, name):  # the temp copies: one shard at a time, each removed before the next
        cm = real_staged(store, name)

        class Watch:
            def __enter__(self):
                assert not shard_copies()  # the one before was removed: one shard on local disk at a time
                path = cm.__enter__()
                copies.append(path)
                return path

            def __exit__(self, *exc):
                return cm.__exit__(*exc)

        return Watch()

    monkeypatch.setattr(remote, "staged", watched)
    opts = dict(jobs=1, backend="threads", storage_options={"endpoint_url": s3_endpoint})
    s = scan_shard_set([f"s3://{bucket}/m"], ShardScanOptions(report_dir=str(tmp_path / "r"), **opts))
    here = scan_shard_set(
        [str(local)], ShardScanOptions(report_dir=str(tmp_path / "l"), dry_run=True, jobs=1, backend="threads")
    )
    assert (s.kind, s.samples, s.checked, s.bad_reasons) == ("mds", 24, 24, {"truncated": 2})
    table, local_table = (pq.read_table(x.results_path).sort_by("path").to_pylist() for x in (s, here))
    assert table == local_table
    shards = [n for n in names if n.endswith(".mds")]
    assert len(copies) == len(shards) > 2 and all(not os.path.exists(p) for p in copies)
    assert shard_copies() == []  # every temp copy removed
    assert not s3fs_direct.exists(f"{bucket}/m/denylist.jsonl")  # the deny-list stays local
    s3fs_direct.rm(f"{bucket}/m/{shards[1]}")
    v = verify_shard_set([f"s3://{bucket}/m"], ShardScanOptions(denylist=s.denylist_path, **opts))
    assert v.problems == {"missing_shard": 1} and not v.ok
