"""--backend dask: the cluster's workers read objects straight from the store (a LocalCluster, local S3)."""

from __future__ import annotations

import os

import pytest
from support import synth
from support.s3server import FaultProxy

distributed = pytest.importorskip("distributed")

from dsclean.scanning.results import read_results  # noqa: E402
from dsclean.storage.scan import BucketScanOptions, scan_bucket  # noqa: E402


def test_dask_workers_read_the_store_directly_and_agree_with_a_local_scan(bucket, s3fs_direct, s3_endpoint, tmp_path):
    for i in range(8):
        s3fs_direct.pipe_file(f"{bucket}/d/{i}.png", synth.png(16, 16, seed=i))
    s3fs_direct.pipe_file(f"{bucket}/d/x/bad.png", synth.truncate(synth.png(16, 16), 0.5))
    got = {}
    with (
        FaultProxy(s3_endpoint) as proxy,
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
    ):
        for name, extra in (
            ("local", {"jobs": 1}),
            ("dask", {"backend": "dask", "scheduler": cluster.scheduler_address}),
        ):
            opts = BucketScanOptions(
                storage_options={"endpoint_url": proxy.url},
                chunk_objects=2,
                use_cache=False,
                report_dir=str(tmp_path / name),
                **extra,
            )
            s = scan_bucket(f"s3://{bucket}/d", opts)
            t = read_results(s.results_path).to_pydict()
            got[name] = sorted(zip((os.fsdecode(p) for p in t["path"]), t["status"], t["content_hash"]))
            if name == "local":
                proxy.gets.clear()
        # every object was read once more, by the Dask workers (not through this process's pool)
        assert sorted(proxy.gets.values()) == [1] * 9
    assert got["dask"] == got["local"] and len(got["local"]) == 9
