#!/usr/bin/env python3
"""Benchmark: what recording quality facts costs the scan, per format (``scan --facts all`` against ``--facts none``).

Same generated files as ``scripts/bench_checkers.py`` (photo-like JPEGs of about 512 x 450, PNGs of
512 x 384, stereo 44.1 kHz 16-bit FLAC and WAV clips of 0.5-1.5 s). For each format, interleaved,
best of --repeats:

- ``checker``: one process calling ``check_file`` on every file with ``CheckOptions(facts=True)``
  and ``facts=False``, inside ``facts.batched()`` as a worker's chunk runs them (JPEG facts 32 at a time;
  a tree without it checks one at a time); the CPU time of the loop alone (process_time: no start-up);
  ``--none-without-hash``: the ``none`` cells also skip the content hash, so "extra" is facts plus hash;
- ``scan``: the whole ``dsclean scan --jobs 1 --rescan --dry-run`` command with ``--facts all`` and
  ``--facts none``: CPU seconds of the process tree (the worker included), start-up included.

The extra time is the ratio all/none - 1 (lower is better); the issue's goal is <= 10% for JPEG.
Since ``--facts none`` also skips the content hash (BLAKE2b-128 of every file's bytes), the extra
includes it (before, both sides hashed).
``--baseline DIR`` also measures the dsclean of another source tree (e.g. ``git archive`` of main unpacked
in DIR), interleaved with this one on the same files: before and after under the same load.

    python scripts/bench_facts.py [--jpeg 1500] [--png 200] [--flac 400] [--wav 400] [--repeats 3] [--baseline DIR]
                                  [--none-without-hash]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_checkers as bc  # noqa: E402  (its generators; it puts the repo and tests/ on sys.path)

PY = sys.executable

LOOP = """
import contextlib, json, os, sys, time
from dsclean.scanning import check, facts as facts_of
from dsclean.scanning.check import CheckOptions, check_file
facts, folder, hashless = sys.argv[1] == "all", sys.argv[2], sys.argv[3] == "1"
names = sorted(os.listdir(folder))
check.load_checkers()
if hashless and not facts:  # what --facts none does once it skips the content hash too
    check.content_hash = lambda data: None
opts = CheckOptions(facts=facts)
check_file(folder, names[0], opts)  # warm: first-use imports
# as a worker's chunk runs them: JPEG facts batched where the tree has it
batch = getattr(facts_of, "batched", contextlib.nullcontext)
t = time.process_time()
with batch():
    verdicts = [check_file(folder, n, opts) for n in names]
statuses = [v.status for v in verdicts]
import dsclean
print(json.dumps({"cpu": time.process_time() - t, "bad": statuses.count("bad"), "module": dsclean.__file__}))
"""


def _env(tree: str) -> dict:
    """The environment that makes a child import dsclean from ``tree`` (children run in a neutral cwd)."""
    return {**os.environ, "PYTHONPATH": tree}


#: set by --none-without-hash: the checker's ``none`` cells skip the content hash as well
HASHLESS_NONE = False


def checker(folder: str, facts: str, tree: str = bc.REPO) -> tuple[float, int]:
    out = subprocess.run(
        [PY, "-c", LOOP, facts, folder, "1" if HASHLESS_NONE else "0"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(tree),
        cwd=os.path.dirname(folder),
    )
    r = json.loads(out.stdout)
    assert r["module"].startswith(tree + os.sep), f"measured {r['module']}, not the tree {tree}"
    return r["cpu"], r["bad"]


def scan(folder: str, facts: str, tree: str = bc.REPO) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as work:
        before = bc._children_cpu()
        out = subprocess.run(
            [
                PY,
                "-m",
                "dsclean",
                "scan",
                folder,
                "--jobs",
                "1",
                "--rescan",
                "--dry-run",
                "--json",
                "--report",
                os.path.join(work, "r"),
                "--state-dir",
                os.path.join(work, "s"),
                "--facts",
                facts,
            ],
            capture_output=True,
            text=True,
            check=True,
            env=_env(tree),
            cwd=work,
        )
        cpu = bc._children_cpu() - before
    return cpu, json.loads(out.stdout)["bad"]


MAKERS = {
    "jpeg": bc.make_jpegs,
    "png": bc.make_pngs,
    "flac": lambda folder, n: bc.make_audio(folder, n, "flac"),
    "wav": lambda folder, n: bc.make_audio(folder, n, "wav"),
}


def bench(fmt: str, n: int, repeats: int, base: str, trees: dict[str, str]) -> list[str]:
    folder = os.path.join(base, fmt)
    os.makedirs(folder)
    MAKERS[fmt](folder, n)
    mb = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) / 1e6
    rows = []
    for what, run in (("checker (loop CPU)", checker), ("dsclean scan --jobs 1 (process tree CPU)", scan)):
        best = {(t, f): float("inf") for t in trees for f in ("none", "all")}
        for _ in range(repeats):
            for label, tree in trees.items():
                for facts in ("none", "all"):  # interleaved, so drifting load hits every cell
                    cpu, bad = run(folder, facts, tree)
                    assert bad == 0, f"{fmt}: {bad} valid files judged bad"
                    best[label, facts] = min(best[label, facts], cpu)
        for label in trees:
            none, all_ = best[label, "none"], best[label, "all"]
            code = f"{label}: " if len(trees) > 1 else ""
            rows.append(
                f"| {fmt.upper()} | {n:,} ({mb:,.0f} MB) | {code}{what} | {none:.2f} | {all_:.2f} | "
                f"{(all_ / none - 1) * 100:+.1f}% | {(all_ - none) / n * 1e6:+,.0f} |"
            )
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jpeg", type=int, default=1500)
    ap.add_argument("--png", type=int, default=200)
    ap.add_argument("--flac", type=int, default=400)
    ap.add_argument("--wav", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", metavar="DIR", help="also measure the dsclean in this source tree, interleaved")
    ap.add_argument(
        "--none-without-hash",
        action="store_true",
        help="checker rows: the --facts none cells skip the content hash too (as --facts none will)",
    )
    args = ap.parse_args()
    global HASHLESS_NONE
    HASHLESS_NONE = args.none_without_hash
    trees = {"baseline": os.path.abspath(args.baseline), "this tree": bc.REPO} if args.baseline else {"": bc.REPO}
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.platform()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print("| format | files | what | CPU s, --facts none | CPU s, --facts all | extra | extra µs per file |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as base:
        for fmt in MAKERS:
            n = getattr(args, fmt)
            if n:
                bench(fmt, n, args.repeats, base, trees)


if __name__ == "__main__":
    main()
