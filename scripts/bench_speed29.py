#!/usr/bin/env python3
"""Benchmark of issue 29 (speed) and issue 27's "profiles off keep today's speed", every ratio from one run.

Needs the reference tools (Debian/Ubuntu; not needed by CI or the tests); a missing one is named in the output and
its row left empty:

    apt-get install -y jpeginfo pngcheck flac

Four sections (``--only`` picks some; each stays under ~2 minutes on 2 cores with the defaults):

- ``slopes``: the marginal cost per file of ``dsclean scan --jobs 1 --facts none`` against each format's peer, as
  the **slope between N and 4N files** (CPU of the whole process tree over 4N files minus over N, divided by 3N),
  so each contender's start-up cancels: JPEG against ``jpeginfo -c``, PNG against ``pngcheck -q``, FLAC against
  ``flac -t -s``, WAV against a bare ``soundfile.read`` loop. Ratio = peer slope / dsclean slope (higher is better
  for dsclean). Bars (issue 29): JPEG >= 1.0x, PNG >= 1.0x, FLAC >= 0.7x, WAV >= 0.9x.
- ``startup``: a whole one-file scan (one JPEG, ``--jobs 1 --facts none``) against the bare
  ``python -c "import numpy, simplejpeg"``, wall and CPU. Bar: <= 2x.
- ``jobs2``: ``scan --jobs 2`` against ``--jobs 1`` in wall time, set against the ideal split of the same decode
  (dsclean's JPEG decode call in a bare loop, in one process, then half the files in each of two processes at once).
  Bar: the scan's speed-up >= 97% of the loop's.
- ``old``: the check's own per-file cost (``check_file`` with ``CheckOptions(facts=False)`` in one process, as a
  slope between N and 4N files) of this tree against another (``--old DIR``, e.g. ``git worktree add /tmp/old27
  002bfe0^``: before issue 27's loader profiles), per format. Bar (issue 27): the check keeps its speed (ratio ~1.0x).

Every measured process is run interleaved with its rivals (A, B, A, B, ...) ``--rounds`` times; the tables show
medians. dsclean's modules are byte-compiled first, in both trees, as an installed package is.

    python scripts/bench_speed29.py [--only slopes|startup|jobs2|old] [--n 200] [--rounds 5] [--old /tmp/old27]
    python scripts/bench_speed29.py --quick --before /tmp/base   # every ratio of issue 29, in about 6 minutes

``--before DIR`` (a baseline dsclean tree, e.g. ``git archive main | tar -x -C /tmp/base``) adds its rows, measured
interleaved in the same run, to the slopes, start-up and ``--jobs 2`` tables.
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
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_checkers as bc  # noqa: E402  (media synthesis, CPU accounting of a process tree)

PY = sys.executable
FORMATS = ("jpeg", "png", "flac", "wav")
PEERS = {"jpeg": "jpeginfo", "png": "pngcheck", "flac": "flac"}
BARS = {"jpeg": 1.0, "png": 1.0, "flac": 0.7, "wav": 0.9}

SF_LOOP = """
import sys, soundfile
for p in sys.argv[1:]:
    soundfile.read(p)
"""

#: dsclean's JPEG check call (check_image: strict, 1/8, grey, fast DCT) over the files listed in argv[1]
DECODE_LOOP = """
import sys, simplejpeg
for path in open(sys.argv[1]).read().split(chr(10)):
    with open(path, "rb") as f:
        data = f.read()
    simplejpeg.decode_jpeg(data, colorspace="GRAY", strict=True, min_height=1, min_width=1, fastdct=True,
                           fastupsample=True)
"""

#: the check alone, in one process: CPU seconds of check_file over every file listed in argv[2] (after a warm-up)
CHECK_LOOP = """
import sys, time
from dsclean.scanning.check import CheckOptions, check_file
root, names = sys.argv[1], open(sys.argv[2]).read().split(chr(10))
options = CheckOptions(facts=False)
for rel in names[:10]:
    check_file(root, rel, options)  # the decoders loaded
