"""Round 3 (rel24b) adversarial repro: repeated kill -9 of the forkserver, of the resource tracker, and of
pack workers. PYTHONPATH=. python docs/reliability/repro/r3_kills.py N  (N runs of each case)."""
import os, signal, subprocess, sys, tempfile, time
from collections import Counter
from pathlib import Path
sys.path[:0] = ["tests", "tests/scanning", "tests/pack"]
import psutil
from test_forkserver_death import _kill_servers_in_the_window, _tree
from test_worker_death import _index, _pack, PY
from support.packing import folder_digests

n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
tally = Counter()
for kills, want in ((1, 0), (2, 3), (3, 3)):
    for _ in range(n):
        t = Path(tempfile.mkdtemp(prefix="r3k"))
        _tree(t / "d")
        p = subprocess.Popen([PY, "-m", "dsclean", "scan", str(t / "d"), "--quarantine", str(t / "q"), "--report",
                              str(t / "r"), "-j", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        done = _kill_servers_in_the_window(p, kills, time.monotonic() + 60)
        _, err = p.communicate(timeout=120)
        ok = p.returncode == want and "Traceback" not in err and (t / "r" / "scan_results.parquet").exists() \
            and ((t / "d" / "c0" / "bad.jpg").exists() or (t / "q" / "c0" / "bad.jpg").exists())
        tally[f"forkserver killed {kills}x (in the window {done}x) -> exit {want}: {'held' if ok else 'FAILED'}"] += 1
for _ in range(n):  # the resource tracker killed as soon as it exists
    t = Path(tempfile.mkdtemp(prefix="r3k"))
    _tree(t / "d")
    p = subprocess.Popen([PY, "-m", "dsclean", "scan", str(t / "d"), "--quarantine", str(t / "q"), "--report",
                          str(t / "r"), "-j", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = False
    while p.poll() is None and not killed:
        for c in psutil.Process(p.pid).children():
            with __import__("contextlib").suppress(psutil.Error):
                if not c.net_connections(kind="unix"):  # the tracker: no socket
                    os.kill(c.pid, signal.SIGKILL)
                    killed = True
                    break
    _, err = p.communicate(timeout=120)
    ok = p.returncode == 0 and "Traceback" not in err and (t / "q" / "c0" / "bad.jpg").exists()
    tally[f"resource tracker killed at start (killed={killed}) -> exit 0, bad file quarantined: {'held' if ok else 'FAILED ' + err[-300:]}"] += 1
ref_dir = Path(tempfile.mkdtemp(prefix="r3k"))
index = _index(ref_dir)
subprocess.run([PY, "-m", "dsclean", "pack", index, "--samples-per-shard", "1", "--jobs", "2", "--no-fsync", "-q",
                "-o", str(ref_dir / "ref")], check=True)
ref = folder_digests(ref_dir / "ref")
for kills, after in ((1, 20), (2, 60), (1, 230)):
    for i in range(n):
        out = ref_dir / f"k{kills}-{after}-{i}"
        proc, done, err = _pack(index, out, kill_after=after, kills=kills, deadline=time.monotonic() + 120)
        if proc.returncode == 3:  # workers died too often: a resume must finish it, byte-identical
            subprocess.run([PY, "-m", "dsclean", "pack", index, "--samples-per-shard", "1", "--jobs", "2",
                            "--no-fsync", "-q", "-o", str(out)], check=True, timeout=300)
        ok = proc.returncode in (0, 3) and "Traceback" not in err and folder_digests(out) == ref
        tally[f"pack --jobs 2, {kills} worker kill(s) after {after} shards -> exit {proc.returncode}, exited, "
              f"byte-identical: {'held' if ok else 'FAILED'}"] += 1
for k, v in sorted(tally.items()):
    print(f"{v:3d}  {k}")
