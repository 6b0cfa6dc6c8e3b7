"""Race runs behind RELIABILITY.md section 6 (the scenarios of tests/scanning/test_reliability.py, repeated).

    python scripts/race_test.py replace --runs 6   # a process renames good files over bad ones during a scan
    python scripts/race_test.py racing --runs 10   # two scans (separate state folders) race into two quarantines

Prints one line of measured outcomes per run. ``--no-verify`` (replace only) disables the identity
check before each move, to show what the race does without it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import synth  # noqa: E402
from support.files import write  # noqa: E402
from support.treegen import contents, tree_state  # noqa: E402

from dsclean.scanning.check import check_file  # noqa: E402
from dsclean.scanning.scanner import ScanOptions, scan  # noqa: E402

REPLACER = (
    "import os, sys, time\n"
    "good, root = sys.argv[1], sys.argv[2]\n"
    "for name in sorted(os.listdir(good)):\n"
    "    try:\n"
    "        os.link(os.path.join(good, name), os.path.join(root, 'a', '.' + name))\n"
    "        os.rename(os.path.join(root, 'a', '.' + name), os.path.join(root, 'a', name))\n"
    "    except FileNotFoundError:\n"
    "        pass\n"
    "    time.sleep(0.004)\n"
)


def replace_run(base: Path, n: int = 150) -> dict:
    root, qdir = base / "root", base / "q"
    for i in range(n):
        write(root, f"a/{i:03d}.jpg", synth.truncate(synth.jpeg(64, 48, seed=i), 0.5))
        write(base / "good", f"{i:03d}.jpg", synth.jpeg(64, 48, seed=1000 + i))
    replacer = subprocess.Popen([sys.executable, "-c", REPLACER, str(base / "good"), str(root)])
    s = scan(str(root), ScanOptions(quarantine=str(qdir), jobs=2, chunk_size=4, state_dir=str(base / "st")))
    replacer.wait()
    good = {p.read_bytes() for p in (base / "good").iterdir()}
    held = list(qdir.rglob("*.jpg"))
    in_root = {p.read_bytes() for p in (root / "a").iterdir() if p.is_file()}
    return dict(
        quarantined=s.quarantined,
        changed=s.warn_reasons.get("changed", 0),
        good_in_quarantine=sum(p.read_bytes() in good for p in held),
        not_bad_in_quarantine=sum(check_file(str(qdir), str(p.relative_to(qdir))).status != "bad" for p in held),
        good_files_lost=len(good - in_root),
    )


def racing_run(base: Path, n: int = 120) -> dict:
    root = base / "root"
    for i in range(n):
        write(root, f"c{i % 3}/{i:03d}.jpg", synth.HTML_PAGE + f"{i}".encode())
    original = tree_state(root)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dsclean",
                "scan",
                str(root),
                "--quarantine",
                str(base / f"q{m}"),
                "--state-dir",
                str(base / f"state{m}"),
                "--jobs",
                "1",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for m in (1, 2)
    ]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    gone_before = rolled_back = 0
    for m in (1, 2):
        for line in (base / f"q{m}" / "manifest.jsonl").read_text().splitlines():
            e = json.loads(line)
            if e["op"] == "abort" and "changed" in e:
                rolled_back += "another process" in e["changed"]
                gone_before += "another process" not in e["changed"]
    return dict(
        moved=[o["quarantined"] for o in outs],
        move_failures=[o["move_failures"] for o in outs],
        gone_before_link=gone_before,
        rolled_back_after_link=rolled_back,
        every_file_once=sorted(contents(root, base / "q1", base / "q2")) == sorted(original.values()),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", choices=("replace", "racing"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-verify", action="store_true", help="replace: disable the identity check (to see the race)")
    args = ap.parse_args()
    if args.no_verify:
        from dsclean.scanning.quarantine import moves

        moves._verify = lambda *a, **k: None
    for k in range(args.runs):
        base = Path(tempfile.mkdtemp(prefix="dsclean-race-"))
        try:
            out = (replace_run if args.scenario == "replace" else racing_run)(base)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        print(args.scenario, k, json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
