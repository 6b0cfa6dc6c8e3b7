#!/usr/bin/env python3
"""Benchmark checking samples inside other tools' WebDataset tars against the same samples as files on disk.

    python scripts/bench_foreign_shards.py [--n 3000] [--size 192] [--per-shard 250] [--repeats 3] [--jobs 1]
                                           [--sidecars] [--slope] [--before DIR] [--instructions]

The same JPEGs are written as files (a folder, what ``dsclean scan ROOT`` checks) and as WebDataset tars
written by ``webdataset.TarWriter`` (a .jpg, .json and .txt per sample, img2dataset's layout). Each is checked
by the command, ``dsclean scan FILES --rescan --jobs J`` against ``dsclean scan TARS --jobs J`` (the same
checker and options, facts on), in a process of its own, interleaved, ``--repeats`` times. Reported per side:

- **CPU time of the whole process tree** (the command, its workers' forkserver and its workers:
  ``resource.getrusage(RUSAGE_CHILDREN)`` around the command, which waits for its workers): what the work
  costs, whatever else the machine runs; the best of the repeats, and samples per CPU-second;
- wall time (best of the repeats): what a user waits for, on a quiet machine only;
- ``--instructions``: the instructions of the whole tree under ``valgrind --tool=callgrind
  --trace-children=yes`` (one run each; slow: ~1 min per 1,000 samples), repeatable on a loaded machine.

The figure is the ratio tars / files of samples per CPU-second (per core: ``--jobs 1``); the target >= 0.9.
``--slope``: also run N/4 samples and report the ratio of the per-sample slopes between N/4 and N (start-up
left out). ``--before DIR``: the same runs with the ``dsclean`` package in DIR (e.g. ``git archive main dsclean |
tar -x -C DIR``), interleaved with this checkout's: before and after in one run.

``--sidecars``: the folder holds each sample's .json and .txt beside its .jpg too (img2dataset's ``files`` output
layout: the same three members a tar sample has), listed by the folder scan and passed over as non-media; without
it the folder holds the JPEGs alone.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tests"))  # tests/support: media synthesis


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


def command(target: str, jobs: int, state: str, files: bool) -> list[str]:
    argv = [sys.executable, "-m", "dsclean", "scan", target, "--jobs", str(jobs), "--state-dir", state, "--quiet"]
    return argv + (["--rescan"] if files else [])


def child_env(code: str) -> dict[str, str]:
    """The command's environment: ``code``'s dsclean imported, its bytecode cached (PYTHONDONTWRITEBYTECODE
    would have every process of every run compile dsclean's modules from source: the shard path imports more)."""
    env = dict(os.environ, PYTHONPATH=code)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_once(code: str, target: str, jobs: int, files: bool) -> tuple[float, float]:
    """CPU seconds of the whole process tree and wall seconds of one ``dsclean scan``."""
    state = tempfile.mkdtemp(prefix="bench-foreign-state-")
    denylist = os.path.join(target, "denylist.jsonl")
    if os.path.exists(denylist):
        os.unlink(denylist)  # an earlier run's (none expected: no sample is bad)
    env = child_env(code)
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        p = subprocess.run(command(target, jobs, state, files), env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    if p.returncode != 0:
        raise SystemExit(f"{target}: dsclean scan exited {p.returncode}: {p.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def instructions(code: str, target: str, jobs: int, files: bool) -> int:
    """Instructions of the whole process tree of one ``dsclean scan`` (callgrind, children traced)."""
    out = tempfile.mkdtemp(prefix="bench-foreign-cg-")
    state = tempfile.mkdtemp(prefix="bench-foreign-state-")
    env = child_env(code)
    try:
        argv = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}/cg.%p"]
        subprocess.run(argv + command(target, jobs, state, files), env=env, capture_output=True, check=True)
        total = 0
        for path in glob.glob(os.path.join(out, "cg.*")):
            with open(path, errors="replace") as f:
                for line in f:
                    if line.startswith(("summary:", "totals:")):
                        total += int(line.split()[1])
                        break
        return total
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--size", type=int, default=192)
    ap.add_argument("--per-shard", type=int, default=250)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--sidecars", action="store_true", help="a .json and a .txt beside each file (as in the tars)")
    ap.add_argument("--slope", action="store_true", help="also N/4 samples: the ratio of per-sample slopes")
    ap.add_argument("--before", metavar="DIR", help="a folder holding another dsclean package, run interleaved")
    ap.add_argument("--instructions", action="store_true", help="also count instructions (callgrind; slow)")
    args = ap.parse_args()

    codes = {"after": HERE} if not args.before else {"before": os.path.abspath(args.before), "after": HERE}
    sizes = [args.n // 4, args.n] if args.slope else [args.n]
    tmp = tempfile.mkdtemp(prefix="bench-foreign-")
    try:
        data = {n: make(os.path.join(tmp, str(n)), n, args.size, args.per_shard, args.sidecars) for n in sizes}
        cpu: dict[tuple, list[float]] = {}
        wall: dict[tuple, list[float]] = {}
        for code in codes.values():  # a first run of each, not counted: bytecode written, files in the page cache
            for side, target in zip(("files", "tars"), data[sizes[0]]):
                run_once(code, target, args.jobs, side == "files")
        for _ in range(args.repeats):
            for n in sizes:
                for code_name, code in codes.items():
                    for side, target in zip(("files", "tars"), data[n]):
                        c, w = run_once(code, target, args.jobs, side == "files")
                        cpu.setdefault((code_name, n, side), []).append(c)
                        wall.setdefault((code_name, n, side), []).append(w)
        layout = "with their .json and .txt sidecars" if args.sidecars else "alone"
        print(f"{args.n} JPEGs {args.size}x{args.size} (files {layout}), dsclean scan --jobs {args.jobs}, ", end="")
        print(f"{args.repeats} runs each, interleaved; load average {os.getloadavg()[0]:.1f}")
        for code_name in codes:
            for n in sizes:
                c = {side: min(cpu[(code_name, n, side)]) for side in ("files", "tars")}
                w = {side: min(wall[(code_name, n, side)]) for side in ("files", "tars")}
                med = statistics.median(
                    f / t for f, t in zip(cpu[(code_name, n, "files")], cpu[(code_name, n, "tars")])
                )
                print(
                    f"  {code_name:6s} N={n:<6d} CPU s (process tree) files {c['files']:.2f} tars {c['tars']:.2f}"
                    f"  samples/CPU-s {n / c['files']:.0f} / {n / c['tars']:.0f}  **tars/files {c['files'] / c['tars']:.2f}x**"
                    f" (median of runs {med:.2f}x)  wall s {w['files']:.2f} / {w['tars']:.2f}"
                    f" ({w['files'] / w['tars']:.2f}x)"
                )
            if args.slope:
                lo, hi = sizes
                slope = {
                    side: (min(cpu[(code_name, hi, side)]) - min(cpu[(code_name, lo, side)])) / (hi - lo)
                    for side in ("files", "tars")
                }
                print(
                    f"  {code_name:6s} slope {lo}->{hi}: CPU us a sample files {slope['files'] * 1e6:.0f} "
                    f"tars {slope['tars'] * 1e6:.0f}  tars/files {slope['files'] / slope['tars']:.2f}x"
                )
            if args.instructions:
                counts = {
                    (n, side): instructions(codes[code_name], target, args.jobs, side == "files")
                    for n in sizes
                    for side, target in zip(("files", "tars"), data[n])
                }
                for n in sizes:
                    f, t = counts[(n, "files")], counts[(n, "tars")]
                    print(
                        f"  {code_name:6s} N={n:<6d} instructions files {f / 1e9:.3f}G tars {t / 1e9:.3f}G  tars/files {f / t:.2f}x"
                    )
                if args.slope:
                    lo, hi = sizes
                    f = (counts[(hi, "files")] - counts[(lo, "files")]) / (hi - lo)
                    t = (counts[(hi, "tars")] - counts[(lo, "tars")]) / (hi - lo)
                    print(
                        f"  {code_name:6s} slope {lo}->{hi}: instructions a sample files {f / 1e3:.0f}K tars {t / 1e3:.0f}K  tars/files {f / t:.2f}x"
                    )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
