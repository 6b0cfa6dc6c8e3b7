#!/usr/bin/env python3
"""Benchmark: what one crashing (or hanging) file costs a scan of a big tree of tiny files.

Makes N tiny JPEGs (folders of 1,000) with one culprit in the middle, named with the test-only fault
markers (``__segfault__`` / ``__hang__``, active only with DSCLEAN_TEST_FAULTS=1, see
dsclean.scanning.worker), and runs a whole ``dsclean.scan`` (2 jobs, ``--facts none``, no scan cache,
dry run) of the tree in a fresh Python process per run, for each source tree given (``--before``: an
earlier dsclean, through PYTHONPATH), interleaved: with the fault switch on (the culprit segfaults or
hangs) and off (the same tree, every file checked normally). Reports wall time, the extra wall time
the culprit cost, and the processes the scan's process started (pool workers and fresh isolation
processes: every ``multiprocessing`` process start, counted in that process), plus the culprit's verdict.

    python scripts/bench_isolation.py [--n 200000] [--fault segfault|hang] [--timeout 2] [--rounds 3]
        [--dir /dev/shm] [--before /tmp/base]

``--tail``: instead, the end of a scan by task size (what a larger task risks): ``run_checks`` of N tiny
files with 2 workers in this process, tasks of 1,024 or 4,096 files, the last chunk alone cut in 4 (c56bf12's
rule) or this tree's rule; reports the gap between the last two task completions (a worker idle while
the other finishes) and the wall time, interleaved.

    python scripts/bench_isolation.py --tail [--n 50000] [--rounds 3] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support: media synthesis
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_scan import make_small_tree  # noqa: E402  (the same tiny-file tree as the main-process benchmark)
from support import synth  # noqa: E402

_RUN = """
import json, multiprocessing.process, sys, tempfile, time
import dsclean, dsclean.scanning.check
started = [0]
real = multiprocessing.process.BaseProcess.start
def start(self):
    started[0] += 1
    return real(self)
multiprocessing.process.BaseProcess.start = start
root, culprit, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
with tempfile.TemporaryDirectory() as report:
    t = time.perf_counter()
    check = dsclean.scanning.check.CheckOptions(facts=False, timeout=timeout)
    s = dsclean.scan(root, dsclean.ScanOptions(jobs=2, check=check, use_cache=False, dry_run=True, report_dir=report))
    wall = time.perf_counter() - t
    v = [v for v in dsclean.iter_verdicts(report) if v.path == culprit]
print(json.dumps({"wall": wall, "processes": started[0], "files": s.files,
                  "verdict": f"{v[0].status}/{v[0].reason}" if v else "ok"}))
