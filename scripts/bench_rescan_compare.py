#!/usr/bin/env python3
"""Interleaved A/B of a fully cached re-scan: os.walk+stat vs two dsclean source trees (before, after).

Each dsclean version runs in its own long-lived process (its source tree first on sys.path, the
editable install's finder removed) that scans when asked on stdin and reports the in-process time
of ``scan()``; the tree (``bench_scan.make_small_tree``), the walk and the order of the pairs are shared.

    git archive <commit> | tar -x -C /tmp/before
    python scripts/bench_rescan_compare.py 100000 /tmp/before . [REPEATS]
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SERVER = r"""
import sys, time, tempfile, os
sys.meta_path = [f for f in sys.meta_path if "editable" not in (getattr(f, "__module__", "") or "").lower()
                 and "editable" not in type(f).__name__.lower() and "editable" not in str(f).lower()]
sys.path.insert(0, os.environ["PYTHONPATH"])
from dsclean.scanning.scanner import scan, ScanOptions
root, report, state = sys.argv[1:4]
import dsclean; print("using", dsclean.__file__, file=sys.stderr)
for line in sys.stdin:
    t0 = time.perf_counter()
    s = scan(root, ScanOptions(dry_run=True, report_dir=report, state_dir=state, progress=False))
    print(time.perf_counter() - t0, s.files, s.cached, flush=True)
"""


def main():
    n, before, after = int(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    sys.path.insert(0, os.path.join(after, "scripts"))
    sys.path.insert(0, os.path.join(after, "tests"))
    import bench_scan

    work = tempfile.mkdtemp(prefix="dsclean-ab-")
    root = os.path.join(work, "tree")
    os.makedirs(root)
    try:
        t0 = time.perf_counter()
        bench_scan.make_small_tree(root, n)
        print(f"generated {n:,} files in {time.perf_counter() - t0:.0f} s")
        procs = {}
        for name, src in (("before", before), ("after", after)):
            rep, st = os.path.join(work, name + "-report"), os.path.join(work, name + "-state")
            env = {**os.environ, "PYTHONPATH": src}
            procs[name] = subprocess.Popen(
                [sys.executable, "-c", SERVER, root, rep, st],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )

        def run(name):
            p = procs[name]
            p.stdin.write("go\n")
            p.stdin.flush()
            t, files, cached = p.stdout.readline().split()
            return float(t), int(files), int(cached)

        for name in procs:  # first scan fills cache/results, second one warms up
            print(name, "first scan", run(name))
            print(name, "warm-up re-scan", run(name))
        times = {"walk": [], "before": [], "after": []}
        for _ in range(repeats):
            t0 = time.perf_counter()
            w = bench_scan.walk_and_stat(root)
            times["walk"].append(time.perf_counter() - t0)
            for name in ("before", "after"):
                t, files, cached = run(name)
                assert files == cached == w == n, (name, files, cached, w)
                times[name].append(t)
        for p in procs.values():
            p.stdin.close()
            p.wait()
    finally:
        shutil.rmtree(work)
    walk = statistics.median(times["walk"])
    print(f"\n| re-scan of an unchanged tree, {n:,} files (median of {repeats}) | files/s | time | vs os.walk+stat |")
    print("|---|---:|---:|---:|")
    print(f"| os.walk + os.stat (baseline) | {n / walk:,.0f} | {walk:.2f} s | 1.00x |")
    for name, label in (
        ("before", "before: main 1bc7cf3 (SQLite lookups)"),
        ("after", "after: branch rescan (previous results in Arrow)"),
    ):
        r = sorted(a / w for a, w in zip(times[name], times["walk"]))
        m = statistics.median(times[name])
        print(
            f"| {label} | {n / m:,.0f} | {m:.2f} s | {statistics.median(r):.2f}x the time (pairs: {r[0]:.2f}x to {r[-1]:.2f}x) |"
        )


main()
