"""Timeline of one whole `dsclean scan`: when each of its processes starts, imports, forks, checks and ends.

Answers "where does the serial or idle wall time of a scan go" (docs/benchmarks-history.md "The scan pipeline") with
timestamps instead of a wall-time ratio taken at load. Every Python process of the scan (main,
forkserver, resource tracker, workers) loads a ``sitecustomize`` from a temporary folder put
first on PYTHONPATH; it installs an audit hook (``sys.addaudithook``, nothing in dsclean changes)
that appends one line per event to a log, with CLOCK_BOOTTIME timestamps:

- ``start``: the process's start time from ``/proc/self/stat`` (10 ms resolution), then
  ``site`` when Python's own start-up is done;
- ``import X``: the first import of a few heavy modules (numpy, pyarrow, PIL, ...) begins;
- ``fork`` / ``forked``: the forkserver forks a worker, the worker runs;
- ``listen``: the forkserver's preload imports are done and it waits for requests;
- ``connect``: the main process asks the forkserver for a process;
- ``open``: a process opens a file of the scanned tree (a worker's check; first and last kept);
- ``replace``: an atomic rename (the results written);
- ``exit``: the interpreter's last atexit handler (after the pool's shutdown) runs.

    python scripts/scan_timeline.py --n 3000 --jobs 2 [--dir TREE] [--rounds 3] [-- extra scan options]

Prints, for each round, the events relative to the launch with the CPU time the process had used
by then (``time.process_time``: less inflated by a loaded machine than the wall time), and each
worker's first check, last check and idle time before its first check and after its last one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

_SITE = r"""
import atexit, os, sys, time
_LOG = os.environ.get("DSCLEAN_TIMELINE_LOG")
if _LOG:
    _ROOT = os.environ["DSCLEAN_TIMELINE_ROOT"]
    _HEAVY = {"numpy", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "PIL.Image", "simplejpeg", "soundfile",
              "dsclean.cli", "dsclean.scanning.scanner", "dsclean.scanning.executors", "dsclean.scanning.worker",
              "dsclean.scanning.check_image", "dsclean.scanning.check_audio", "dsclean.quality.flags", "tqdm",
              "joblib", "sqlite3", "concurrent.futures.process", "pandas"}
    _seen = set()
    _fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    with open("/proc/self/cmdline", "rb") as f:
        _argv = f.read().decode(errors="replace")
    _role = ["main"]
    if "forkserver" in _argv:
        _role[0] = "forkserver"
    elif "resource_tracker" in _argv:
        _role[0] = "tracker"

    def _log(event, t=None):
        t = time.clock_gettime(time.CLOCK_BOOTTIME) if t is None else t
        cpu = time.process_time()  # this process's CPU so far: a start-up measure that load does not inflate much
        os.write(_fd, f"{t:.6f} {os.getpid()} {_role[0]} {cpu:.4f} {event}\n".encode())

    with open("/proc/self/stat") as f:
        _ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    _log("start", _ticks / os.sysconf("SC_CLK_TCK"))
    _log("site")

    def _child():
        # dsclean forks its forkserver and resource tracker from the scan's process, saying which in this variable
        _role[0] = {"1": "forkserver", "tracker": "tracker"}.get(os.environ.get("DSCLEAN_FORKSERVER"), "worker")
        _log("forked")

    os.register_at_fork(after_in_child=_child)
    _opens = [0]

    def _hook(event, args):
        if event == "import":
            name = args[0]
            if name in _HEAVY and name not in _seen:
                _seen.add(name)
                _log("import " + name)
        elif event == "open":
            path = args[0]
            if isinstance(path, str) and path.startswith(_ROOT):
                _log("open")
        elif event == "os.fork":
            _log("fork")
        elif event == "socket.__new__" and _role[0] == "forkserver" and "listen" not in _seen:
            _seen.add("listen")
            _log("listen")
        elif event == "socket.connect" and _role[0] == "main":
            _log("connect")
        elif event in ("os.rename", "os.replace"):
            _log("replace")

    sys.addaudithook(_hook)
    atexit.register(lambda: _log("exit"))