"""


def make_tree(folder: str, n: int, culprit: str) -> None:
    """n tiny valid JPEGs (unique bytes) in folders of 1,000; the file at ``culprit`` is one of them."""
    make_small_tree(folder, n)
    os.rename(os.path.join(folder, f"d{n // 2 // 1000:04d}", f"f{n // 2:07d}.jpg"), os.path.join(folder, culprit))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--fault", choices=("segfault", "hang"), default="segfault")
    ap.add_argument("--timeout", type=float, default=2.0, help="the scan's --timeout (what a hanging file meets)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", help="where to make the tree (e.g. /dev/shm)")
    ap.add_argument("--before", help="the source tree of an earlier dsclean, measured side by side")
    ap.add_argument("--tail", action="store_true", help="measure the end of a scan by task size instead (see above)")
    args = ap.parse_args()
    if args.tail:
        tail_gap(args.n, args.rounds, args.dir)
        return
    here = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    versions = {"before": args.before, "after": here} if args.before else {"this tree": here}
    folder = tempfile.mkdtemp(prefix="dsclean-isolation-", dir=args.dir)
    culprit = f"d{args.n // 2 // 1000:04d}/x__{args.fault}__.jpg"
    try:
        make_tree(folder, args.n, culprit)
        runs: dict[tuple[str, bool], list[dict]] = {}
        for _ in range(args.rounds):
            for version, src in versions.items():
                for fault in (True, False):
                    env = {**os.environ, "PYTHONPATH": src}
                    env.pop("DSCLEAN_TEST_FAULTS", None)
                    if fault:
                        env["DSCLEAN_TEST_FAULTS"] = "1"
                    out = subprocess.run(
                        [sys.executable, "-c", _RUN, folder, culprit, str(args.timeout)],
                        cwd="/",
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    runs.setdefault((version, fault), []).append(eval_json(out.stdout))
        print(
            f"\n| {args.n:,} tiny JPEGs, one `__{args.fault}__` file, scan --jobs 2 --facts none --timeout "
            f"{args.timeout:g} (median of {args.rounds}) | wall s | extra wall s for the culprit | processes started | "
            "culprit's verdict |"
        )
        print("|---|---:|---:|---:|---|")
        for version in versions:
            bad, good = runs[(version, True)], runs[(version, False)]
            wall_bad, wall_good = statistics.median(r["wall"] for r in bad), statistics.median(r["wall"] for r in good)
            walls_good, walls_bad = (", ".join(f"{r['wall']:.2f}" for r in rs) for rs in (good, bad))
            print(
                f"| {version}, fault switch off | {wall_good:.2f} ({walls_good}) | | "
                f"{statistics.median(r['processes'] for r in good):.0f} | {good[0]['verdict']} |"
            )
            print(
                f"| {version}, the culprit {args.fault}s | {wall_bad:.2f} ({walls_bad}) "
                f"| {wall_bad - wall_good:.2f} | {statistics.median(r['processes'] for r in bad):.0f} | "
                f"{bad[0]['verdict']} |"
            )
    finally:
        shutil.rmtree(folder)


def _old_last_split(chunks, pieces):
    """c56bf12's rule: the chunks as they come, the last one alone cut into ``pieces``."""
    held = next(chunks, None)
    for chunk in chunks:
        yield held
        held = chunk
    if held is None:
        return
    size = -(-len(held) // pieces)
    for start in range(0, len(held), size):
        yield held[start : start + size]


def tail_gap(n: int, rounds: int, where: str | None) -> None:
    """The gap between the last two task completions of ``run_checks`` (2 workers) by task size and last-split rule."""
    import time

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from dsclean.scanning import executors
    from dsclean.scanning.check import CheckOptions

    folder = tempfile.mkdtemp(prefix="dsclean-tail-", dir=where)
    try:
        data = synth.jpeg(16, 16)
        rels = [f"f{i:07d}.jpg" for i in range(n)]
        for i, rel in enumerate(rels):
            with open(os.path.join(folder, rel), "wb") as f:
                f.write(data + i.to_bytes(4, "big"))
        new = executors._last_split
        variants = (
            ("1,024, the last chunk in 4", 1024, _old_last_split),
            ("4,096, the last chunk in 4", 4096, _old_last_split),
            ("4,096, this tree's rule", 4096, new),
        )
        res: dict[str, list[tuple[float, float, int]]] = {}
        for _ in range(rounds):
            for name, size, split in variants:
                executors._last_split = split
                t0 = time.perf_counter()
                times = [
                    time.perf_counter()
                    for _ in executors.run_checks(
                        folder,
                        [rels[i : i + size] for i in range(0, n, size)],
                        CheckOptions(facts=False),
                        2,
                        "processes",
                    )
                ]
                res.setdefault(name, []).append((times[-1] - times[-2], times[-1] - t0, len(times)))
        executors._last_split = new
        executors.stop_local_workers()
        print(
            f"\n| {n:,} tiny JPEGs, 2 workers, `run_checks` (median of {rounds}) | gap between the last two "
            "tasks, ms | wall s | tasks |"
        )
        print("|---|---:|---:|---:|")
        for name, xs in res.items():
            gaps, walls = (
                ", ".join(f"{x:.0f}" for x in (r[0] * 1000 for r in xs)),
                ", ".join(f"{r[1]:.2f}" for r in xs),
            )
            print(
                f"| {name} | {statistics.median(r[0] for r in xs) * 1000:.0f} ({gaps}) | "
                f"{statistics.median(r[1] for r in xs):.2f} ({walls}) | {xs[0][2]} |"
            )
    finally:
        shutil.rmtree(folder)


def eval_json(text: str) -> dict:
    import json

    return json.loads(text.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
