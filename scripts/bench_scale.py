#!/usr/bin/env python3
"""Benchmark: the same tree scanned with loky at 1 and 2 jobs and on a 2-worker Dask LocalCluster.

Reports files/s for each, side by side in one run, and the overhead of the
distributed path per file (Dask at 2 workers against loky at 2 jobs, in CPU-ms
of wall time per file), which is what a 50-million-file estimate needs.

    python scripts/bench_scale.py [--n 3000] [--size 384] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support: media synthesis
from support import synth  # noqa: E402

from dsclean.scanning.scanner import ScanOptions, scan  # noqa: E402


def make_tree(folder: str, n: int, size: int) -> None:
    bases = [synth.jpeg(size, size, seed=s, quality=88) for s in range(8)]
    for i in range(n):
        d = os.path.join(folder, f"class{i % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i:06d}.jpg"), "wb") as f:
            f.write(bases[i % 8] + i.to_bytes(4, "big"))  # unique bytes after the end marker


def timed_scan(folder: str, **kw) -> float:
    with tempfile.TemporaryDirectory() as report:
        start = time.perf_counter()
        s = scan(folder, ScanOptions(dry_run=True, report_dir=report, progress=False, use_cache=False, **kw))
        elapsed = time.perf_counter() - start
    assert s.bad == 0 and s.files > 0
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--size", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    import dask
    import distributed

    folder = tempfile.mkdtemp(prefix="dsclean-scale-")
    make_tree(folder, args.n, args.size)
    mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs) / 1e6
    results: dict[str, float] = {}
    with dask.config.set({"distributed.worker.daemon": False}):
        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster:
            runs = {
                "loky, --jobs 1": dict(jobs=1),
                "loky, --jobs 2": dict(jobs=2),
                "dask, LocalCluster 2 workers x 1 thread": dict(backend="dask", scheduler=cluster.scheduler_address),
            }
            for name, kw in runs.items():  # warm-up: start pools, forkservers, page cache
                timed_scan(folder, **kw)
            for _ in range(args.repeats):  # interleaved, best of each: the machine is noisy
                for name, kw in runs.items():
                    results[name] = min(results.get(name, float("inf")), timed_scan(folder, **kw))
    shutil.rmtree(folder)

    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}"
    )
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: python scripts/bench_scale.py --n {args.n} --size {args.size} --repeats {args.repeats}")
    print(f"tree: {args.n:,} JPEGs of {args.size}x{args.size}, {mb:.1f} MB\n")
    print("| backend | files/s | MB/s | wall ms per file | vs loky --jobs 1 |")
    print("|---|---:|---:|---:|---:|")
    base = results["loky, --jobs 1"]
    for name, t in results.items():
        print(f"| {name} | {args.n / t:,.0f} | {mb / t:,.1f} | {1000 * t / args.n:.3f} | {base / t:.2f}x |")
    loky2, dask2 = results["loky, --jobs 2"], results["dask, LocalCluster 2 workers x 1 thread"]
    per_file = 1000 * (dask2 - loky2) / args.n * 2  # two workers: wall ms x 2 = worker-ms per file
    print(f"\ndistributed overhead: {per_file:+.3f} worker-ms per file (dask 2 workers vs loky 2 jobs)")


if __name__ == "__main__":
    main()
