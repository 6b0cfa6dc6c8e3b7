#!/usr/bin/env python3
"""Benchmark IndexedDataset over a bucket index against the same samples from local disk, in one run.

    python scripts/bench_bucket_dataset.py [--objects 400] [--workers 2] [--latency 0] [--repeats 2]

``--objects`` small JPEGs (64x64, photo-like) are written to a folder and uploaded to a local S3 API server
(moto, in this process' threads; ``--latency`` seconds added to every request by a proxy: what a real store
costs per GET). Both are indexed (``--no-check``: the index step is not measured), then one epoch of each
``IndexedDataset`` (decode to PIL, size as the sample) runs through a ``torch.utils.data.DataLoader`` with
``--workers`` forked workers, batch 32. Reported: samples/s of each (best of ``--repeats``), the ratio
bucket / local, and the store's own pace as a baseline (plain s3fs GETs of the same objects, one at a time,
no decode): moto is a Python server, so that pace, not dsclean, bounds the bucket figure. ``--moto-process``
runs the server in an interpreter of its own (else in this process' threads).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support


def size_of(img):
    return img.size


def epoch(ds, workers: int) -> float:
    import torch.utils.data

    loader = torch.utils.data.DataLoader(
        ds, batch_size=32, num_workers=workers, multiprocessing_context="fork" if workers else None, collate_fn=list
    )
    t = time.perf_counter()
    n = sum(len(batch) for batch in loader)
    assert n == len(ds), (n, len(ds))
    return n / (time.perf_counter() - t)


def _probe(index: str, endpoint: str, args) -> dict:
    """``dsclean.probe_index`` over the bucket index (the endpoint from the environment, as a user would give it)."""
    from dsclean.diagnose.probe import probe_index

    os.environ["AWS_ENDPOINT_URL"] = endpoint
    r = probe_index(index, num_workers=args.workers, batch_size=32, seconds=args.probe)
    mb = 1024 * 1024
    return {
        "samples": r.samples,
        "samples_per_s": round(r.samples_per_s, 1),
        "worker_uss_mb_start_end": [(round((w.start or 0) / mb, 1), round((w.end or 0) / mb, 1)) for w in r.workers],
        "worker_growth_mb_fitted": [round((w.growth or 0) / mb, 2) for w in r.workers],
        "climbing": r.climbing,
        "error": r.error,
    }


def _wait_for(endpoint: str) -> None:
    import urllib.request

    for _ in range(200):  # every loop makes progress: at most 20 s
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"the S3 server at {endpoint} did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--objects", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--moto-process", action="store_true", help="run the S3 server in a process of its own")
    ap.add_argument(
        "--probe",
        type=float,
        default=0.0,
        metavar="S",
        help="also run dsclean's probe over the bucket index for S seconds (--workers workers): each worker's USS "
        "at its start and end, and whether it climbs",
    )
    args = ap.parse_args()
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(k, v)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    import s3fs
    from support import synth
    from support.s3server import FaultProxy, free_port, start_moto

    from dsclean.data.dataset import IndexedDataset
    from dsclean.index.bucket import BucketIndexOptions, build_bucket_index
    from dsclean.index.build import build_index
    from dsclean.index.options import IndexOptions

    if args.moto_process:  # its own interpreter: the server does not share the DataLoader parent's GIL
        import subprocess

        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        endpoint = f"http://127.0.0.1:{port}"
        _wait_for(endpoint)
    else:
        server, endpoint = start_moto()
    tmp = tempfile.mkdtemp(prefix="bench-bucket-ds-")
    os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, "state")
    try:
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
        fs.mkdir("bench")
        root = os.path.join(tmp, "data")
        for i in range(args.objects):
            rel = f"c{i % 4}/{i:05d}.jpg"
            data = synth.jpeg(64, 64, seed=i)
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "wb") as f:
                f.write(data)
            fs.pipe_file(f"bench/data/{rel}", data)
        local_index, bucket_index = os.path.join(tmp, "local.arrow"), os.path.join(tmp, "bucket.arrow")
        build_index(root, local_index, IndexOptions(check=False))
        proxy = FaultProxy(endpoint, latency=args.latency) if args.latency else None  # a proxy costs a hop
        with proxy if proxy is not None else contextlib.nullcontext():
            url = proxy.url if proxy is not None else endpoint
            opts = {"endpoint_url": url}
            build_bucket_index(
                "s3://bench/data", bucket_index, IndexOptions(check=False), BucketIndexOptions(storage_options=opts)
            )
            local = IndexedDataset(local_index, transform=size_of)
            remote = IndexedDataset(bucket_index, transform=size_of, storage_options=opts)
            got = {"local": 0.0, "bucket": 0.0, "s3fs": 0.0}
            raw = s3fs.S3FileSystem(endpoint_url=url, skip_instance_cache=True)
            keys = [f"bench/data/{remote.path(i)}" for i in range(len(remote))]
            for _ in range(args.repeats):
                for name, ds in (("local", local), ("bucket", remote)):
                    got[name] = max(got[name], epoch(ds, args.workers))
                t = time.perf_counter()  # the store's own pace: plain s3fs GETs, one at a time, no decode
                for key in keys:
                    raw.cat_file(key)
                got["s3fs"] = max(got["s3fs"], len(keys) / (time.perf_counter() - t))
        result = {
            "objects": args.objects,
            "workers": args.workers,
            "latency_s": args.latency,
            "local_samples_per_s": round(got["local"], 1),
            "bucket_samples_per_s": round(got["bucket"], 1),
            "bucket_over_local": round(got["bucket"] / got["local"], 3),
            "s3fs_gets_per_s_one_thread": round(got["s3fs"], 1),
            "bucket_over_s3fs_gets": round(got["bucket"] / got["s3fs"], 3),
        }
        if args.probe:
            result["probe"] = _probe(bucket_index, url, args)
        print(json.dumps(result, indent=2))
    finally:
        if args.moto_process:
            server.terminate()
            server.wait()
        else:
            server.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