"""


def run_once(tree: str, jobs: int, extra: list[str], site_dir: str, log: str, src: str | None = None) -> float:
    """One whole scan with the audit hook (dsclean from ``src``, default this script's tree); its wall time."""
    repo = os.path.abspath(src or os.path.join(os.path.dirname(__file__), ".."))
    env = dict(
        os.environ,
        PYTHONPATH=f"{site_dir}:{repo}",
        DSCLEAN_TIMELINE_LOG=log,
        DSCLEAN_TIMELINE_ROOT=os.path.abspath(tree) + os.sep,
    )
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "dsclean",
            "scan",
            tree,
            "--jobs",
            str(jobs),
            "--dry-run",
            "--rescan",
            "--quiet",
            "--facts",
            "none",
            "--report",
            tmp + "/r",
            "--state-dir",
            tmp + "/s",
            *extra,
        ]
        t0 = time.clock_gettime(time.CLOCK_BOOTTIME)
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        t1 = time.clock_gettime(time.CLOCK_BOOTTIME)
    if out.returncode not in (0, 1):
        raise RuntimeError(out.stderr[-2000:])
    with open(log, "a") as f:
        f.write(f"{t0:.6f} 0 bench 0 launch\n{t1:.6f} 0 bench 0 reaped\n")
    return t1 - t0


def report(log: str) -> None:
    """Print the events relative to the launch, and each worker's idle head and tail."""
    rows = []
    with open(log) as f:
        for line in f:
            t, pid, role, cpu, event = line.rstrip("\n").split(" ", 4)
            rows.append((float(t), int(pid), role, float(cpu), event))
    rows.sort()
    t0 = next(t for t, _, _, _, e in rows if e == "launch")
    end = next(t for t, _, _, _, e in rows if e == "reaped")
    opens: dict[int, list[float]] = {}
    for t, pid, role, cpu, event in rows:
        if event == "open" and role == "worker":
            opens.setdefault(pid, []).append(t)
            continue
        if event == "open":
            continue
        print(f"  {t - t0:7.3f}  {role:10} {pid:>7}  cpu {cpu:6.3f}  {event}")
    first = {e: (t - t0, cpu) for t, _, role, cpu, e in reversed(rows) if e in ("connect", "listen")}
    if len(first) == 2:
        print(
            f"  main asks for its first worker at {first['connect'][0]:.3f} s, having used {first['connect'][1]:.3f} "
            f"CPU-s; the forkserver is ready at {first['listen'][0]:.3f} s, having used {first['listen'][1]:.3f} CPU-s"
        )
    for pid, ts in opens.items():
        print(f"  worker {pid}: {len(ts)} files, first open {ts[0] - t0:.3f}, last open {ts[-1] - t0:.3f}")
    if opens:
        first = min(ts[0] for ts in opens.values())
        last = max(ts[-1] for ts in opens.values())
        print(
            f"  before the first check: {first - t0:.3f} s; checking: {last - first:.3f} s; "
            f"after the last file opened: {end - last:.3f} s; whole: {end - t0:.3f} s"
        )
        for pid, ts in opens.items():
            print(
                f"  worker {pid}: idle before its first file {ts[0] - first:.3f} s, after its last {last - ts[-1]:.3f} s"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--dir", help="an existing tree to scan (default: N photo JPEGs made by bench_scan.make_dataset)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--src",
        action="append",
        default=[],
        help="a source tree of dsclean to time (repeatable; default: this script's tree); rounds interleave",
    )
    ap.add_argument("--source-only", action="store_true", help="do not byte-compile the source trees first")
    ap.add_argument("extra", nargs="*", help="more scan options (after --)")
    args = ap.parse_args()
    site_dir = tempfile.mkdtemp(prefix="dsclean-timeline-")
    tree = args.dir
    try:
        with open(os.path.join(site_dir, "sitecustomize.py"), "w") as f:
            f.write(_SITE)
        if tree is None:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from bench_scan import make_dataset

            tree = os.path.join(site_dir, "tree")
            make_dataset(tree, args.n, 512, 0.02, 0)
        if not args.source_only:  # as bench_scan does: an installed dsclean has its bytecode
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from bench_scan import _compile_bytecode

            _compile_bytecode(
                [os.path.abspath(src) for src in args.src] or [os.path.join(os.path.dirname(__file__), "..")]
            )
        print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load average {os.getloadavg()}")
        for r in range(args.rounds):
            for i, src in enumerate(args.src or [None]):
                log = os.path.join(site_dir, f"log{r}-{i}")
                wall = run_once(tree, args.jobs, args.extra, site_dir, log, src)
                print(
                    f"round {r + 1}, {src or 'this tree'}: --jobs {args.jobs}, wall {wall:.3f} s (seconds from the launch)"
                )
                report(log)
    finally:
        shutil.rmtree(site_dir)


if __name__ == "__main__":
    main()
