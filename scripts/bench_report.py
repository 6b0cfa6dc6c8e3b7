#!/usr/bin/env python3
"""Benchmark: the HTML report of a 1M-file scan with 50k problems: size, generation time, load time.

Builds a generated results table (``tests/support/resultsgen.py``: every facts
column, imbalanced classes, 1% exact copies, 50k bad/warn rows over six
reasons), and a tree where every row's path exists: hard links to a small pool
of real media (detailed 640x480 JPEGs, cut and damaged variants, WAVs), so
every thumbnail the report makes is a real decode in its worker pool. Then:

- generation: ``dsclean report`` (a subprocess, as a user runs it), with and
  without thumbnails, against a baseline of reading the results table with pyarrow;
- size of the HTML file against the 25 MB target;
- load: the load event in headless Chromium (Debian's, through Playwright),
  median of fresh page loads, against a baseline page of the same number of
  bytes that is one inert text blob (what delivering and parsing the bytes costs).

    python scripts/bench_report.py [--rows 1000000] [--problems 50000] [--loads 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # tests/support: media synthesis, results tables, the browser
import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from support import synth  # noqa: E402
from support.browser import chromium, unavailable  # noqa: E402
from support.resultsgen import synthetic_results  # noqa: E402

SIZE_TARGET = 25e6
LOAD_TARGET = 3.0


def detailed_jpeg(seed: int) -> bytes:
    """A 640x480 JPEG (~75 kB) with photo-like detail at a few pixels' scale, which survives downscaling:
    its thumbnail compresses like a real photo's (a smooth synthetic picture would flatter the size)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    base = np.asarray(synth.photo_like(640, 480, seed=seed)).astype(np.float32)
    small = (rng.normal(0, 50, (80, 107, 3)) + 128).clip(0, 255).astype(np.uint8)
    texture = np.asarray(Image.fromarray(small).resize((640, 480), Image.Resampling.BILINEAR)).astype(np.float32) - 128
    return synth.encode_image(Image.fromarray(np.clip(base + texture, 0, 255).astype(np.uint8)), "JPEG", quality=88)


def make_pool(folder: str) -> dict[str, list[str]]:
    """A few real files per kind of row; the tree's files are hard links to these."""
    os.makedirs(folder)
    pool: dict[str, list[str]] = {k: [] for k in ("ok", "truncated", "corrupt", "not_media", "empty", "wav")}

    def put(kind: str, name: str, data: bytes) -> None:
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(data)
        pool[kind].append(path)

    for s in range(24):
        jpg = detailed_jpeg(s)
        put("ok", f"ok{s}.jpg", jpg)
        put("truncated", f"cut{s}.jpg", synth.truncate(jpg, 0.3 + 0.025 * s))
        put("corrupt", f"bad{s}.jpg", synth.overwrite(jpg, at=0.5, length=64, seed=s))
    put("not_media", "page.jpg", synth.HTML_PAGE)
    put("empty", "empty.jpg", b"")
    for s in range(4):
        put("wav", f"tone{s}.wav", synth.encode_audio(synth.tone(3.0, 16_000, 1, seed=s), 16_000, "WAV"))
    return pool


def link_tree(root: str, table, pool: dict[str, list[str]]) -> None:
    """Every row's path, as a hard link to a pool file that matches its reason and kind."""
    paths = table["path"].to_pylist()
    reasons = table["reason"].to_pylist()
    kinds = table["kind"].to_pylist()
    made = set()
    rootb = os.fsencode(root)
    for i, (rel, reason, kind) in enumerate(zip(paths, reasons, kinds)):
        if kind == "audio":
            src = pool["wav"][i % len(pool["wav"])]
        else:
            src = pool.get(reason or "ok", pool["ok"])[i % len(pool.get(reason or "ok", pool["ok"]))]
        dst = os.path.join(rootb, rel)
        folder = os.path.dirname(dst)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        os.link(src, dst)


def run_report(target: str, out: str, *extra: str) -> tuple[float, float, float]:
    """(seconds, peak RSS in MB of the report process, of its largest thumbnail worker) for one `dsclean report`.

    RSS is sampled every 0.1 s with psutil (rusage would also count the brief fork-before-exec copies
    that starting worker processes makes).
    """
    import psutil

    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "dsclean", "report", target, "-o", out, "-q", *extra])
    main_rss = worker_rss = 0
    me = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            main_rss = max(main_rss, me.memory_info().rss)
            for child in me.children(recursive=True):
                if "LokyProcess" in " ".join(child.cmdline()):
                    worker_rss = max(worker_rss, child.memory_info().rss)
        except psutil.Error:
            pass
        time.sleep(0.1)
    if proc.returncode:
        raise SystemExit(f"dsclean report failed with exit code {proc.returncode}")
    return time.perf_counter() - start, main_rss / 2**20, worker_rss / 2**20


