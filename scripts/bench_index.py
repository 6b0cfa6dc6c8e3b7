#!/usr/bin/env python3
"""Benchmark: what `dsclean index` and `IndexedDataset.from_folder` cost now that they check what the scan did not cover.

All times are ratios against a baseline run in the same script on the same tree: a
re-scan answered entirely from the scan cache (a stat and a cache lookup per file).

- index after a scan, nothing to check (every verdict current);
- index after 1% of the files changed since the scan (those are decoded again);
- from_folder's up-to-date test (a stat and a hash per file) when the index is reused;
- index of a never-scanned tree (every file decoded) against a full scan of it.

    python scripts/bench_index.py [--n 20000] [--jobs 2]
"""
from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support: media synthesis
from support import synth  # noqa: E402

from dsclean.index.build import build_index  # noqa: E402
from dsclean.index.folder import index_folder, up_to_date  # noqa: E402
from dsclean.scanning.scanner import ScanOptions, scan  # noqa: E402


def make_tree(folder: str, n: int) -> None:
    bases = [synth.jpeg(64, 64, seed=s) for s in range(8)]
    for i in range(n):
        d = os.path.join(folder, f"class{i % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i:06d}.jpg"), "wb") as f:
            f.write(bases[i % 8] + i.to_bytes(4, "big"))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dsclean-bench-index-")
    os.environ["DSCLEAN_STATE_DIR"] = os.path.join(work, "state")
    root, out = os.path.join(work, "data"), os.path.join(work, "i.arrow")
    try:
        make_tree(root, args.n)
        opts = ScanOptions(jobs=args.jobs, progress=False, report_dir=os.path.join(work, "r"))
        scan(root, opts)  # warms the page cache and the worker pool; fills the scan cache
        full_scan = timed(lambda: scan(root, ScanOptions(jobs=args.jobs, progress=False, use_cache=False,
                                                         report_dir=os.path.join(work, "r-full"))))
        cached_scan = min(timed(lambda: scan(root, opts)) for _ in range(2))  # the baseline
        current = min(timed(lambda: build_index(root, out, jobs=args.jobs)) for _ in range(2))
        changed = [os.path.join(root, f"class{i % 10}", f"{i:06d}.jpg") for i in range(0, args.n, 100)]
        for p in changed:
            os.utime(p, ns=(0, 1_000_000_000))  # 1%: the scan's verdicts are no longer current
        one_percent = timed(lambda: build_index(root, out, jobs=args.jobs))  # decodes them, caches the verdicts
        path, _ = index_folder(root, jobs=args.jobs)
        reuse = min(timed(lambda: up_to_date(path, root, "dsclean", "none")) for _ in range(2))
        logging.getLogger("dsclean").setLevel(logging.ERROR)  # the never-scanned notes, once per run
        fulls, nevers = [full_scan], []
        for _ in range(2):  # interleaved with full scans: the machine's load changes by the minute
            shutil.rmtree(os.environ["DSCLEAN_STATE_DIR"])  # forget every scan: a never-scanned tree
            for r in ("r", "r-full"):
                shutil.rmtree(os.path.join(work, r), ignore_errors=True)
            nevers.append(timed(lambda: build_index(root, out, jobs=args.jobs)))
            fulls.append(timed(lambda: scan(root, ScanOptions(jobs=args.jobs, progress=False, use_cache=False,
                                                              report_dir=os.path.join(work, "r-full")))))
        full_scan, never = min(fulls), min(nevers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.n:,} JPEGs (64x64), --jobs {args.jobs}; {platform.platform()}, {os.cpu_count()} CPUs")
    print(f"baseline: re-scan from the scan cache            {cached_scan:7.2f} s  1.00x")
    for name, t in (("index, every verdict current", current), ("index, 1% changed since the scan", one_percent),
                    ("from_folder up-to-date test (reuse)", reuse)):
        print(f"{name:<48} {t:7.2f} s  {t / cached_scan:.2f}x")
    print(f"full scan (no cache; best of 3)                  {full_scan:7.2f} s")
    print(f"index of a never-scanned tree (best of 2)        {never:7.2f} s  {never / full_scan:.2f}x of the full scan")


if __name__ == "__main__":
    main()
