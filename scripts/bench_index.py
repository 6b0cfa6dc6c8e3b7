#!/usr/bin/env python3
"""Benchmark: what `dsclean index` and `IndexedDataset.from_folder` cost now that they check what the scan did not cover.

All times are ratios against a baseline run in the same script on the same tree: a
re-scan answered entirely from the scan cache (a stat and a cache lookup per file).

- index after a scan, nothing to check (every verdict current);
- index after 1% of the files changed since the scan (those are decoded again);
- from_folder's up-to-date test (a stat and a hash per file) when the index is reused;
- index of a never-scanned tree (every file decoded) against a full scan of it.

    python scripts/bench_index.py [--n 20000] [--jobs 2]

``--memory 1000000,3000000``: peak memory (the child's ``ru_maxrss``) and index size of
``dsclean index`` at each size, on a tree of empty files in a tmpfs (``--tmp``; file
creation on this machine's disk costs ~200 us a file) with generated scan results
(every file ``ok``, size and mtime current), so the run measures the build's own
data handling: walk, join with the results, sort, write. ``--old DIR`` runs the same
build with another dsclean source tree too (e.g. ``git archive main | tar -x -C DIR``),
side by side on the same tree.
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


def make_flat_tree(root: str, n: int, classes: int = 1000) -> None:
    """``n`` empty files ``classNNN/img_NNNNNNNNN.jpg`` (26-byte relative paths) in ``classes`` folders."""
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class{c:03d}"), exist_ok=True)
    for i in range(n):
        os.close(
            os.open(os.path.join(root, f"class{i % classes:03d}", f"img_{i:09d}.jpg"), os.O_CREAT | os.O_WRONLY, 0o644)
        )


def write_ok_results(root: str, path: str) -> int:
    """Scan results saying every file under ``root`` is ok (its current size and mtime), streamed per folder."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from dsclean.scanning.results import META_KEY, SCHEMA

    schema = SCHEMA.with_metadata({META_KEY: json.dumps({"root": os.path.abspath(root), "shard": None})})
    rows = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for d in sorted(os.listdir(root)):
            entries = [(f"{d}/{e.name}".encode(), e.stat()) for e in os.scandir(os.path.join(root, d))]
            n = len(entries)
            cols = {f.name: pa.nulls(n, f.type) for f in SCHEMA}
            cols.update(
                path=pa.array([p for p, _ in entries], pa.binary()),
                kind=pa.array(["image"] * n),
                status=pa.array(["ok"] * n),
                format=pa.array(["jpeg"] * n),
                size=pa.array([st.st_size for _, st in entries], pa.int64()),
                mtime_ns=pa.array([st.st_mtime_ns for _, st in entries], pa.int64()),
            )
            w.write_table(pa.table(cols, schema=schema))
            rows += n
    return rows


def run_index(src: str | None, root: str, results: str, out: str) -> tuple[float, float]:
    """``dsclean index`` in a fresh process (this tree's dsclean, or the one in ``src``): (peak RSS MB, seconds)."""
    import subprocess

    code = (
        "import sys\n"
        + (f"sys.path.insert(0, {src!r})\n" if src else "")
        + "import dsclean, dsclean.cli\n"
        + (f"assert dsclean.__file__.startswith({src!r}), dsclean.__file__\n" if src else "")
        + f"sys.exit(dsclean.cli.main(['index', {root!r}, '-o', {out!r}, '--scan-results', {results!r}, '-q']))\n"
    )
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"dsclean index failed ({proc.returncode})")
    return usage.ru_maxrss / 1024, time.perf_counter() - start


def memory(sizes: list[int], tmp: str, old: str | None) -> None:
    import pyarrow as pa

    print(f"dsclean index peak memory; {platform.platform()}, {os.cpu_count()} CPUs; tree in {tmp}")
    print("| rows | variant | peak RSS MB | seconds | index bytes | bytes/row | path bytes/row | index / path bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        work = tempfile.mkdtemp(prefix="dsclean-bench-index-mem-", dir=tmp)
        try:
            root = os.path.join(work, "data")
            make_flat_tree(root, n)
            results = os.path.join(work, "scan_results.parquet")
            write_ok_results(root, results)
            for name, src in (("this branch", None), ("old", old)):
                if name == "old" and not old:
                    continue
                out = os.path.join(work, f"index-{name.replace(' ', '-')}.arrow")
                os.environ["DSCLEAN_STATE_DIR"] = os.path.join(work, "state")
                rss, secs = run_index(src, root, results, out)
                with pa.memory_map(out) as f:
                    batch = pa.ipc.open_file(f).get_batch(0)
                    rows = batch.num_rows
                    path_bytes = batch.column("path").buffers()[2].size
                size = os.path.getsize(out)
                print(
                    f"| {rows:,} | {name} | {rss:.0f} | {secs:.0f} | {size:,} | {size / rows:.1f} | "
                    f"{path_bytes / rows:.1f} | {size / path_bytes:.2f}x |",
                    flush=True,
                )
                os.unlink(out)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--memory", help="comma-separated row counts: peak memory and index size of dsclean index")
    ap.add_argument("--tmp", default="/dev/shm", help="where --memory builds its trees (default: /dev/shm)")
    ap.add_argument("--old", help="--memory: also run the dsclean source tree in this folder")
    args = ap.parse_args()
    if args.memory:
        memory([int(x) for x in args.memory.split(",")], args.tmp, args.old)
        return
    work = tempfile.mkdtemp(prefix="dsclean-bench-index-")
    os.environ["DSCLEAN_STATE_DIR"] = os.path.join(work, "state")
    root, out = os.path.join(work, "data"), os.path.join(work, "i.arrow")
    try:
        make_tree(root, args.n)
        opts = ScanOptions(jobs=args.jobs, progress=False, report_dir=os.path.join(work, "r"))
        scan(root, opts)  # warms the page cache and the worker pool; fills the scan cache
        full_scan = timed(
            lambda: scan(
                root,
                ScanOptions(jobs=args.jobs, progress=False, use_cache=False, report_dir=os.path.join(work, "r-full")),
            )
        )
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
            fulls.append(
                timed(
                    lambda: scan(
                        root,
                        ScanOptions(
                            jobs=args.jobs, progress=False, use_cache=False, report_dir=os.path.join(work, "r-full")
                        ),
                    )
                )
            )
        full_scan, never = min(fulls), min(nevers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.n:,} JPEGs (64x64), --jobs {args.jobs}; {platform.platform()}, {os.cpu_count()} CPUs")
    print(f"baseline: re-scan from the scan cache            {cached_scan:7.2f} s  1.00x")
    for name, t in (
        ("index, every verdict current", current),
        ("index, 1% changed since the scan", one_percent),
        ("from_folder up-to-date test (reuse)", reuse),
    ):
        print(f"{name:<48} {t:7.2f} s  {t / cached_scan:.2f}x")
    print(f"full scan (no cache; best of 3)                  {full_scan:7.2f} s")
    print(f"index of a never-scanned tree (best of 2)        {never:7.2f} s  {never / full_scan:.2f}x of the full scan")


if __name__ == "__main__":
    main()
