"""A loky worker of ``pack --jobs 2`` killed with SIGKILL mid-pack (issue 24, item 10): its shards are written
again by a fresh pool, the set is byte-identical to a clean pack, and the process exits; workers that keep
dying end the run with exit 3 naming the shards not written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from support import synth
from support.files import write
from support.packing import folder_digests

from dsclean.index.build import build_index

PY = sys.executable

pytestmark = pytest.mark.slow  # pack workers killed mid-pack: 240 shards packed two or three times


def _index(tmp_path, n=240):
    root = tmp_path / "data"
    for i in range(n):
        write(root, f"c{i % 3}/{i:04d}.jpg", synth.jpeg(64, 64, seed=i))
    index = str(tmp_path / "i.arrow")
    build_index(str(root), index)
    return index


def _workers(pid: int) -> list[int]:
    """The pack's loky worker processes (not loky's resource tracker)."""
    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "loky" in cmd and "resource_tracker" not in cmd:
            out.append(child.pid)
    return out


def _shards(folder) -> int:
    return len([n for n in os.listdir(folder) if n.endswith(".tar")]) if folder.exists() else 0


def _pack(index, out, kill_after: int, kills: int, deadline: float) -> tuple[subprocess.Popen, int, str]:
    # no -q: the retry is a note (-q prints errors only), and the note is what the first test reads
    proc = subprocess.Popen(
        [PY, "-m", "dsclean", "pack", index, "--samples-per-shard", "1", "--shuffle", "4", "--jobs", "2", "--no-fsync"]
        + ["-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed: set[int] = set()
    while len(killed) < kills and time.monotonic() < deadline and proc.poll() is None:
        workers = [w for w in _workers(proc.pid) if w not in killed] if _shards(out) >= kill_after else []
        if workers:
            os.kill(workers[0], signal.SIGKILL)
            killed.add(workers[0])
        time.sleep(0.005)
    try:
        _, err = proc.communicate(timeout=300)  # the process always exits: no lock waited on forever
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"pack did not exit after {len(killed)} worker kills") from None
    return proc, len(killed), err


def test_a_killed_worker_s_shards_are_written_again_and_the_set_is_byte_identical(tmp_path):
    index = _index(tmp_path)
    subprocess.run(
        [
            PY,
            "-m",
            "dsclean",
            "pack",
            index,
            "--samples-per-shard",
            "1",
            "--shuffle",
            "4",
            "--jobs",
            "2",
            "--no-fsync",
            "-q",
            "-o",
            str(tmp_path / "ref"),
        ],
        check=True,
    )
    out = tmp_path / "killed"
    proc, kills, err = _pack(index, out, kill_after=20, kills=1, deadline=time.monotonic() + 120)
    assert kills == 1 and "Traceback" not in err, err
    assert proc.returncode == 0, err
    assert "a worker process died" in err, err
    assert folder_digests(out) == folder_digests(tmp_path / "ref")
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_workers_that_keep_dying_end_the_pack_with_exit_3_naming_the_shards(tmp_path):
    index = _index(tmp_path)
    out = tmp_path / "killed"
    proc, kills, err = _pack(index, out, kill_after=5, kills=40, deadline=time.monotonic() + 120)
    assert "Traceback" not in err, err
    assert proc.returncode == 3, err
    assert "not written: worker processes died 3 times" in err and ".tar" in err, err
    assert not (out / "index.arrow").exists()
    written = _shards(out)
    proc = subprocess.run(
        [
            PY,
            "-m",
            "dsclean",
            "pack",
            index,
            "--samples-per-shard",
            "1",
            "--jobs",
            "2",
            "--no-fsync",
            "-q",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and _shards(out) == 240 > written, proc.stderr  # the resume finishes the job
