#!/usr/bin/env python3
"""Benchmark checking samples inside other tools' WebDataset tars against the same samples as files on disk.

    python scripts/bench_foreign_shards.py [--n 1500] [--size 192] [--per-shard 250] [--repeats 3] [--jobs 1]
                                           [--sidecars]

The same JPEGs are written as files (a folder, what ``dsclean scan ROOT`` checks) and as WebDataset tars
written by ``webdataset.TarWriter`` (a .jpg, .json and .txt per sample, img2dataset's layout). Both are
checked through the API in this process with the same checker and options (``--jobs`` worker processes,
the scan's isolated pool; facts on, the default): ``dsclean.scan`` with ``rescan`` (no cache) against
``dsclean.scan_shard_set``. Interleaved, best of ``--repeats``; the figure is samples per second per
worker and the ratio shards / files (the target: >= 0.9), and the CPU time this (the main) process spent per
sample in each (``time.process_time``: the workers' time is not in it).

``--sidecars``: the folder holds each sample's .json and .txt beside its .jpg too (img2dataset's ``files`` output
layout: the same three members a tar sample has), listed by the folder scan and passed over as non-media; without
it the folder holds the JPEGs alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support: media synthesis


def make(root: str, n: int, size: int, per_shard: int, sidecars: bool = False) -> tuple[str, str]:
    import webdataset as wds
    from support import synth

    files, shards = os.path.join(root, "files"), os.path.join(root, "shards")
    os.makedirs(files)
    os.makedirs(shards)
    writer = None
    for i in range(n):
        data = synth.jpeg(size, size, seed=i, quality=88)
        with open(os.path.join(files, f"{i:07d}.jpg"), "wb") as f:
            f.write(data)
        if sidecars:  # the tar sample's other two members, as files
            with open(os.path.join(files, f"{i:07d}.json"), "w") as f:
                f.write(f'{{"i": {i}}}')
            with open(os.path.join(files, f"{i:07d}.txt"), "w") as f:
                f.write("a caption")
        if i % per_shard == 0:
            if writer is not None:
                writer.close()
            writer = wds.TarWriter(os.path.join(shards, f"shard-{i // per_shard:06d}.tar"))
        writer.write({"__key__": f"{i:07d}", "jpg": data, "json": {"i": i}, "txt": "a caption"})
    if writer is not None:
        writer.close()
    return files, shards


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--size", type=int, default=192)
    ap.add_argument("--per-shard", type=int, default=250)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--sidecars", action="store_true", help="a .json and a .txt beside each file (as in the tars)")
    args = ap.parse_args()

    from dsclean import ScanOptions, ShardScanOptions, scan, scan_shard_set
    from dsclean.scanning.executors import stop_local_workers

    tmp = tempfile.mkdtemp(prefix="bench-foreign-")
    try:
        files, shards = make(tmp, args.n, args.size, args.per_shard, args.sidecars)
        best = {"files": float("inf"), "shards": float("inf")}
        cpu = {"files": float("inf"), "shards": float("inf")}
        for r in range(args.repeats):
            out = os.path.join(tmp, f"out{r}")
            t, c = time.perf_counter(), time.process_time()
            s = scan(files, ScanOptions(jobs=args.jobs, rescan=True, report_dir=out + "f", state_dir=out + "s"))
            best["files"] = min(best["files"], time.perf_counter() - t)
            cpu["files"] = min(cpu["files"], time.process_time() - c)
            assert s.files == args.n and s.bad == 0
            os.unlink(os.path.join(shards, "denylist.jsonl")) if os.path.exists(
                os.path.join(shards, "denylist.jsonl")
            ) else None
            t, c = time.perf_counter(), time.process_time()
            ss = scan_shard_set([shards], ShardScanOptions(jobs=args.jobs, report_dir=out + "w"))
            best["shards"] = min(best["shards"], time.perf_counter() - t)
            cpu["shards"] = min(cpu["shards"], time.process_time() - c)
            assert ss.checked == args.n and ss.bad == 0
        stop_local_workers()
        per = {k: args.n / v / args.jobs for k, v in best.items()}
        layout = "with their .json and .txt sidecars" if args.sidecars else "alone"
        print(f"{args.n} JPEGs {args.size}x{args.size} (files {layout}), {args.jobs} worker(s), best of {args.repeats}")
        us = {k: v / args.n * 1e6 for k, v in cpu.items()}
        print(f"  files on disk   : {best['files']:.2f} s  {per['files']:.0f} samples/s per worker", end="")
        print(f"  main process CPU {us['files']:.0f} us a sample")
        print(f"  webdataset tars : {best['shards']:.2f} s  {per['shards']:.0f} samples/s per worker", end="")
        print(f"  main process CPU {us['shards']:.0f} us a sample")
        print(f"  ratio shards / files: {per['shards'] / per['files']:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
