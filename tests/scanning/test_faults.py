"""Real faults inside a real parallel scan: decoders that segfault, abort, hang or eat memory.

The faults are injected by dsclean.scanning.worker's test-only hook (DSCLEAN_TEST_FAULTS=1), which
crashes / hangs / allocates when it meets a file whose name carries a marker.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pytest
from support import synth
from support.files import write

import dsclean


def _tree(root, n_good=60):
    for i in range(n_good):
        write(root, f"c{i % 3}/good{i:03d}.jpg", synth.jpeg(16, 16, seed=i))
    faults = {
        "c0/x__segfault__.jpg": ("decoder_crash", "SIGSEGV"),
        "c1/y__abort__.png": ("decoder_crash", "SIGABRT"),
        "c2/z__hang__.jpg": ("timeout", "longer than 3 s"),
        "c1/w__oom__.jpg": ("too_large", "memory"),
    }
    for rel in faults:
        write(root, rel, synth.jpeg(16, 16, seed=999) if rel.endswith(".jpg") else synth.png(8, 8))
    return faults


def test_crashing_hanging_and_hungry_checks_do_not_stop_the_scan(tmp_path):
    root = tmp_path / "data"
    faults = _tree(root)
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsclean",
            "scan",
            str(root),
            "--jobs",
            "2",
            "--timeout",
            "3",
            "--max-memory",
            "256M",
            "--report",
            str(tmp_path / "r"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    verdicts = {v.path: v for v in dsclean.iter_verdicts(str(tmp_path / "r"))}
    assert len(verdicts) == 64  # every file has exactly one verdict
    for rel, (reason, words) in faults.items():
        v = verdicts[rel]
        assert (v.status, v.reason) == ("bad", reason), (rel, v.detail)
        assert words in v.detail, (rel, v.detail)
    good = [v for p, v in verdicts.items() if "good" in p]
    assert len(good) == 60 and all(v.status == "ok" for v in good)


def test_isolation_names_the_culprit_and_keeps_neighbours(tmp_path):
    from dsclean.scanning.check import CheckOptions
    from dsclean.scanning.executors import isolate

    root = tmp_path / "data"
    write(root, "a.jpg", synth.jpeg(8, 8))
    write(root, "b__segfault__.jpg", synth.jpeg(8, 8))
    write(root, "c.jpg", synth.HTML_PAGE)
    os.environ["DSCLEAN_TEST_FAULTS"] = "1"
    try:
        out = {
            v.path: v for v in isolate(str(root), ["a.jpg", "b__segfault__.jpg", "c.jpg"], CheckOptions(), parallel=2)
        }
    finally:
        del os.environ["DSCLEAN_TEST_FAULTS"]
    assert out["a.jpg"].status == "ok"
    assert (out["b__segfault__.jpg"].reason, out["b__segfault__.jpg"].size) == (
        "decoder_crash",
        os.path.getsize(root / "b__segfault__.jpg"),
    )
    assert out["c.jpg"].reason == "not_media"


def test_fault_markers_are_inert_without_the_test_switch(tmp_path):
    root = tmp_path / "data"
    write(root, "x__segfault__.jpg", synth.jpeg(8, 8))
    s = dsclean.scan(str(root), dsclean.ScanOptions(jobs=1, report_dir=str(tmp_path / "r")))
    assert s.files == 1 and s.bad == 0


def test_byte_ranges_are_checked_in_the_same_isolated_pool(tmp_path):
    """FileSlices (samples inside one file, as `verify --decode` checks shards): same verdicts, same isolation."""
    good, cut = synth.jpeg(32, 32, seed=1), synth.truncate(synth.jpeg(64, 64, seed=2), 0.6)
    blob = good + cut + good
    (tmp_path / "blob").write_bytes(blob)
    items = [
        ("blob", "a.jpg", 0, len(good)),
        ("blob", "b.jpg", len(good), len(cut)),
        ("blob", "x__segfault__.jpg", len(good) + len(cut), len(good)),
    ]
    code = (
        "import sys\n"
        "from dsclean.scanning.check import CheckOptions\n"
        "from dsclean.scanning.executors import run_checks\n"
        "from dsclean.scanning.worker import FileSlices\n"
        f"items = {items!r}\n"
        f"for chunk in run_checks(FileSlices({str(tmp_path)!r}), [items], CheckOptions(), 1):\n"
        "    for v in chunk:\n"
        "        print(v.path, v.status, v.reason, v.size)\n"
    )
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    got = sorted(line.split() for line in out.stdout.splitlines())
    assert got == [
        ["blob/a.jpg", "ok", "None", str(len(good))],
        ["blob/b.jpg", "bad", "truncated", str(len(cut))],
        ["blob/x__segfault__.jpg", "bad", "decoder_crash", str(len(good))],
    ]


def _watch_processes(monkeypatch, executors) -> list:
    """Every fresh process the isolation ran, as its outcome (files, exit code, overdue, where it ended)."""
    seen = []
    real = executors._in_children

    def counted(*args, **kwargs):
        for outcome in real(*args, **kwargs):
            seen.append(outcome)
            yield outcome

    monkeypatch.setattr(executors, "_in_children", counted)
    return seen


def _lost_chunks_tree(root, chunks, broken=()):
    jpeg, cut = synth.jpeg(8, 8), synth.truncate(synth.jpeg(64, 64), 0.5)
    for rel in (r for chunk in chunks for r in chunk):
        write(root, rel, cut if rel in broken else jpeg)


def test_chunks_lost_with_a_dead_worker_are_rerun_whole_and_only_the_culprits_split(tmp_path, monkeypatch):
    """A crash takes every chunk in flight down with the pool; the innocent ones are re-checked in one fresh
    process each, and only the chunk that crashes again is split (where it died)."""
    from dsclean.scanning import executors
    from dsclean.scanning.check import CheckOptions

    root = tmp_path / "data"
    # the culprit first in its chunk: it crashes while the chunk next to it is still being checked
    chunks = [
        [f"a{i}.jpg" for i in range(40)],
        ["b0__segfault__.jpg", "b1.jpg", "b2.jpg"],
        [f"c{i}.jpg" for i in range(8)],
    ]
    _lost_chunks_tree(root, chunks)
    ran = _watch_processes(monkeypatch, executors)
    monkeypatch.setenv("DSCLEAN_TEST_FAULTS", "1")
    out = [v for chunk in executors.run_checks(str(root), chunks, CheckOptions(), 2, "processes") for v in chunk]
    assert sorted(v.path for v in out) == sorted(r for chunk in chunks for r in chunk)  # each file once
    assert {v.path: v.reason for v in out if v.status != "ok"} == {"b0__segfault__.jpg": "decoder_crash"}
    died = [o.rels for o in ran if o.verdicts is None]
    assert died == [chunks[1], ["b0__segfault__.jpg"]]  # the culprit's chunk, then the culprit alone
    assert ["b1.jpg", "b2.jpg"] in [o.rels for o in ran]  # the files after it: one process, not one each


def test_one_crashing_file_among_many_costs_a_few_processes_not_one_per_file(tmp_path, monkeypatch):
    """One segfault in a chunk of 300 files: the culprit gets its crash verdict from a process of its own,
    every other file its real verdict, and the isolation forks O(log n) processes (it used to be n + 1)."""
    from dsclean.scanning import executors
    from dsclean.scanning.check import CheckOptions

    root = tmp_path / "data"
    rels = [f"f{i:03d}.jpg" for i in range(300)]
    rels[137] = "f137__segfault__.jpg"
    broken = {"f020.jpg", "f200.jpg"}
    _lost_chunks_tree(root, [rels], broken)
    ran = _watch_processes(monkeypatch, executors)
    monkeypatch.setenv("DSCLEAN_TEST_FAULTS", "1")
    # 2 workers: the scan's last chunks go out in pieces (75, 57, 42, ... files), those in flight lost with the pool
    chunk = [v for part in executors.run_checks(str(root), [rels], CheckOptions(), 2, "processes") for v in part]
    assert sorted(v.path for v in chunk) == rels  # each file once
    bad = {v.path: (v.reason, v.detail) for v in chunk if v.status != "ok"}
    assert bad == {
        "f020.jpg": ("truncated", bad["f020.jpg"][1]),
        "f200.jpg": ("truncated", bad["f200.jpg"][1]),
        "f137__segfault__.jpg": ("decoder_crash", "checking this file killed the decoder's process with SIGSEGV"),
    }
    assert ["f137__segfault__.jpg"] in [o.rels for o in ran if o.exitcode == -11]  # its verdict: its own process
    assert len(ran) <= 2 * math.ceil(math.log2(len(rels))) + 2, [len(o.rels) for o in ran]


def test_every_culprit_of_a_chunk_is_found(tmp_path, monkeypatch):
    """Two culprits in one chunk (and one at its very end): each gets its own verdict, the rest theirs."""
    from dsclean.scanning import executors
    from dsclean.scanning.check import CheckOptions

    root = tmp_path / "data"
    rels = [f"f{i:03d}.jpg" for i in range(120)]
    rels[30], rels[90], rels[119] = "f030__segfault__.jpg", "f090__abort__.jpg", "f119__segfault__.jpg"
    _lost_chunks_tree(root, [rels], {"f050.jpg"})
    ran = _watch_processes(monkeypatch, executors)
    monkeypatch.setenv("DSCLEAN_TEST_FAULTS", "1")
    out = executors.isolate(str(root), rels, CheckOptions(), parallel=2)
    assert [v.path for v in out] == rels
    assert {v.path: (v.reason, v.detail.rsplit(" ", 1)[-1]) for v in out if v.status != "ok"} == {
        "f030__segfault__.jpg": ("decoder_crash", "SIGSEGV"),
        "f090__abort__.jpg": ("decoder_crash", "SIGABRT"),
        "f119__segfault__.jpg": ("decoder_crash", "SIGSEGV"),
        "f050.jpg": ("truncated", out[50].detail.rsplit(" ", 1)[-1]),
    }
    assert len(ran) <= 12, [len(o.rels) for o in ran]  # file by file: 121


def test_a_hanging_file_meets_its_timeout_once_in_the_isolation(tmp_path, monkeypatch):
    """A hanging file: its worker's timer ends the pool, then its chunk's fresh process, which says which
    file it was on: that file gets its timeout verdict there, with no third wait alone; the files after it are
    still checked."""
    from dsclean.scanning import executors
    from dsclean.scanning.check import CheckOptions

    root = tmp_path / "data"
    rels = [f"f{i:02d}.jpg" for i in range(40)]
    rels[25] = "f25__hang__.jpg"
    _lost_chunks_tree(root, [rels], {"f30.jpg"})
    ran = _watch_processes(monkeypatch, executors)
    monkeypatch.setenv("DSCLEAN_TEST_FAULTS", "1")
    (chunk,) = executors.run_checks(str(root), [rels], CheckOptions(timeout=1), 1, "processes")
    assert [v.path for v in chunk] == rels
    assert {v.path: v.reason for v in chunk if v.status != "ok"} == {
        "f25__hang__.jpg": "timeout",
        "f30.jpg": "truncated",
    }
    assert "longer than 1 s" in chunk[25].detail
    timed_out = [o for o in ran if o.verdicts is None]
    assert [(o.rels, o.at, o.exitcode) for o in timed_out] == [(rels, 25, -signal.SIGALRM)]  # once, in its chunk
    assert sorted(len(o.rels) for o in ran) == [14, 25, 40]  # then the files after it, the files before it


def _children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # fault injection: a scan killed during isolation
def test_a_scan_killed_during_isolation_resumes_and_leaves_no_process(tmp_path):
    """kill -9 of the scan while it isolates a hanging file's chunk: its processes end on their own (their timer,
    their parent's end), and the scan run again gives every file one verdict, the culprit its timeout."""
    root = tmp_path / "data"
    rels = [f"c{i % 2}/f{i:03d}.jpg" for i in range(300)]
    rels[150] = "c0/x__hang__.jpg"
    _lost_chunks_tree(root, [rels], {"c1/f201.jpg"})
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "dsclean",
        "scan",
        str(root),
        "--jobs",
        "2",
        "--timeout",
        "2",
        "--facts",
        "none",
        "--report",
        str(tmp_path / "r"),
        "--quiet",
    ]
    scan = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: set[int] = set()  # every process under the scan: its forkserver, pool workers, then fresh isolation processes
    deadline = time.monotonic() + 120
    server_children: set[int] = set()
    while len(server_children) < 3 and scan.poll() is None and time.monotonic() < deadline:  # 2 workers, then isolation
        for child in _children(scan.pid):
            seen.add(child)
            server_children |= _children(child)
        seen |= server_children
        time.sleep(0.02)
    assert len(server_children) >= 3, "the scan ended before it isolated anything"
    scan.kill()
    assert scan.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in seen if _alive(p)]  # nothing outlives the scan past its --timeout
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    verdicts = {v.path: v for v in dsclean.iter_verdicts(str(tmp_path / "r"))}
    assert sorted(verdicts) == sorted(rels)
    assert {p: v.reason for p, v in verdicts.items() if v.status != "ok"} == {
        "c0/x__hang__.jpg": "timeout",
        "c1/f201.jpg": "truncated",
    }


def test_a_file_stuck_past_its_timer_is_ended_by_the_per_file_overdue_rule(tmp_path, monkeypatch):
    """A decoder that blocks the timer's signal: the parent ends the process once its current file has not changed
    for --timeout + the grace, names that file `timeout` without a process of its own, and checks the others."""
    from dsclean.scanning import executors
    from dsclean.scanning.check import CheckOptions

    root = tmp_path / "data"
    rels = [f"f{i:02d}.jpg" for i in range(20)]
    rels[12] = "f12__stuck__.jpg"
    _lost_chunks_tree(root, [rels])
    ran = _watch_processes(monkeypatch, executors)
    monkeypatch.setenv("DSCLEAN_TEST_FAULTS", "1")
    out = executors.isolate(str(root), rels, CheckOptions(timeout=0.5), parallel=2)
    assert [(v.path, v.reason) for v in out if v.status != "ok"] == [("f12__stuck__.jpg", "timeout")]
    assert "longer than 0.5 s; the worker was killed" in out[12].detail
    assert [(o.overdue, o.at) for o in ran if o.verdicts is None] == [(True, 12)]
    assert sorted(len(o.rels) for o in ran) == [7, 12, 20]
