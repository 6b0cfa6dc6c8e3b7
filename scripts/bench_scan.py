#!/usr/bin/env python3
"""Benchmark: dsclean scan against the usual ways of checking JPEGs, on the same files, in one run.

Generates N photo-like JPEGs (~512 px, about 2% damaged: cut short, end marker
missing, or bytes overwritten mid-stream), then times on the same files:

- a single-process loop of ``Image.open(p).load()`` (the usual hand-written check),
- a single-process loop of ``Image.open(p).verify()`` (fast, blind to truncation),
- ``jpeginfo -c`` (C checker from Debian's jpeginfo package; skipped with a note if absent),
- ``dsclean.scan`` at jobs=1 and jobs=2 (dry run),

and reports files/s, MB/s, each one's recall on the damaged files and false alarms
on the good ones (best of two runs each; dsclean's worker pool is started before the
clock, as it is once per scan of millions of files). Ratios are against the load()
loop measured in the same run.

Then re-scans an unchanged tree of --rescan files (default 100,000) and times it
side by side with a bare os.walk + os.stat of the same tree (the scan cache at work).

    python scripts/bench_scan.py [--n 2000] [--size 512] [--corrupt 0.02] [--seed 0] [--rescan 100000]
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
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support: media synthesis
from support import synth  # noqa: E402

from dsclean import iter_verdicts
from dsclean.scanning.scanner import ScanOptions, scan  # noqa: E402


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
    """A full check of every file (the scan cache is off: nothing may be re-used between contenders)."""
    with tempfile.TemporaryDirectory() as report:
        scan(folder, ScanOptions(jobs=jobs, dry_run=True, report_dir=report, progress=False, use_cache=False))
        return {v.path for v in iter_verdicts(report) if v.status == "bad"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--corrupt", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", help="where to generate (default: a temp folder, removed afterwards)")
    ap.add_argument(
        "--rescan",
        type=int,
        default=100_000,
        metavar="N",
        help="also time a re-scan of an unchanged N-file tree against os.walk+stat (0 = skip)",
    )
    ap.add_argument("--only-rescan", action="store_true", help="run only the re-scan benchmark")
    ap.add_argument(
        "--only-main",
        action="store_true",
        help="run only the main-process cost per file of --pipeline (with --tiny, --before, --rounds)",
    )
    ap.add_argument(
        "--pipeline",
        action="store_true",
        help="run only the scan-pipeline benchmarks (docs/benchmarks-history.md, The scan pipeline): whole processes against "
        "jpeginfo, main-process cost per file, worker system calls per file",
    )
    ap.add_argument(
        "--before",
        metavar="SRC",
        help="with --pipeline, --only-main or --only-rescan: a source tree of an earlier dsclean, measured side by side (PYTHONPATH)",
    )
    ap.add_argument("--rounds", type=int, default=5, help="with --pipeline: interleaved rounds (medians reported)")
    ap.add_argument("--tiny", type=int, default=100_000, help="with --pipeline: tiny files for the main-process cost")
    ap.add_argument(
        "--facts-none",
        action="store_true",
        help="with --pipeline: scan 'after' with --facts none (no quality facts: the integrity check alone)",
    )
    ap.add_argument(
        "--before-facts-none",
        action="store_true",
        help="with --pipeline --facts-none --before: scan 'before' with --facts none too",
    )
    ap.add_argument(
        "--whole-only",
        action="store_true",
        help="with --pipeline: only the whole-process table (no main-process cost, no system calls)",
    )
    ap.add_argument(
        "--bar-only",
        action="store_true",
        help="with --only-main: only the bar's options (--facts none, scan cache on), e.g. at 1M files",
    )
    ap.add_argument(
        "--tiny-dir",
        metavar="DIR",
        help="with --only-main: make the tiny files under DIR (e.g. /dev/shm; removed afterwards)",
    )
    ap.add_argument(
        "--source-only",
        action="store_true",
        help="with --pipeline: do not compile dsclean's bytecode first (as with PYTHONDONTWRITEBYTECODE=1 "
        "and an editable install: every process compiles dsclean's modules from source)",
    )
    ap.add_argument(
        "--startup",
        action="store_true",
        help="only the fixed cost: whole `scan --jobs 1 --facts none` of a one-file tree per format "
        "(WAV, FLAC, JPEG), --rounds interleaved rounds, with --before side by side",
    )
    args = ap.parse_args()
    if args.startup:
        startup_benchmark(args)
        return
    if args.only_rescan:
        rescan_benchmark(args.rescan, before=args.before)
        return
    if args.only_main:
        versions = {"before": os.path.abspath(args.before), "after": None} if args.before else {"after": None}
        print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at start: {os.getloadavg()}")
        main_process_cost(args.tiny, versions, args.rounds, args.facts_none, args.bar_only, args.tiny_dir)
        print(f"load average at the end: {os.getloadavg()}")
        return
    if args.pipeline:
        pipeline_benchmark(args)
        return

    folder = args.dir or tempfile.mkdtemp(prefix="dsclean-bench-")
    t0 = time.perf_counter()
    bad = make_dataset(folder, args.n, args.size, args.corrupt, args.seed)
    paths = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)
    total_mb = sum(os.path.getsize(os.path.join(folder, p)) for p in paths) / 1e6
    print(f"generated {len(paths)} JPEGs ({total_mb:.1f} MB, {len(bad)} damaged) in {time.perf_counter() - t0:.0f} s")
    pillow_loop(folder, paths, "verify")  # warm the page cache so every contender reads from memory

    warm = os.path.join(folder, "class0")
    contenders = [
        ("Image.open(p).load() loop, 1 process", lambda: pillow_loop(folder, paths, "load"), 1, None),
        ("Image.open(p).verify() loop, 1 process", lambda: pillow_loop(folder, paths, "verify"), 1, None),
        ("jpeginfo -c", lambda: jpeginfo(folder, paths), 1, None),
        # warm-up: the worker pool is started (and kept, as in any long scan) before the clock starts
        ("dsclean scan --jobs 1", lambda: dsclean_scan(folder, 1), 1, lambda: dsclean_scan(warm, 1)),
        ("dsclean scan --jobs 2", lambda: dsclean_scan(folder, 2), 2, lambda: dsclean_scan(warm, 2)),
    ]
    rows = []
    for name, fn, cores, warm_up in contenders:
        if warm_up is not None:
            warm_up()
        elapsed = float("inf")
        for _ in range(2):  # best of two: the machine is noisy
            start = time.perf_counter()
            flagged = fn()
            elapsed = min(elapsed, time.perf_counter() - start)
        if flagged is None:
            rows.append((name, None))
            continue
        recall = len(flagged & bad) / len(bad)
        rows.append((name, (len(paths) / elapsed, total_mb / elapsed, cores, recall, len(flagged - bad), elapsed)))

    base = rows[0][1][0]
    print()
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}"
    )
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        f"command: python scripts/bench_scan.py --n {args.n} --size {args.size} --corrupt {args.corrupt} --seed {args.seed}"
    )
    print()
    print("| checker | files/s | MB/s | files/s per core | vs load() loop | recall on damaged | false alarms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        if r is None:
            print(f"| {name} | not installed (apt-get install jpeginfo) | | | | | |")
            continue
        fps, mbps, cores, recall, false_alarms, _ = r
        print(
            f"| {name} | {fps:,.0f} | {mbps:,.1f} | {fps / cores:,.0f} | {fps / base:.2f}x | "
            f"{recall:.0%} ({round(recall * len(bad))}/{len(bad)}) | {false_alarms} |"
        )
    if not args.dir:
        shutil.rmtree(folder)
    if args.rescan:
        rescan_benchmark(args.rescan, before=args.before)


# ---- re-scan of an unchanged tree (the scan cache) ---------------------------------------------


def make_small_tree(folder: str, n: int) -> None:
    """n tiny valid JPEGs (unique bytes) in folders of 1,000."""
    data = synth.jpeg(16, 16)
    for i in range(n):
        d = os.path.join(folder, f"d{i // 1000:04d}")
        if i % 1000 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:07d}.jpg"), "wb") as f:
            f.write(data + i.to_bytes(4, "big"))


def walk_and_stat(folder: str) -> int:
    """The floor: list every folder and stat every file (skipping dot-folders, as the scan does)."""
    n = 0
    for d, dirs, files in os.walk(folder):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for name in files:
            os.stat(os.path.join(d, name))
            n += 1
    return n


_RESCAN = """
import os, resource, sys, time
from dsclean.scanning.scanner import ScanOptions, scan
from dsclean.scanning.executors import stop_local_workers
root, report, state = sys.argv[1:4]
def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime
t0, c0 = time.perf_counter(), cpu(resource.RUSAGE_SELF)
s = scan(root, ScanOptions(dry_run=True, report_dir=report, state_dir=state, progress=False))
wall, own = time.perf_counter() - t0, cpu(resource.RUSAGE_SELF) - c0
stop_local_workers()  # a forkserver started by the scan: its CPU is counted below (it is a child)
print(s.files, s.cached, wall, own, cpu(resource.RUSAGE_CHILDREN))
"""


def rescan_benchmark(n: int, repeats: int = 5, before: str | None = None) -> None:
    """Re-scan an unchanged n-file tree against os.walk+stat, interleaved pairs: median and range of the ratio.

    Each re-scan is a fresh process (as a user's command is) timing ``scan()`` from inside it, so what a
    scan starts for nothing (worker processes) is paid as it would be; interpreter start-up and imports
    are left out on both sides. ``before``: an earlier dsclean's source tree, re-scanning the same tree
    with its own state folder, interleaved.
    """
    import statistics

    versions = {"before": os.path.abspath(before), "after": None} if before else {"after": None}
    folder = tempfile.mkdtemp(prefix="dsclean-rescan-")
    work = tempfile.mkdtemp(prefix="dsclean-rescan-state-")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at start: {os.getloadavg()}")
    try:
        t0 = time.perf_counter()
        make_small_tree(folder, n)
        print(f"\ngenerated {n:,} small files in {time.perf_counter() - t0:.0f} s")

        def rescan(version: str) -> tuple[float, float, float]:
            args = [folder, os.path.join(work, version, "r"), os.path.join(work, version, "s")]
            out = subprocess.run(
                [sys.executable, "-c", _RESCAN, *args],
                env=_env(versions[version]),
                cwd="/",
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            files, cached, wall, own, children = int(out[0]), int(out[1]), *map(float, out[2:])
            return files, cached, (wall, own, children)

        for version in versions:
            t0 = time.perf_counter()
            files, _, _ = rescan(version)  # the first scan: fills the results and the cache
            print(f"{version}: first scan {files:,} files in {time.perf_counter() - t0:.1f} s")
        walks: list[float] = []
        rescans: dict[str, list[tuple[float, float, float]]] = {v: [] for v in versions}
        for _ in range(repeats):  # interleaved: the machine is noisy
            t0 = time.perf_counter()
            walked = walk_and_stat(folder)
            walks.append(time.perf_counter() - t0)
            for version in versions:
                files, cached, times = rescan(version)
                assert walked == files == cached == n, (version, walked, files, cached)
                rescans[version].append(times)
    finally:
        shutil.rmtree(folder)
        shutil.rmtree(work)
    walk = statistics.median(walks)
    print(f"load average at the end: {os.getloadavg()}")
    print(
        f"\n| re-scan of an unchanged tree, {n:,} files (median of {repeats}, interleaved) | files/s | time | "
        "vs os.walk+stat | CPU s: scan process | CPU s: its children (workers) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| os.walk + os.stat (baseline) | {n / walk:,.0f} | {walk:.2f} s | 1.00x | | |")
    for version, runs in rescans.items():
        ratios = sorted(r[0] / w for r, w in zip(runs, walks))
        wall = statistics.median(r[0] for r in runs)
        own = statistics.median(r[1] for r in runs)
        kids = statistics.median(r[2] for r in runs)
        print(
            f"| dsclean scan ({version}), every verdict reused | {n / wall:,.0f} | {wall:.2f} s | "
            f"{statistics.median(ratios):.2f}x the time (pairs: {ratios[0]:.2f}x to {ratios[-1]:.2f}x) | "
            f"{own:.2f} | {kids:.2f} |"
        )


# ---- the scan pipeline around the checkers: start-up, main process, worker system calls -------------


def _subreaper() -> None:
    """Adopt orphaned descendants (forkservers, resource trackers), so their CPU time is counted when reaped."""
    import ctypes

    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _run_counted(cmd: list[str], env: dict, cwd: str | None = None) -> tuple[float, float, str]:
    """Run a whole process; (wall s, CPU s of it and every descendant, stdout)."""
    import resource

    def children_cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    cpu0, t0 = children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # reap adopted descendants (they exit when the scan's process does)
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.01)
    if out.returncode not in (0, 1, 123):  # 1: the scan found bad files; 123: xargs, jpeginfo did
        raise RuntimeError(f"{cmd} failed ({out.returncode}): {out.stderr[-2000:]}")
    return wall, children_cpu() - cpu0, out.stdout


#: dsclean's JPEG check call (check_image: strict, 1/8, grey, fast DCT) over the files listed in argv[1]
_DECODE_LOOP = """
import sys, simplejpeg
for path in open(sys.argv[1]).read().split(chr(10)):
    data = open(path, "rb").read()
    try:
        simplejpeg.decode_jpeg(data, colorspace="GRAY", strict=True, min_height=1, min_width=1, fastdct=True, fastupsample=True)
    except ValueError:
        pass
"""


def _env(src: str | None) -> dict:
    """The environment of a measured process: ``src``'s dsclean, else the one of this script's own tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = src or os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    return env


def _compile_bytecode(trees: list[str]) -> None:
    """Write dsclean's ``__pycache__`` in each source tree, as ``pip install`` does for an installed package.

    Without it, an editable install run with PYTHONDONTWRITEBYTECODE=1 (as on the project's machine)
    compiles all of dsclean's modules from source in every process: ~0.35 CPU-s of each scan's start-up
    (main process and forkserver), a cost no installed dsclean has. ``--source-only`` keeps it.
    """
    import compileall

    for tree in trees:
        compileall.compile_dir(os.path.join(tree, "dsclean"), quiet=1)
    print(f"bytecode compiled in {', '.join(trees)} (--source-only: measure without)")


def _has_facts_option(src: str) -> bool:
    """Whether the dsclean in source tree ``src`` has ``scan --facts``."""
    try:
        with open(os.path.join(src, "dsclean", "cli", "scan.py"), encoding="utf-8") as f:
            return '"--facts"' in f.read()
    except OSError:
        return False


def pipeline_benchmark(args) -> None:
    import statistics

    _subreaper()
    versions = {"after": None}
    if args.before:
        versions = {"before": os.path.abspath(args.before), "after": None}
    # --facts none for "before" too when its CLI has the option (trees older than the quality facts do not)
    no_facts = {
        v: args.facts_none and (src is None or args.before_facts_none or _has_facts_option(src))
        for v, src in versions.items()
    }
    labels = {v: v + (", --facts none" if no_facts[v] else "") for v in versions}
    if not args.source_only:
        _compile_bytecode(
            [src or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..") for src in versions.values()]
        )
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}"
    )
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at start: {os.getloadavg()}")
    folder = tempfile.mkdtemp(prefix="dsclean-pipe-")
    list_dir = tempfile.mkdtemp(prefix="dsclean-pipe-lists-")  # the decode loops' file lists, outside the tree
    try:
        bad = make_dataset(folder, args.n, args.size, args.corrupt, args.seed)
        paths = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)
        mb = sum(os.path.getsize(os.path.join(folder, p)) for p in paths) / 1e6
        print(f"tree: {len(paths):,} photo JPEGs ({mb:.1f} MB, {len(bad)} damaged), page cache warm\n")
        pillow_loop(folder, paths, "verify")
        exe = shutil.which("jpeginfo")
        contenders: dict[str, tuple[list[str], dict, int]] = {}
        if exe:
            # one jpeginfo process per 500 files, like xargs; CPU of every process counted
            script = f"cd {folder} && find . -name '*.jpg' -print0 | xargs -0 -n 500 {exe} -c > /dev/null"
            contenders["jpeginfo -c (xargs -n 500)"] = (["bash", "-c", script], _env(None), 1)
        # The machine's own ceiling for --jobs 2 / --jobs 1: dsclean's decode call in a bare Python loop over
        # every file, in one process, then over half the files in each of two processes at once (no pool, no
        # results: an ideal split with the same libraries' start-up)
        lists = [os.path.join(list_dir, f"list{i}") for i in range(3)]
        for path, part in zip(lists, (paths, paths[0::2], paths[1::2])):
            with open(path, "w") as f:
                f.write("\n".join(os.path.join(folder, p) for p in part))
        loop = [sys.executable, "-c", _DECODE_LOOP]
        contenders["decode loop, 1 process"] = ([*loop, lists[0]], _env(None), 1)
        contenders["decode loop, 2 processes (half each)"] = (
            [
                "bash",
                "-c",
                " & ".join(f"{sys.executable} -c '{_DECODE_LOOP}' {path}" for path in lists[1:]) + " & wait",
            ],
            _env(None),
            2,
        )
        for version, src in versions.items():
            for jobs in (1, 2):
                cmd = [
                    sys.executable,
                    "-m",
                    "dsclean",
                    "scan",
                    folder,
                    "--jobs",
                    str(jobs),
                    "--dry-run",
                    "--rescan",
                    "--quiet",
                    "--report",
                    "REPORT",
                    "--state-dir",
                    "STATE",
                ]
                if no_facts[version]:  # the speed bars: the integrity check alone
                    cmd += ["--facts", "none"]
                contenders[f"dsclean scan --jobs {jobs} ({labels[version]})"] = (cmd, _env(src), jobs)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
        for _ in range(args.rounds):  # interleaved rounds: the machine is shared
            for name, (cmd, env, _) in contenders.items():
                with tempfile.TemporaryDirectory() as tmp:
                    cmd = [tmp + "/r" if c == "REPORT" else tmp + "/s" if c == "STATE" else c for c in cmd]
                    wall, cpu, _ = _run_counted(cmd, env, cwd="/")
                times[name].append((wall, cpu))
        print(
            f"| whole process, {len(paths):,} JPEGs (median of {args.rounds} interleaved rounds) | wall s | files/s | "
            "CPU s (all processes) | files/s per core | files per CPU-s |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        med = {}
        for name, runs in times.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            cores = contenders[name][2]
            med[name] = (wall, cpu)
            n = len(paths)
            print(f"| {name} | {wall:.2f} | {n / wall:,.0f} | {cpu:.2f} | {n / wall / cores:,.0f} | {n / cpu:,.0f} |")
        print()
        if exe:
            ji, jc = med["jpeginfo -c (xargs -n 500)"]
            for version in versions:
                (j1, c1), (j2, _) = (med[f"dsclean scan --jobs {j} ({labels[version]})"] for j in (1, 2))
                print(
                    f"{labels[version]}: --jobs 1 is {ji / j1:.2f}x jpeginfo -c per core in wall time, "
                    f"{jc / c1:.2f}x per CPU-second; --jobs 2 is {j1 / j2:.2f}x --jobs 1 in wall time"
                )
        (l1, _), (l2, _) = med["decode loop, 1 process"], med["decode loop, 2 processes (half each)"]
        print(f"the machine's ceiling: the bare decode loop in 2 processes is {l1 / l2:.2f}x the loop in 1")
    finally:
        shutil.rmtree(list_dir)
        shutil.rmtree(folder)
    if args.whole_only:
        return
    main_process_cost(args.tiny, versions, args.rounds, args.facts_none)
    worker_syscalls(versions)


def startup_benchmark(args) -> None:
    """CPU and wall of a whole scan of ONE file, per format: what a scan costs before and after its checks."""
    import statistics

    _subreaper()
    versions = {"before": os.path.abspath(args.before), "after": None} if args.before else {"after": None}
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if not args.source_only:
        _compile_bytecode([src or here for src in versions.values()])
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at start: {os.getloadavg()}")
    folder = tempfile.mkdtemp(prefix="dsclean-startup-")
    try:
        tone = synth.tone(1.0, 44_100, 2)
        files = {
            "wav": synth.encode_audio(tone, 44_100, "WAV"),
            "flac": synth.encode_audio(tone, 44_100, "FLAC"),
            "jpg": synth.jpeg(512, 384),
        }
        for ext, data in files.items():
            os.makedirs(os.path.join(folder, ext))
            with open(os.path.join(folder, ext, f"one.{ext}"), "wb") as f:
                f.write(data)
        runs: dict[tuple[str, str], list[tuple[float, float]]] = {(v, e): [] for v in versions for e in files}
        for _ in range(args.rounds):
            for ext in files:
                for version, src in versions.items():
                    with tempfile.TemporaryDirectory() as tmp:
                        cmd = [
                            sys.executable,
                            "-m",
                            "dsclean",
                            "scan",
                            os.path.join(folder, ext),
                            "--jobs",
                            "1",
                            "--dry-run",
                            "--rescan",
                            "--quiet",
                            "--facts",
                            "none",
                            "--report",
                            tmp + "/r",
                            "--state-dir",
                            tmp + "/s",
                        ]
                        wall, cpu, _ = _run_counted(cmd, _env(src), cwd="/")
                    runs[(version, ext)].append((wall, cpu))
        print(
            f"\n| whole `scan --jobs 1 --facts none` of one file ({args.rounds} interleaved rounds) | "
            "CPU s min | CPU s median | wall s min | wall s median |"
        )
        print("|---|---:|---:|---:|---:|")
        for (version, ext), r in runs.items():
            cpus, walls = [c for _, c in r], [w for w, _ in r]
            print(
                f"| {ext}, {version} | {min(cpus):.3f} | {statistics.median(cpus):.3f} | {min(walls):.3f} | "
                f"{statistics.median(walls):.3f} |"
            )
        print(f"\nload average at the end: {os.getloadavg()}")
    finally:
        shutil.rmtree(folder)


_MAIN_COST = """
import os, resource, sys, tempfile, time
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.scanner import ScanOptions, scan
root, first, use_cache, facts = sys.argv[1], sys.argv[2], sys.argv[3] == "cache", sys.argv[4] == "facts"
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)  # this process and its threads, not the workers
    return r.ru_utime + r.ru_stime
with tempfile.TemporaryDirectory() as tmp:
    opts = dict(jobs=2, dry_run=True, report_dir=tmp + "/r", state_dir=tmp + "/s", progress=False, use_cache=use_cache,
                check=CheckOptions(facts=facts))
    c0 = cpu(); small = scan(first, ScanOptions(**opts)); c1 = cpu()
    full = scan(root, ScanOptions(**opts)); c2 = cpu()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB: the peak resident set of this process
print(small.files, c1 - c0, full.files, c2 - c1, peak)
"""


def main_process_cost(
    n: int, versions: dict, rounds: int, facts_none: bool = False, bar_only: bool = False, where: str | None = None
) -> None:
    """CPU of the scan's main process per file: a full scan of n tiny files minus a 1,000-file scan, per extra file.

    ``facts_none``: also with ``--facts none`` (the issue's bar: the integrity check alone), scan cache on and off.
    ``bar_only``: only the bar's options (``--facts none``, scan cache on). Also reports the main process's
    peak resident memory (``ru_maxrss``).
    """
    import statistics

    folder = tempfile.mkdtemp(prefix="dsclean-tiny-", dir=where)
    try:
        make_small_tree(folder, n)
        kinds = ["default options (scan cache on)", "use_cache=False"]
        if facts_none:
            kinds += ["--facts none (scan cache on)", "--facts none, use_cache=False"]
        if bar_only:
            kinds = ["--facts none (scan cache on)"]
        runs = [(f"{version}, {what}", src, what) for what in kinds for version, src in versions.items()]
        per_file: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        peaks: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        for _ in range(max(1, rounds // 2)):
            for name, src, what in runs:
                flag = "nocache" if "use_cache=False" in what else "cache"
                facts = "nofacts" if "--facts none" in what else "facts"
                out = subprocess.run(
                    [sys.executable, "-c", _MAIN_COST, folder, os.path.join(folder, "d0000"), flag, facts],
                    cwd="/",  # not a tree holding a dsclean/ (-c and -m put the cwd first on sys.path)
                    env=_env(src),
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()
                small_n, small_cpu, full_n, full_cpu = int(out[0]), float(out[1]), int(out[2]), float(out[3])
                per_file[name].append((full_cpu - small_cpu) / (full_n - small_n) * 1e6)
                peaks[name].append(float(out[4]))
        print(
            f"\n| main process of a first scan (2 jobs, fresh state folder), {n:,} tiny JPEGs | "
            "CPU µs per file (median) | runs | peak RSS MiB (max) |"
        )
        print("|---|---:|---|---:|")
        for name, xs in per_file.items():
            print(
                f"| {name} | {statistics.median(xs):.1f} | {', '.join(f'{x:.1f}' for x in xs)} | {max(peaks[name]):.0f} |"
            )
    finally:
        shutil.rmtree(folder)


_SYSCALLS = """
import os, sys
from dsclean.scanning import worker
from dsclean.scanning.check import CheckOptions
root, n = sys.argv[1], int(sys.argv[2])
rels = sorted(os.listdir(root))[:n]
worker.check_chunk(root, rels[:1], CheckOptions())  # imports and first-time set-up, in both runs
for i in range(1, n, 256):  # the scan's tasks: up to 256 files each
    worker.check_chunk(root, rels[i:i + 256], CheckOptions())
"""


def worker_syscalls(versions: dict, n: int = 2000) -> None:
    """System calls a worker makes per file (strace -c -f of checking n files minus checking 1), by kind."""
    if shutil.which("strace") is None:
        print("\n(strace not installed: worker system calls not measured)")
        return
    folder = tempfile.mkdtemp(prefix="dsclean-sys-")
    try:
        for i in range(n):
            with open(os.path.join(folder, f"f{i:05d}.jpg"), "wb") as f:
                f.write(synth.jpeg(64, 64, seed=i % 8))
        print(
            f"\n| worker system calls per file ({n:,} small JPEGs, strace -c -f, minus a 1-file run) | total | top calls |"
        )
        print("|---|---:|---|")
        for version, src in versions.items():
            counts = []
            for files in (1, n):
                with tempfile.NamedTemporaryFile(mode="r") as log:
                    subprocess.run(
                        ["strace", "-f", "-c", "-o", log.name, sys.executable, "-c", _SYSCALLS, folder, str(files)],
                        env=_env(src),
                        check=True,
                        capture_output=True,
                    )
                    table = {}
                    for line in log.read().splitlines():
                        parts = line.split()
                        if len(parts) >= 5 and parts[-1] not in ("syscall", "total") and parts[3].isdigit():
                            table[parts[-1]] = int(parts[3])
                    counts.append(table)
            diff = {k: (counts[1].get(k, 0) - counts[0].get(k, 0)) / (n - 1) for k in counts[1]}
            top = sorted(((v, k) for k, v in diff.items() if v >= 0.05), reverse=True)
            print(f"| {version} | {sum(v for v, _ in top):.1f} | {', '.join(f'{k} {v:.1f}' for v, k in top)} |")
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
