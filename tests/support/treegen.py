"""Build small scan trees: good and bad media with unique content, and a snapshot helper."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from support import synth
from support.files import write


def make_tree(root: Path, n_good: int = 6, n_bad: int = 6, seed: int = 0) -> dict[str, str]:
    """Write a labelled tree; returns {relative path: expected status}. Every file's bytes are unique."""
    expected = {}
    for i in range(n_good):
        cls = ("cats", "dogs")[i % 2]
        if i % 3 == 2:
            rel, data = f"{cls}/good{i}.png", synth.png(16, 16, seed=seed + i)
        else:
            rel, data = f"{cls}/good{i}.jpg", synth.jpeg(24, 16, seed=seed + i)
        write(root, rel, data)
        expected[rel] = "ok"
    for i in range(n_bad):
        cls = ("cats", "dogs")[i % 2]
        kind = i % 3
        if kind == 0:
            rel, data = f"{cls}/bad{i}.jpg", synth.truncate(synth.jpeg(24, 16, seed=1000 + seed + i), 0.6)
        elif kind == 1:
            rel, data = f"{cls}/bad{i}.jpg", synth.HTML_PAGE + str(i).encode()
        else:
            rel, data = f"{cls}/sub/bad{i}.png", synth.png_break_crc(synth.png(16, 16, seed=2000 + seed + i))
        write(root, rel, data)
        expected[rel] = "bad"
    return expected


DSCLEAN_FILES = (
    ".dsclean",
    "manifest.jsonl",
    ".dsclean-quarantine",
    ".dsclean.lock",
    "quarantine.json",
    "scan_results.parquet",
    "problems.jsonl",
    "scan_summary.json",
)


def snapshot(*folders: Path, skip=DSCLEAN_FILES) -> dict[str, str]:
    """{sha256: relative path (prefixed with the folder's index)} of every user file under the folders."""
    out = {}
    for n, folder in enumerate(folders):
        for dirpath, dirnames, files in os.walk(folder):
            dirnames[:] = [d for d in dirnames if d not in skip]
            for name in files:
                if name in skip:
                    continue
                p = os.path.join(dirpath, name)
                digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
                assert digest not in out, f"{p} exists twice (also {out[digest]})"
                out[digest] = f"{n}:{os.path.relpath(p, folder)}"
    return out


def contents(*folders: Path) -> list[str]:
    """sha256 of every user file under the folders, with repeats, leaving out partial copies.

    Two names of one inode (a move caught between link and unlink) are one file.
    """
    out, inodes = [], set()
    for folder in folders:
        for dirpath, dirnames, files in os.walk(folder):
            dirnames[:] = [d for d in dirnames if d != ".dsclean"]
            for f in files:
                if f.endswith(".dsclean-partial") or f in DSCLEAN_FILES or (f.startswith(".") and f.endswith(".tmp")):
                    continue  # partial copies, dsclean's own files, a killed run's temp reports
                st = os.stat(os.path.join(dirpath, f))
                if (st.st_dev, st.st_ino) in inodes:
                    continue
                inodes.add((st.st_dev, st.st_ino))
                out.append(hashlib.sha256(Path(dirpath, f).read_bytes()).hexdigest())
    return sorted(out)


def tree_state(root: Path) -> dict[str, str]:
    """{relative path: sha256} of the user files under root."""
    return {v.split(":", 1)[1]: k for k, v in snapshot(root).items()}
