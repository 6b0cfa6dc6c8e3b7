#!/usr/bin/env python3
"""Benchmark: indexing a split (``DATA/train``) after one scan of its split root (``DATA``), against the baseline.

The baseline, in the same script on the same tree: ``dsclean index DATA/train`` with no scan of ``DATA``
recorded (what it did before splits reused their parent's scan: every file decoded again). Both builds
write the same index. Printed: the times, their ratio, and the files each sent to the checker (counted at
``dsclean.index.checking.run_checks``).

    python scripts/bench_splits.py [--n 4000] [--jobs 2]
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

import dsclean.index.checking as checking  # noqa: E402
from dsclean.index.build import build_index  # noqa: E402
from dsclean.index.store import open_index  # noqa: E402
from dsclean.scanning.scanner import ScanOptions, scan  # noqa: E402


def make_split_root(data: str, n: int) -> None:
    """``n`` JPEGs in DATA/train (80%) and DATA/val (20%), 10 classes each, every file's bytes unique."""
    bases = [synth.jpeg(96, 96, seed=s) for s in range(8)]
    for i in range(n):
        split = "val" if i % 5 == 0 else "train"
        d = os.path.join(data, split, f"class{i % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i:06d}.jpg"), "wb") as f:
            f.write(bases[i % 8] + i.to_bytes(4, "big"))


def counted_index(root: str, output: str, jobs: int) -> tuple[float, int]:
    """``(seconds, files sent to the checker)`` of one build."""
    sent = [0]
    real = checking.run_checks

    def counting(root_, chunks, opts, workers, backend="loky", scheduler=None):
        chunks = [list(c) for c in chunks]
        sent[0] += sum(len(c) for c in chunks)
        return real(root_, chunks, opts, workers, backend, scheduler)

    checking.run_checks = counting
    try:
        t0 = time.perf_counter()
        build_index(root, output, jobs=jobs)
        return time.perf_counter() - t0, sent[0]
    finally:
        checking.run_checks = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4000, help="files in DATA (train 80%%, val 20%%)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_splits_")
    os.environ["DSCLEAN_STATE_DIR"] = os.path.join(tmp, "state")
    try:
        data = os.path.join(tmp, "DATA")
        make_split_root(data, args.n)
        base, base_sent = counted_index(os.path.join(data, "train"), os.path.join(tmp, "base.arrow"), args.jobs)
        shutil.rmtree(os.path.join(tmp, "state"))  # the baseline's verdicts went to the cache: forget them
        t0 = time.perf_counter()
        scan(data, ScanOptions(jobs=args.jobs, progress=False))
        scanned = time.perf_counter() - t0
        reuse, reuse_sent = counted_index(os.path.join(data, "train"), os.path.join(tmp, "reuse.arrow"), args.jobs)
        rows = len(open_index(os.path.join(tmp, "reuse.arrow")))
        assert rows == len(open_index(os.path.join(tmp, "base.arrow")))
        print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, jobs={args.jobs}, n={args.n}")
        print(f"scan DATA (train + val, once):          {scanned:8.2f} s")
        print(f"index DATA/train, never scanned (base): {base:8.2f} s, {base_sent} files decoded")
        print(f"index DATA/train after scan of DATA:    {reuse:8.2f} s, {reuse_sent} files decoded ({rows} rows)")
        print(f"ratio reuse / base:                     {reuse / base:8.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
