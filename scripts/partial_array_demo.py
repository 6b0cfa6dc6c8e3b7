"""Reproduce what each command says about a root whose job array ran only some parts.

Runs `dsclean scan ROOT --shard 0/3` and `--shard 1/3` (part 2/3 never runs) on a small
generated tree, then `status`, `report`, `dups`, `index` + `pack`, printing what each says.
Usage: python scripts/partial_array_demo.py [WORKDIR]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from support.treegen import make_tree  # noqa: E402


def run(*args: str, env: dict) -> None:
    proc = subprocess.run([sys.executable, "-m", "dsclean", *args], capture_output=True, text=True, env=env)
    print(f"$ dsclean {' '.join(args)}   -> exit {proc.returncode}")
    for line in (proc.stdout + proc.stderr).strip().splitlines():
        print("    " + line)
    print()


def main() -> None:
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="dsclean-partial-")
    from pathlib import Path

    root = Path(work) / "data"
    make_tree(root, n_good=12, n_bad=6)
    env = {**os.environ, "DSCLEAN_STATE_DIR": os.path.join(work, "state")}
    for i in (0, 1):
        run("scan", str(root), "--shard", f"{i}/3", "--jobs", "1", "--quiet", env=env)
    run("status", str(root), env=env)
    run("report", str(root), "-o", os.path.join(work, "report.html"), env=env)
    run("dups", str(root), "--jobs", "1", env=env)
    run("index", str(root), "-o", os.path.join(work, "i.arrow"), "--jobs", "1", env=env)
    run("pack", os.path.join(work, "i.arrow"), "-o", os.path.join(work, "shards"), "--samples-per-shard", "4", env=env)


if __name__ == "__main__":
    main()
