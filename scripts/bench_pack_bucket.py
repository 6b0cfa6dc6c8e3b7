#!/usr/bin/env python3
"""Benchmark ``dsclean pack`` from a bucket against packing the same samples from local disk, one run.

    python scripts/bench_pack_bucket.py [--objects 400] [--size 128] [--latency 0.0] [--repeats 1]

The same ``--objects`` JPEGs (``--size`` px, 10 class folders) are written to a local folder and to a
bucket on a local S3 API server (moto, in this process' threads; ``--latency`` adds that many seconds
to every request through the test proxy, what a real store costs per GET). Timed: ``pack_shards`` of a
local index of the folder (``--rehash``: every file hashed, as every object is) against ``pack_shards``
of the bucket prefix's index (listing included; its time also shown alone), both ``--jobs 1``, 4 MiB shards, ``--no-fsync``;
samples/s and the ratio bucket / local; and the store's own pace (the same objects fetched by 16 threads
with s3fs, nothing else done): what a bucket pack can reach. Best of ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=400)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(k, v)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    import s3fs
    from support import synth
    from support.s3server import FaultProxy, start_moto

    from dsclean.index.build import build_index
    from dsclean.pack.bucketsource import bucket_index
    from dsclean.pack.packer import PackOptions, pack_shards

    work = tempfile.mkdtemp(prefix="bench-pack-bucket-")
    os.environ["DSCLEAN_STATE_DIR"] = os.path.join(work, "state")
    server, endpoint = start_moto()
    try:
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
        fs.mkdir("bench")
        root = os.path.join(work, "set")
        total = 0
        bases = [synth.jpeg(args.size, args.size, seed=s, quality=88) for s in range(16)]
        for i in range(args.objects):
            rel = f"class{i % 10:02d}/{i:06d}.jpg"
            data = bases[i % 16] + i.to_bytes(4, "little")  # distinct bytes (a JPEG tolerates a trailer)
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "wb") as f:
                f.write(data)
            fs.pipe_file(f"bench/set/{rel}", data)
            total += len(data)
        index = os.path.join(work, "local.arrow")
        build_index(root, index, check=False)
        base = dict(shard_size=4 << 20, shuffle=1, fsync=False)
        results: dict[str, list[float]] = {"local": [], "bucket": [], "bucket_listing": [], "get_only": []}
        with FaultProxy(endpoint, latency=args.latency) as proxy:
            options = {"endpoint_url": proxy.url}
            for r in range(args.repeats):
                out = os.path.join(work, f"local-{r}")
                t = time.perf_counter()
                s = pack_shards(index, out, PackOptions(**base, rehash=True))
                results["local"].append(time.perf_counter() - t)
                assert s.complete and s.samples == args.objects
                out = os.path.join(work, f"bucket-{r}")
                t = time.perf_counter()
                bindex, _ = bucket_index("s3://bench/set", options)
                results["bucket_listing"].append(time.perf_counter() - t)
                s = pack_shards(bindex, out, PackOptions(**base, storage_options=options))
                results["bucket"].append(time.perf_counter() - t)
                assert s.complete and s.samples == args.objects
                # the store's own pace: the same objects fetched by 16 threads, nothing else done with them
                from concurrent.futures import ThreadPoolExecutor

                gfs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": proxy.url}, skip_instance_cache=True)
                keys = [f"bench/set/class{i % 10:02d}/{i:06d}.jpg" for i in range(args.objects)]
                t = time.perf_counter()
                with ThreadPoolExecutor(16) as pool:
                    got = sum(len(b) for b in pool.map(gfs.cat_file, keys))
                results["get_only"].append(time.perf_counter() - t)
                assert got == total
        best = {k: min(v) for k, v in results.items()}
        report = {
            "objects": args.objects,
            "mb": round(total / 1e6, 2),
            "latency_s": args.latency,
            "local_samples_per_s": round(args.objects / best["local"], 1),
            "bucket_samples_per_s": round(args.objects / best["bucket"], 1),
            "bucket_over_local": round(best["local"] / best["bucket"], 3),
            "bucket_listing_s": round(best["bucket_listing"], 3),  # (inside the bucket time)
            "get_only_objects_per_s": round(args.objects / best["get_only"], 1),
            "bucket_over_get_only": round(best["get_only"] / best["bucket"], 3),
            "seconds": {k: [round(x, 3) for x in v] for k, v in results.items()},
        }
        print(json.dumps(report, indent=2))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
