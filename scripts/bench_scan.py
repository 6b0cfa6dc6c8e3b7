#!/usr/bin/env python3
"""Benchmark: dsclean scan against the usual ways of checking JPEGs, on the same files, in one run.

Generates N photo-like JPEGs (~512 px, about 2% damaged: cut short, end marker
missing, or bytes overwritten mid-stream), then times on the same files:

- a single-process loop of ``Image.open(p).load()`` (the usual hand-written check),
- a single-process loop of ``Image.open(p).verify()`` (fast, blind to truncation),
- ``jpeginfo -c`` (C checker from Debian's jpeginfo package; skipped with a note if absent),
- ``dsclean.scan`` at jobs=1 and jobs=2 (dry run),

and reports files/s, MB/s, each one's recall on the damaged files and false alarms
on the good ones. Ratios are against the load() loop measured in the same run.

    python scripts/bench_scan.py [--n 2000] [--size 512] [--corrupt 0.02] [--seed 0]
"""
from __future__ import annotations

import argparse
import io
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from dsclean import iter_verdicts, synth  # noqa: E402
from dsclean.scanner import ScanOptions, scan  # noqa: E402


def make_dataset(folder: str, n: int, size: int, corrupt: float, seed: int) -> set[str]:
    """Write n JPEGs into 10 class folders; returns the relative paths of the damaged ones."""
    rng = np.random.default_rng(seed)
    bases = [synth.photo_like(size * 2, size * 2, seed=seed + i) for i in range(8)]
    damaged = set(rng.choice(n, size=max(1, round(n * corrupt)), replace=False).tolist())
    bad_paths = set()
    for i in range(n):
        base = bases[i % len(bases)]
        x, y = (int(v) for v in rng.integers(0, size, 2))
        img = base.crop((x, y, x + size, y + size - int(rng.integers(0, size // 4))))
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=int(rng.integers(75, 96)), progressive=bool(rng.random() < 0.2))
        data = buf.getvalue()
        rel = f"class{i % 10}/img{i:06d}.jpg"
        if i in damaged:
            kind = i % 3
            if kind == 0:
                data = synth.truncate(data, float(rng.uniform(0.2, 0.95)))
            elif kind == 1:
                data = data[:-2]  # only the end marker missing
            else:
                data = synth.overwrite(data, at=float(rng.uniform(0.3, 0.8)), length=int(rng.integers(8, 64)), seed=i)
            bad_paths.add(rel)
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return bad_paths


def pillow_loop(folder: str, paths: list[str], method: str) -> set[str]:
    flagged = set()
    for rel in paths:
        try:
            with Image.open(os.path.join(folder, rel)) as im:
                getattr(im, method)()
        except Exception:
            flagged.add(rel)
    return flagged


def jpeginfo(folder: str, paths: list[str]) -> set[str] | None:
    exe = shutil.which("jpeginfo")
    if exe is None:
        return None
    flagged = set()
    for start in range(0, len(paths), 500):  # one process per 500 files, like xargs
        batch = paths[start : start + 500]
        out = subprocess.run([exe, "-c", *batch], cwd=folder, capture_output=True, text=True).stdout
        for line in out.splitlines():  # "<path>  512 x 439 24bit N JFIF  17004 OK" or "... WARNING/ERROR ..."
            if line.strip() and not line.rstrip().endswith("OK"):
                flagged.add(next((p for p in batch if line.startswith(p + " ")), line))
    return flagged


def dsclean_scan(folder: str, jobs: int) -> set[str]:
    with tempfile.TemporaryDirectory() as report:
        scan(folder, ScanOptions(jobs=jobs, dry_run=True, report_dir=report, progress=False))
        return {v.path for v in iter_verdicts(report) if v.status == "bad"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--corrupt", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", help="where to generate (default: a temp folder, removed afterwards)")
    args = ap.parse_args()

    folder = args.dir or tempfile.mkdtemp(prefix="dsclean-bench-")
    t0 = time.perf_counter()
    bad = make_dataset(folder, args.n, args.size, args.corrupt, args.seed)
    paths = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)
    total_mb = sum(os.path.getsize(os.path.join(folder, p)) for p in paths) / 1e6
    print(f"generated {len(paths)} JPEGs ({total_mb:.1f} MB, {len(bad)} damaged) in {time.perf_counter() - t0:.0f} s")
    pillow_loop(folder, paths, "verify")  # warm the page cache so every contender reads from memory

    contenders = [
        ("Image.open(p).load() loop, 1 process", lambda: pillow_loop(folder, paths, "load"), 1),
        ("Image.open(p).verify() loop, 1 process", lambda: pillow_loop(folder, paths, "verify"), 1),
        ("jpeginfo -c", lambda: jpeginfo(folder, paths), 1),
        ("dsclean scan --jobs 1", lambda: dsclean_scan(folder, 1), 1),
        ("dsclean scan --jobs 2", lambda: dsclean_scan(folder, 2), 2),
    ]
    rows = []
    for name, fn, cores in contenders:
        start = time.perf_counter()
        flagged = fn()
        elapsed = time.perf_counter() - start
        if flagged is None:
            rows.append((name, None))
            continue
        recall = len(flagged & bad) / len(bad)
        rows.append((name, (len(paths) / elapsed, total_mb / elapsed, cores, recall, len(flagged - bad), elapsed)))

    base = rows[0][1][0]
    print()
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: python scripts/bench_scan.py --n {args.n} --size {args.size} --corrupt {args.corrupt} --seed {args.seed}")
    print()
    print("| checker | files/s | MB/s | files/s per core | vs load() loop | recall on damaged | false alarms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        if r is None:
            print(f"| {name} | not installed (apt-get install jpeginfo) | | | | | |")
            continue
        fps, mbps, cores, recall, false_alarms, _ = r
        print(f"| {name} | {fps:,.0f} | {mbps:,.1f} | {fps / cores:,.0f} | {fps / base:.2f}x | "
              f"{recall:.0%} ({round(recall * len(bad))}/{len(bad)}) | {false_alarms} |")
    if not args.dir:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
