"""MDS shards and litdata chunks checked a shard a task: the workers read each shard with the library's reader (the
main process reads index.json only), with the same results as shipping every sample's bytes from the main
process; on a Dask LocalCluster too (where this venv has Dask distributed)."""

from __future__ import annotations

import json
import os
import sys

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # tests/support
from support import synth  # noqa: E402

from dsclean.shardsets import litdata as litdata_reader  # noqa: E402
from dsclean.shardsets import mds as mds_reader  # noqa: E402
from dsclean.shardsets import run  # noqa: E402
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set  # noqa: E402

streaming = pytest.importorskip("streaming")

SAME = ("kind", "shards", "samples", "checked", "counts", "bad_reasons", "warn_reasons", "problems")


def write_mds(folder, n=24, bad=(5, 17)) -> None:
    with streaming.MDSWriter(
        out=str(folder), columns={"image": "jpeg", "thumb": "bytes", "label": "int"}, size_limit=6000
    ) as w:
        for i in range(n):
            jpg = synth.jpeg(32, 32, seed=i)
            if i in bad:
                jpg = synth.truncate(jpg, 0.5)
            w.write({"image": jpg, "thumb": synth.png(8, 8, seed=i), "label": i})


def damage_index(folder) -> None:
    """A broken entry in index.json (the main process's problem, met while planning) and a missing shard."""
    path = folder / "index.json"
    doc = json.loads(path.read_text())
    doc["shards"].append({"format": "mds", "version": 2, "raw_data": {"basename": "../x"}})
    path.write_text(json.dumps(doc))
    os.unlink(folder / doc["shards"][1]["raw_data"]["basename"])


def results(summary) -> tuple[list[dict], list[str]]:
    with open(summary.problems_path) as f:
        return pq.read_table(summary.results_path).sort_by("path").to_pylist(), sorted(f.read().splitlines())


def refuse(*args, **kwargs):
    raise AssertionError("the main process read a shard")


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("kind", ["mds", "litdata"])
def test_workers_read_each_shard_and_agree_with_shipped_bytes(kind, tmp_path, monkeypatch):
    if kind == "mds":
        folder = tmp_path / "mds"
        write_mds(folder)
        damage_index(folder)
        reader, read = mds_reader, "_shard"
    else:
        pytest.importorskip("litdata")
        monkeypatch.syspath_prepend(REPO)  # litdata's writer unpickles the sample function by this module name
        from tests.with_torchvision.test_litdata import write_set

        folder = write_set(tmp_path, monkeypatch)
        reader, read = litdata_reader, "_chunk"
    with monkeypatch.context() as m:
        m.setattr(reader, read, refuse)  # the workers are forked from the forkserver: unpatched
        new = scan_shard_set([str(folder)], ShardScanOptions(jobs=2, report_dir=str(tmp_path / "new"), dry_run=True))
    with monkeypatch.context() as m:
        m.setattr(run, "check_events", run.check_samples)  # the main process reads and ships every sample
        old = scan_shard_set([str(folder)], ShardScanOptions(jobs=2, report_dir=str(tmp_path / "old"), dry_run=True))
    for field in SAME:
        assert getattr(new, field) == getattr(old, field), field
    assert results(new) == results(old)
    if kind == "mds":  # the index's broken entry (met while planning, here) and the missing shard (a worker's)
        assert new.problems == {"broken_shard": 1, "missing_shard": 1} and 0 < new.checked < 48
        assert new.bad_reasons.get("truncated", 0) >= 1
    else:
        assert (new.samples, new.checked, new.bad_reasons) == (20, 39, {"truncated": 1})


def test_an_mds_set_on_dask_matches_a_local_scan(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")  # noqa: F841 - the cluster below
    from support.cluster import local_cluster

    folder = tmp_path / "mds"
    write_mds(folder)
    here = scan_shard_set([str(folder)], ShardScanOptions(jobs=2, report_dir=str(tmp_path / "here"), dry_run=True))
    monkeypatch.setattr(mds_reader, "_shard", refuse)  # the Dask workers import their own, unpatched
    with local_cluster() as cluster:
        opts = ShardScanOptions(
            backend="dask", scheduler=cluster.scheduler_address, report_dir=str(tmp_path / "dask"), dry_run=True
        )
        there = scan_shard_set([str(folder)], opts)
    for field in SAME:
        assert getattr(there, field) == getattr(here, field), field
    assert results(there) == results(here) and there.bad_reasons == {"truncated": 2}