bad = 0
t = time.process_time()
for rel in names:
    bad += check_file(root, rel, options).status == "bad"
print(time.process_time() - t, bad)
"""


def _env(src: str | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = src or REPO
    return env


def run(cmd: list[str], env: dict | None = None, cwd: str = "/") -> tuple[float, float, str]:
    """A whole process (and its descendants): (wall s, CPU s, stdout)."""
    cpu0, t0 = bc._children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, env=env or _env(None), cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    bc._reap()
    if out.returncode not in (0, 1):
        raise RuntimeError(f"{cmd[:4]} failed ({out.returncode}): {out.stderr[-2000:]}")
    return wall, bc._children_cpu() - cpu0, out.stdout


def scan_cmd(folder: str, report: str, jobs: int = 1) -> list[str]:
    return [
        PY,
        "-m",
        "dsclean",
        "scan",
        folder,
        "--jobs",
        str(jobs),
        "--dry-run",
        "--rescan",
        "--quiet",
        "--facts",
        "none",
        "--report",
        report + "/r",
        "--state-dir",
        report + "/s",
    ]


def run_scan(folder: str, jobs: int = 1, src: str | None = None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        wall, cpu, _ = run(scan_cmd(folder, tmp, jobs), _env(src))
    return wall, cpu


def make_trees(base: str, fmt: str, n: int) -> tuple[str, str]:
    """Folders of N and 4N valid files of ``fmt`` (the N: hard links to the first N of the 4N), page cache warm."""
    big, small = os.path.join(base, fmt + "-4n"), os.path.join(base, fmt + "-n")
    os.makedirs(big)
    os.makedirs(small)
    {"png": bc.make_pngs, "jpeg": bc.make_jpegs}.get(fmt, lambda f, k: bc.make_audio(f, k, fmt))(big, 4 * n)
    for name in sorted(os.listdir(big))[:n]:
        os.link(os.path.join(big, name), os.path.join(small, name))
    for name in os.listdir(big):
        with open(os.path.join(big, name), "rb") as f:
            f.read()
    return small, big


def peer_cmd(fmt: str, folder: str) -> list[str] | None:
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
    if fmt == "wav":
        return [PY, "-c", SF_LOOP, *files]
    exe = shutil.which(PEERS[fmt])
    if exe is None:
        return None
    return {"jpeg": [exe, "-c"], "png": [exe, "-q"], "flac": [exe, "-t", "-s"]}[fmt] + files


def _slope(small: float, big: float, n: int) -> float:
    return (big - small) / (3 * n)


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _paired(num: list[float], den: list[float]) -> float:
    """The median of each round's own ratio ``num[i] / den[i]``: the two were measured one after the other, so a
    drift of the machine's speed between rounds (a shared host: +-30% within minutes here) cancels in each ratio,
    where the ratio of the two medians keeps it."""
    return _med([a / b for a, b in zip(num, den) if b > 0])


# ---------------------------------------------------------------------------- sections


def slopes(base: str, n: int, rounds: int, formats: list[str], old: str | None) -> list[str]:
    lines = [
        f"\n## Marginal cost per file: slope between {n:,} and {4 * n:,} files (median of {rounds} interleaved rounds)\n",
        "| format | peer | peer CPU ms/file | scan CPU ms/file | **ratio, CPU** | ratio, CPU, paired | ratio, wall | bar |"
        + (" before's scan CPU ms/file | this / before, speed |" if old else ""),
        "|---|---|---:|---:|---:|---:|---:|---|" + ("---:|---:|" if old else ""),
    ]
    for fmt in formats:
        small, big = make_trees(base, fmt, n)
        peer = {folder: peer_cmd(fmt, folder) for folder in (small, big)}
        name = "soundfile.read loop" if fmt == "wav" else PEERS[fmt]
        if peer[small] is None:
            print(f"{fmt}: {name} is not installed: no peer (apt-get install -y jpeginfo pngcheck flac)", flush=True)
        who = ["peer", "scan"] + (["old"] if old else [])
        cpu: dict[str, list[float]] = {w: [] for w in who}
        wall: dict[str, list[float]] = {w: [] for w in who}
        for _ in range(rounds):
            for w in who:
                if w == "peer" and peer[small] is None:
                    continue
                got = []
                for folder in (small, big):
                    if w == "peer":
                        wl, c, _ = run(peer[folder], cwd=folder)  # type: ignore[arg-type]
                    else:
                        wl, c = run_scan(folder, src=old if w == "old" else None)
                    got.append((wl, c))
                wall[w].append(_slope(got[0][0], got[1][0], n))
                cpu[w].append(_slope(got[0][1], got[1][1], n))
        s_cpu, s_wall = _med(cpu["scan"]), _med(wall["scan"])
        extra = f" {_med(cpu['old']) * 1e3:.3f} | {_med(cpu['old']) / s_cpu:.2f}x |" if old else ""
        if not cpu["peer"]:
            lines.append(
                f"| {fmt} | {name}: NOT INSTALLED | | {s_cpu * 1e3:.3f} | | | >= {BARS[fmt]}x: not measured |{extra}"
            )
            continue
        p_cpu, p_wall = _med(cpu["peer"]), _med(wall["peer"])
        ratio = p_cpu / s_cpu
        met = "met" if ratio >= BARS[fmt] else "NOT met"
        paired = _paired(cpu["peer"], cpu["scan"])
        lines.append(
            f"| {fmt} | {name} | {p_cpu * 1e3:.3f} | {s_cpu * 1e3:.3f} | **{ratio:.2f}x** | {paired:.2f}x | "
            f"{p_wall / s_wall:.2f}x | >= {BARS[fmt]}x: {met} |{extra}"
        )
        print(lines[-1], flush=True)
    return lines


def startup(base: str, rounds: int, before: str | None) -> list[str]:
    folder = os.path.join(base, "one")
    os.makedirs(folder)
    bc.make_jpegs(folder, 1)
    bare = [PY, "-c", "import numpy, simplejpeg"]
    who = {"bare": lambda: run(bare)[:2], "scan": lambda: run_scan(folder)}
    if before:
        who["before"] = lambda: run_scan(folder, src=before)
    walls: dict[str, list[float]] = {w: [] for w in who}
    cpus: dict[str, list[float]] = {w: [] for w in who}
    for _ in range(rounds):
        for w, fn in who.items():
            wall, cpu = fn()
            walls[w].append(wall)
            cpus[w].append(cpu)
    bw, bcpu = _med(walls["bare"]), _med(cpus["bare"])
    rows = [("scan", "dsclean scan --jobs 1 --facts none, one JPEG")]
    if before:
        rows.append(("before", f"the same, the dsclean of {before}"))
    return [
        f'\n## Start-up: a whole one-file scan against `python -c "import numpy, simplejpeg"` (median of {rounds})\n',
        "| process | wall s | CPU s | ratio, wall (bar <= 2x) | ratio, wall, paired | ratio, CPU |",
        "|---|---:|---:|---:|---:|---:|",
        f"| python -c 'import numpy, simplejpeg' | {bw:.3f} | {bcpu:.3f} | 1.00x | 1.00x | 1.00x |",
        *(
            f"| {label} | {_med(walls[w]):.3f} | {_med(cpus[w]):.3f} | **{_med(walls[w]) / bw:.2f}x** | "
            f"{_paired(walls[w], walls['bare']):.2f}x | **{_med(cpus[w]) / bcpu:.2f}x** |"
            for w, label in rows
        ),
        "",
        f"start-up, this tree: {_med(walls['scan']) / bw:.2f}x wall (paired {_paired(walls['scan'], walls['bare']):.2f}x), "
        f"{_med(cpus['scan']) / bcpu:.2f}x CPU the bare imports "
        f"(bar <= 2x: {'met' if _med(walls['scan']) / bw <= 2 else 'NOT met'})",
    ]


def jobs2(base: str, n: int, rounds: int, before: str | None = None) -> list[str]:
    folder = os.path.join(base, "jobs2")
    os.makedirs(folder)
    bc.make_jpegs(folder, n)
    paths = sorted(os.path.join(folder, f) for f in os.listdir(folder))
    lists = [os.path.join(base, f"list{i}") for i in range(3)]
    for path, part in zip(lists, (paths, paths[0::2], paths[1::2])):
        with open(path, "w") as f:
            f.write("\n".join(part))
    two = " & ".join(f"{PY} -c '{DECODE_LOOP}' {path}" for path in lists[1:]) + " & wait"
    who = {
        "loop1": lambda: run([PY, "-c", DECODE_LOOP, lists[0]]),
        "loop2": lambda: run(["bash", "-c", two]),
        "scan1": lambda: run_scan(folder, 1),
        "scan2": lambda: run_scan(folder, 2),
    }
    if before:
        who["scan1b"] = lambda: run_scan(folder, 1, src=before)
        who["scan2b"] = lambda: run_scan(folder, 2, src=before)
    walls: dict[str, list[float]] = {w: [] for w in who}
    cpus: dict[str, list[float]] = {w: [] for w in who}
    for _ in range(rounds):
        for w, fn in who.items():
            got = fn()
            walls[w].append(got[0])
            cpus[w].append(got[1])
    m = {w: _med(walls[w]) for w in who}
    ideal, real = m["loop1"] / m["loop2"], m["scan1"] / m["scan2"]
    share = real / ideal
    labels = [
        ("loop1", "decode loop, 1 process"),
        ("loop2", "decode loop, 2 processes (half each)"),
        ("scan1", "scan --jobs 1 --facts none"),
        ("scan2", "scan --jobs 2 --facts none"),
    ]
    tail = []
    if before:
        labels += [("scan1b", f"scan --jobs 1, the dsclean of {before}"), ("scan2b", f"scan --jobs 2, {before}")]
        b_real = m["scan1b"] / m["scan2b"]
        tail = [
            f"before ({before}), same run: --jobs 2 vs --jobs 1 {b_real:.2f}x: **{b_real / ideal:.1%} of the ideal**"
        ]
    return [
        f"\n## --jobs 2 against the ideal split: {n:,} JPEGs, whole processes (median of {rounds} interleaved)\n",
        "| process | wall s | CPU s |",
        "|---|---:|---:|",
        *(f"| {label} | {m[w]:.2f} | {_med(cpus[w]):.2f} |" for w, label in labels),
        "",
        f"ideal split (loop, 2 processes vs 1): {ideal:.2f}x; scan --jobs 2 vs --jobs 1: {real:.2f}x; "
        f"**{share:.1%} of the ideal** (bar >= 97%: {'met' if share >= 0.97 else 'NOT met'})",
        *tail,
        f"CPU of the whole process tree against the ideal split's (steady under load, where wall times are not): "
        f"scan --jobs 2 {_med(cpus['scan2']) / _med(cpus['loop2']):.2f}x"
        + (f", before {_med(cpus['scan2b']) / _med(cpus['loop2']):.2f}x" if before else ""),
    ]


def old_tree(base: str, n: int, rounds: int, formats: list[str], old: str) -> list[str]:
    lines = [
        f"\n## The check alone (check_file, facts off), this tree against {old}: slope between {n:,} and {4 * n:,} "
        f"files in one process (median of {rounds} interleaved rounds)\n",
        "| format | old CPU ms/file | this CPU ms/file | **this / old speed** |",
        "|---|---:|---:|---:|",
    ]
    for fmt in formats:
        folder = os.path.join(base, fmt + "-4n")
        if not os.path.isdir(folder):
            make_trees(base, fmt, n)
        names = sorted(os.listdir(folder))
        lst = [os.path.join(base, f"{fmt}-{k}.list") for k in ("n", "4n")]
        for path, part in zip(lst, (names[:n], names)):
            with open(path, "w") as f:
                f.write("\n".join(part))
        cpu: dict[str, list[float]] = {"old": [], "this": []}
        for _ in range(rounds):
            for w, src in (("old", old), ("this", None)):
                got = [float(run([PY, "-c", CHECK_LOOP, folder, path], _env(src))[2].split()[0]) for path in lst]
                cpu[w].append(_slope(got[0], got[1], n))
        o, t = _med(cpu["old"]), _med(cpu["this"])
        lines.append(f"| {fmt} | {o * 1e3:.3f} | {t * 1e3:.3f} | **{o / t:.2f}x** |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["slopes", "startup", "jobs2", "old"], action="append", help="run these only")
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated subset of jpeg,png,flac,wav")
    ap.add_argument("--n", type=int, help="N of the slopes (N and 4N files per format; default 200, --quick 60)")
    ap.add_argument("--jobs2-files", type=int, help="JPEGs of the --jobs 2 section (default 1500, --quick 900)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 5, --quick 3)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="every section of issue 29 in a few minutes: smaller N, fewer files and rounds (each still settable)",
    )
    ap.add_argument("--before", metavar="DIR", help="a baseline dsclean tree: rows in the start-up and slopes tables")
    ap.add_argument("--old", metavar="DIR", help="another dsclean source tree (issue 27's 'before'); byte-compiled")
    args = ap.parse_args()
    for name, full, quick in (("n", 200, 60), ("jobs2_files", 1500, 900), ("rounds", 5, 3)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    sections = args.only or ["slopes", "startup", "jobs2"] + (["old"] if args.old else [])
    formats = [f for f in args.formats.split(",") if f]
    old = os.path.abspath(args.old) if args.old else None
    before = os.path.abspath(args.before) if args.before else None
    if "old" in sections and old is None:
        ap.error("--only old needs --old DIR")
    bc._subreaper()
    import compileall

    for tree in [REPO] + [t for t in (old, before) if t]:
        compileall.compile_dir(os.path.join(tree, "dsclean"), quiet=1)
    missing = [tool for tool in PEERS.values() if shutil.which(tool) is None]
    load = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    base = tempfile.mkdtemp(prefix="dsclean-bench-speed29-")
    out: list[str] = []
    try:
        if "slopes" in sections:
            out += slopes(base, args.n, args.rounds, formats, before)
        if "startup" in sections:
            out += startup(base, 3 * args.rounds if args.quick else args.rounds, before)  # ~1 s a round: 9 for --quick
        if "jobs2" in sections:
            out += jobs2(base, args.jobs2_files, args.rounds, before)
        if "old" in sections:
            out += old_tree(base, args.n, args.rounds, formats, old)  # type: ignore[arg-type]
    finally:
        shutil.rmtree(base)
    print("\n".join(out))
    print(
        "\n".join(
            [
                "",
                f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.platform()}, Python "
                f"{platform.python_version()}",
                f"date: {started} to {time.strftime('%H:%M UTC', time.gmtime())}; load average before / after: "
                f"{load[0]:.1f} / {os.getloadavg()[0]:.1f} (a loaded machine when above ~1: ratios of the same run "
                "are what count)",
                "peers missing: "
                + (", ".join(missing) + " (apt-get install -y jpeginfo pngcheck flac)" if missing else "none"),
                "command: python scripts/bench_speed29.py " + " ".join(sys.argv[1:]),
            ]
        )
    )


if __name__ == "__main__":
    main()