def load_times(context, path: str, loads: int) -> tuple[list[float], list[float], list[str]]:
    """Load-event and DOMContentLoaded times (s) of fresh page loads, and any console errors."""
    load, dom, errors = [], [], []
    for _ in range(loads):
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto("file://" + path, wait_until="load", timeout=120_000)
        nav = page.evaluate(
            "(() => { const n = performance.getEntriesByType('navigation')[0];"
            " return [n.loadEventEnd, n.domContentLoadedEventEnd]; })()"
        )
        load.append(nav[0] / 1000)
        dom.append(nav[1] / 1000)
        page.close()
    return load, dom, errors


def bytes_baseline(report: str, out: str) -> None:
    """A page of the same byte size whose bulk is an inert text blob: what delivering and parsing that
    many bytes of HTML costs, with nothing to lay out, decode or run."""
    size = os.path.getsize(report)
    line = "abcdefghij klmnopqrst uvwxyz 0123456789 " * 2 + "\n"
    with open(out, "w", encoding="utf-8") as f:
        f.write(
            '<!DOCTYPE html><html><head><meta charset="utf-8"><title>baseline</title></head><body><p>baseline</p>'
            '<script type="text/plain">'
        )
        f.write(line * (size // len(line)))
        f.write("</script></body></html>")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--problems", type=int, default=50_000)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--keep", help="build in this folder and keep it (default: a temp folder, removed)")
    ap.add_argument("--jobs", type=int, default=0, help="thumbnail workers (default: usable cores)")
    args = ap.parse_args()
    why = unavailable()
    if why:
        sys.exit(f"bench_report: {why}")
    work = args.keep or tempfile.mkdtemp(prefix="dsclean-bench-report-")
    os.makedirs(work, exist_ok=True)
    root, results = os.path.join(work, "data"), os.path.join(work, "results", "scan_results.parquet")
    try:
        t = time.perf_counter()
        table = synthetic_results(results, root, args.rows, args.problems)
        pool = make_pool(os.path.join(work, "pool"))
        link_tree(root, table, pool)
        del table
        print(
            f"setup: {args.rows:,} rows, {args.problems:,} problems, tree of hard links in {time.perf_counter() - t:.0f} s",
            flush=True,
        )

        t = time.perf_counter()
        pq.read_table(results)
        read_s = time.perf_counter() - t
        plain = os.path.join(work, "report-no-thumbnails.html")
        jobs = ("--jobs", str(args.jobs)) if args.jobs else ()
        plain_s, plain_mb, _ = run_report(os.path.dirname(results), plain, "--no-thumbnails", *jobs)
        full = os.path.join(work, "report.html")
        full_s, full_mb, worker_mb = run_report(os.path.dirname(results), full, *jobs)
        html = open(full, encoding="utf-8").read()
        thumbs = html.count('<img src="data:image/')
        thumb_bytes = sum(len(p.split('"', 1)[0]) for p in html.split('<img src="data:image/')[1:])
        size, plain_size = os.path.getsize(full), os.path.getsize(plain)

        baseline = os.path.join(work, "baseline.html")
        bytes_baseline(full, baseline)
        with chromium() as context:
            load_times(context, baseline, 1)  # warm the browser once
            base_load, base_dom, _ = load_times(context, baseline, args.loads)
            load, dom, errors = load_times(context, full, args.loads)
            plain_load, plain_dom, _ = load_times(context, plain, args.loads)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print("\n| step | time | vs reading the table |\n|---|---:|---:|")
    print(f"| pyarrow.parquet.read_table (baseline) | {read_s:.1f} s | 1.0x |")
    print(f"| dsclean report --no-thumbnails | {plain_s:.1f} s | {plain_s / read_s:.1f}x |")
    print(f"| dsclean report (with {thumbs:,} thumbnails) | {full_s:.1f} s | {full_s / read_s:.1f}x |")
    print(
        f"\npeak RSS: report process {plain_mb:,.0f} MB without thumbnails, {full_mb:,.0f} MB with; "
        f"largest thumbnail worker {worker_mb:,.0f} MB"
    )
    print(
        f"report size: {size / 1e6:.1f} MB ({'within' if size <= SIZE_TARGET else 'OVER'} the 25 MB target); "
        f"thumbnails {thumbs:,} = {thumb_bytes / 1e6:.1f} MB of base64 (mean {thumb_bytes / max(1, thumbs) / 1e3:.1f} kB); "
        f"without thumbnails {plain_size / 1e6:.1f} MB"
    )
    print(
        f"\n| page ({args.loads} fresh loads, median) | load event | DOMContentLoaded | vs inert page of the same size |"
    )
    print("|---|---:|---:|---:|")
    print(f"| inert text blob, same bytes (baseline) | {med(base_load):.2f} s | {med(base_dom):.2f} s | 1.0x |")
    print(
        f"| report, no thumbnails | {med(plain_load):.2f} s | {med(plain_dom):.2f} s | {med(plain_load) / med(base_load):.1f}x |"
    )
    print(f"| report | {med(load):.2f} s | {med(dom):.2f} s | {med(load) / med(base_load):.1f}x |")
    print(
        f"\nload event of the report: min {min(load):.2f} s, max {max(load):.2f} s "
        f"({'within' if med(load) <= LOAD_TARGET else 'OVER'} the 3 s target); console errors: {len(errors)}"
    )


if __name__ == "__main__":
    main()
