"""A forkserver killed (kill -9, as an OOM killer may) while the scan asks it for a worker (issue 24, item 7).

The kill is real and lands in the window that used to end the scan with an EOFError traceback: the
test freezes the forkserver (SIGSTOP) as soon as it exists, waits until a thread of the scan sits
in the read of the new worker's pid (its request already sent), then sends SIGKILL. Once: a new
forkserver is started and the scan finishes. Every time: a clean stop, exit 3, the results so far.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pyarrow.parquet as pq
import pytest
from support import synth
from support.files import write


def _tree(root, n=12):
    for i in range(n):
        write(root, f"c{i % 2}/{i:03d}.jpg", synth.jpeg(32, 32, seed=i))
    write(root, "c0/bad.jpg", synth.jpeg(32, 32, seed=99)[:80])


def _waiting_on_a_pipe(pid: int) -> bool:
    """A thread of ``pid`` waits in a pipe's read: the main thread, or the one starting the first worker early."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                if "pipe_read" in f.read():
                    return True
        except OSError:
            continue  # the thread ended meanwhile
    return False


def _kill_servers_in_the_window(proc: subprocess.Popen, kills: int, deadline: float) -> int:
    """Freeze each new forkserver of ``proc``, SIGKILL it once ``proc`` waits for a worker's pid; returns kills."""
    scan = psutil.Process(proc.pid)
    killed: set[int] = set()
    while len(killed) < kills and time.monotonic() < deadline and proc.poll() is None:
        try:
            kids = sorted(c.pid for c in scan.children() if c.pid not in killed)
        except psutil.NoSuchProcess:
            break
        servers = [p for p in kids if _is_forkserver(p)]
        if not servers:
            time.sleep(0.001)
            continue
        server = servers[-1]
        os.kill(server, signal.SIGSTOP)  # it takes no request now: the scan's next one waits in read_signed
        while time.monotonic() < deadline and proc.poll() is None and not _waiting_on_a_pipe(proc.pid):
            time.sleep(0.005)
        time.sleep(0.05)
        os.kill(server, signal.SIGKILL)
        killed.add(server)
    return len(killed)


def _is_forkserver(pid: int) -> bool:
    """The forkserver has a bound Unix socket (the resource tracker, the other child, only reads a pipe)."""
    try:
        return any(c.laddr for c in psutil.Process(pid).net_connections(kind="unix"))
    except (psutil.Error, OSError):
        return False


@pytest.mark.parametrize("kills, code", [(1, 0), (2, 3)], ids=["once-then-new-server", "twice-clean-stop"])
def test_a_forkserver_killed_while_the_scan_starts_a_worker(tmp_path, kills, code):
    root, q, rep = tmp_path / "data", tmp_path / "q", tmp_path / "rep"
    _tree(root)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dsclean",
            "scan",
            str(root),
            "--quarantine",
            str(q),
            "--report",
            str(rep),
            "-j",
            "2",
            "--backend",
            "processes",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        done = _kill_servers_in_the_window(proc, kills, time.monotonic() + 60)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert done == kills, err
    assert "Traceback" not in err, err
    assert proc.returncode == code, err
    rows = pq.read_table(rep / "scan_results.parquet").to_pylist()
    if code == 0:
        assert "starting a new one" in err, err
        assert len(rows) == 13 and (q / "c0" / "bad.jpg").exists()
    else:
        assert "no worker process could be started" in err and "incomplete" in err, err
        assert (root / "c0" / "bad.jpg").exists() or (q / "c0" / "bad.jpg").exists()  # never lost
