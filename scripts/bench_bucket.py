#!/usr/bin/env python3
"""Benchmark bucket scans (dsclean.storage) against baselines in the same run.

    python scripts/bench_bucket.py [--objects 200] [--latency 0.02] [--threads 16] [--repeats 2]
                                   [--keys 20000,200000] [--manifest-keys 100000,1000000] [--only read,memory]
                                   [--child-timeout 600]

1. read: ``scan_bucket`` of ``--objects`` small JPEGs (64x64) on a local S3 API server (moto, in this
   process' threads) behind a proxy adding ``--latency`` seconds to every request (what a real store
   costs per GET), ``--jobs 1``: the read pool (``--threads`` reads in flight) against no pool (one
   read at a time); samples/s per core (one worker process's CPU), best of ``--repeats``.
2. memory: peak RSS of a whole ``scan_bucket`` (manifest -> chunks -> reads -> checks -> results
   files) in a fresh interpreter, over a manifest naming ``--keys`` objects (a ``file://`` store, the
   same tiny PNG named N times: the pipeline's memory, not the store's), and of streaming a manifest of
   ``--manifest-keys`` keys through ``iter_manifest`` (text and Parquet). Flat means the larger run's
   peak is the smaller's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support

CHILD = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
kind, path, root, report = sys.argv[1:5]
if kind == "scan":
    from dsclean.scanning.check import CheckOptions
    from dsclean.storage.scan import BucketScanOptions, scan_bucket
    t = time.perf_counter()
    s = scan_bucket(root, BucketScanOptions(jobs=1, manifest=path, report_dir=report, check=CheckOptions(facts=False)))
    n = s.files
else:
    from dsclean.storage.fs import Store
    from dsclean.storage.manifest import ManifestStats, iter_manifest
    t = time.perf_counter()
    n = sum(1 for _ in iter_manifest(path, Store(root), stats=ManifestStats()))
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork+exec (the parent's peak would show)
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({{"n": n, "s": time.perf_counter() - t, "peak_rss_mb": hwm / 1024}}))
"""


def bench_read(args) -> dict:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    import s3fs
    from support import synth
    from support.s3server import FaultProxy, start_moto

    from dsclean.storage.scan import BucketScanOptions, scan_bucket

    server, endpoint = start_moto()
    try:
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
        fs.mkdir("bench")
        for i in range(args.objects):
            fs.pipe_file(f"bench/set/{i:05d}.jpg", synth.jpeg(64, 64, seed=i))
        out: dict = {"objects": args.objects, "latency_s": args.latency}
        with FaultProxy(endpoint, latency=args.latency) as proxy, tempfile.TemporaryDirectory() as tmp:
            for name, threads in (("no pool (1 read at a time)", 1), (f"read pool ({args.threads})", args.threads)):
                best = None
                for r in range(args.repeats):
                    opts = BucketScanOptions(
                        storage_options={"endpoint_url": proxy.url},
                        jobs=1,
                        read_threads=threads,
                        report_dir=os.path.join(tmp, f"{threads}-{r}"),
                    )
                    cpu0, t0 = time.process_time(), time.perf_counter()
                    s = scan_bucket("s3://bench/set", opts)
                    wall = time.perf_counter() - t0
                    assert s.files == args.objects and s.bad == 0
                    best = min(best or wall, wall)
                    cpu = time.process_time() - cpu0
                out[name] = {
                    "wall_s": round(best, 2),
                    "samples_per_s_per_core": round(args.objects / best, 1),
                    "cpu_s": round(cpu, 2),
                }
                print(name, out[name], flush=True)
        base = out["no pool (1 read at a time)"]["samples_per_s_per_core"]
        out["speedup"] = round(out[f"read pool ({args.threads})"]["samples_per_s_per_core"] / base, 2)
        return out
    finally:
        server.stop()


def _child(kind: str, path: str, root: str, report: str, timeout: float) -> dict:
    code = CHILD.format(repo=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    done = subprocess.run(
        [sys.executable, "-c", code, kind, path, root, report], capture_output=True, text=True, timeout=timeout
    )
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_memory(args) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from support import synth

    out: dict = {"scan": {}, "manifest": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "set")
        os.makedirs(root)
        with open(os.path.join(root, "a.png"), "wb") as f:
            f.write(synth.png(8, 8))
        for n in args.keys:
            m = os.path.join(tmp, f"scan-{n}.txt")
            with open(m, "w") as f:
                f.writelines("a.png\n" for _ in range(n))
            out["scan"][n] = _child("scan", m, f"file://{root}", os.path.join(tmp, f"r{n}"), args.child_timeout)
            print("scan", n, out["scan"][n], flush=True)
        for n in args.manifest_keys:
            text = os.path.join(tmp, f"m-{n}.txt")
            with open(text, "w") as f:
                f.writelines(f"d{i // 1000:04d}/{i:08d}.jpg\n" for i in range(n))
            par = os.path.join(tmp, f"m-{n}.parquet")
            pq.write_table(pa.table({"key": [f"d{i // 1000:04d}/{i:08d}.jpg" for i in range(n)]}), par)
            out["manifest"][n] = {
                "text": _child("manifest", text, f"file://{root}", "", args.child_timeout),
                "parquet": _child("manifest", par, f"file://{root}", "", args.child_timeout),
            }
            print("manifest", n, out["manifest"][n], flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objects", type=int, default=200)
    p.add_argument("--latency", type=float, default=0.02)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--keys", type=lambda s: [int(x) for x in s.split(",")], default=[20_000, 200_000])
    p.add_argument("--manifest-keys", type=lambda s: [int(x) for x in s.split(",")], default=[100_000, 1_000_000])
    p.add_argument("--only", default="read,memory")
    p.add_argument("--child-timeout", type=float, default=600, help="seconds for each measured run (1M keys: more)")
    args = p.parse_args()
    results = {}
    if "read" in args.only:
        results["read"] = bench_read(args)
    if "memory" in args.only:
        results["memory"] = bench_memory(args)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
