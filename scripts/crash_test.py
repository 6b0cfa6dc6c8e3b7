#!/usr/bin/env python3
"""Crash-consistency proof: SIGKILL `dsclean scan --quarantine` at many moments, then check nothing was lost.

Each run writes a fresh tree (FILES files, half of them bad, every file's bytes
unique), starts a real scan with --jobs 2 and kills it with SIGKILL at a random
moment: a few runs at a random delay during start-up and checking, the rest as soon
as the journal shows a random number of started moves (polled every millisecond, so
the kill lands at an arbitrary instruction of the move protocol). Then it checks:

1. straight after the kill: every original file exists exactly once, byte-identical,
   in the tree or in the quarantine;
2. after a recovery run (`dsclean recover`): the manifest accounts for every file in
   the quarantine (a "move" with outcome "done") and nothing it lists as done is missing;
3. after `dsclean restore`: the tree is byte-identical to the original.

    python scripts/crash_test.py [--runs 30] [--files 300] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support: media synthesis
from support import synth  # noqa: E402

DSCLEAN = [sys.executable, "-m", "dsclean"]
OWN_FILES = {
    "manifest.jsonl",
    ".dsclean-quarantine",
    ".dsclean.lock",
    "quarantine.json",
    "scan_results.parquet",
    "problems.jsonl",
    "scan_summary.json",
}


def make_files(n: int) -> dict[str, bytes]:
    good = synth.jpeg(96, 96, seed=1)
    files = {}
    for i in range(n):
        cls = f"class{i % 4}"
        if i % 2:
            files[f"{cls}/bad{i:04d}.jpg"] = synth.truncate(good, 0.5) + i.to_bytes(4, "big")
        else:
            files[f"{cls}/img{i:04d}.jpg"] = good + i.to_bytes(4, "big")  # bytes after EOI: unique, still valid
    return files


def write_tree(root: str, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)


def user_files(folder: str, inodes: set | None = None) -> dict[str, str]:
    """{relative path: sha256} of the media files under folder (dsclean's own files left out).

    With ``inodes``, a second name of an inode already seen (a move caught between
    link and unlink: one file, two names) is left out too.
    """
    out = {}
    for d, dirs, names in os.walk(folder):
        dirs[:] = [x for x in dirs if x != ".dsclean"]
        for name in names:
            if name in OWN_FILES or name.startswith("."):
                continue
            path = os.path.join(d, name)
            if inodes is not None:
                st = os.stat(path)
                if (st.st_dev, st.st_ino) in inodes:
                    continue
                inodes.add((st.st_dev, st.st_ino))
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def manifest_state(qdir: str) -> tuple[set[str], set[str]]:
    """(dst of every move with outcome done, dst of moves restored) from the manifest."""
    moves, outcome, restored = {}, {}, set()
    path = os.path.join(qdir, "manifest.jsonl")
    if not os.path.exists(path):
        return set(), set()
    with open(path, "rb") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e["op"] in ("move", "restore"):
                moves[e["id"]] = e
            else:
                outcome[e["id"]] = e["op"]
    done = {m["dst"] for i, m in moves.items() if m["op"] == "move" and outcome.get(i) == "done"}
    restored = {m["dst"] for i, m in moves.items() if m["op"] == "restore" and outcome.get(i) == "done"}
    return done, restored


def started_moves(qdir: str) -> int:
    return _count(qdir, b'"op": "move"')


def _count(qdir: str, needle: bytes) -> int:
    try:
        with open(os.path.join(qdir, "manifest.jsonl"), "rb") as f:
            return f.read().count(needle)
    except FileNotFoundError:
        return 0


def one_run(
    base: str, files: dict[str, bytes], digests: dict[str, str], delay: float | None, after_moves: int | None = None
) -> dict:
    """One scan, killed after ``delay`` s or ``after_moves`` started moves (neither: left to finish); then checks."""
    root, qdir = os.path.join(base, "data"), os.path.join(base, "q")
    write_tree(root, files)
    proc = subprocess.Popen(
        [*DSCLEAN, "scan", root, "--quarantine", qdir, "--jobs", "2", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if after_moves is not None:
        while proc.poll() is None and started_moves(qdir) < after_moves:
            time.sleep(0.001)
    elif delay is not None:
        time.sleep(delay)
    else:
        proc.wait()
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    problems = []
    open_moves = started_moves(qdir) - _count(qdir, b'"op": "done"')  # moves the kill cut in half
    # 1. every original file exactly once, byte-identical
    seen: set = set()
    in_tree = user_files(root, seen)
    in_q = user_files(qdir, seen) if os.path.isdir(qdir) else {}
    found = sorted(list(in_tree.values()) + list(in_q.values()))
    if found != sorted(digests.values()):
        missing = set(digests.values()) - set(found)
        problems.append(f"after kill: {len(missing)} files missing, {len(found) - len(set(found))} duplicated")
    moved_at_kill = len(in_q)
    # 2. recovery; the manifest accounts for every quarantined file
    if os.path.isdir(qdir):
        rec = subprocess.run([*DSCLEAN, "recover", qdir], capture_output=True, text=True)
        if rec.returncode != 0:
            problems.append(f"recover failed: {rec.stderr.strip()}")
        done, _ = manifest_state(qdir)
        in_q = user_files(qdir)
        if set(in_q) != done:
            problems.append(f"manifest/quarantine mismatch: {len(set(in_q) ^ done)} entries")
        # 3. restore gives the tree back byte-identical
        res = subprocess.run([*DSCLEAN, "restore", qdir], capture_output=True, text=True)
        if res.returncode != 0:
            problems.append(f"restore failed: {res.stderr.strip()}")
    if user_files(root) != digests:
        problems.append("after restore: tree differs from the original")
    shutil.rmtree(base)
    return {
        "delay": delay,
        "after_moves": after_moves,
        "killed": killed,
        "moved_at_kill": moved_at_kill,
        "mid_move": open_moves > 0,
        "problems": problems,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    files = make_files(args.files)
    digests = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    work = tempfile.mkdtemp(prefix="dsclean-crash-")
    full = one_run(os.path.join(work, "full"), files, digests, delay=None)
    bad = args.files // 2
    runs = []
    for i in range(args.runs):
        base = os.path.join(work, f"run{i}")
        if i % 6 == 0:
            runs.append(one_run(base, files, digests, delay=rng.uniform(0.05, 1.0)))
        else:
            runs.append(one_run(base, files, digests, delay=None, after_moves=rng.randint(1, bad)))
    shutil.rmtree(work, ignore_errors=True)
    report = {
        "runs": args.runs,
        "files_per_run": args.files,
        "bad_per_run": args.files // 2,
        "killed": sum(r["killed"] for r in runs),
        "distinct_kill_points": len({r["moved_at_kill"] for r in runs if r["killed"]}),
        "moved_at_kill": sorted(r["moved_at_kill"] for r in runs if r["killed"]),
        "kills_mid_move": sum(r["mid_move"] for r in runs if r["killed"]),
        "runs_with_problems": sum(bool(r["problems"]) for r in runs) + bool(full["problems"]),
        "problems": [p for r in [full, *runs] for p in r["problems"]],
    }
    report["files_lost"] = sum("missing" in p for p in report["problems"])
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k}: {v}")
    return 1 if report["runs_with_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
