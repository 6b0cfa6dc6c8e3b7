"""Real faults inside a real parallel scan: decoders that segfault, abort, hang or eat memory.

The faults are injected by dsclean.scanning.worker's test-only hook (DSCLEAN_TEST_FAULTS=1), which
crashes / hangs / allocates when it meets a file whose name carries a marker.
"""
from __future__ import annotations

import os
import subprocess
import sys

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
        [sys.executable, "-m", "dsclean", "scan", str(root), "--jobs", "2", "--timeout", "3", "--max-memory", "256M",
         "--report", str(tmp_path / "r"), "--quiet"],
        capture_output=True, text=True, env=env, timeout=300,
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
        out = {v.path: v for v in isolate(str(root), ["a.jpg", "b__segfault__.jpg", "c.jpg"], CheckOptions(), parallel=2)}
    finally:
        del os.environ["DSCLEAN_TEST_FAULTS"]
    assert out["a.jpg"].status == "ok"
    assert (out["b__segfault__.jpg"].reason, out["b__segfault__.jpg"].size) == ("decoder_crash", os.path.getsize(root / "b__segfault__.jpg"))
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
    items = [("blob", "a.jpg", 0, len(good)), ("blob", "b.jpg", len(good), len(cut)),
             ("blob", "x__segfault__.jpg", len(good) + len(cut), len(good))]
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
    assert got == [["blob/a.jpg", "ok", "None", str(len(good))], ["blob/b.jpg", "bad", "truncated", str(len(cut))],
                   ["blob/x__segfault__.jpg", "bad", "decoder_crash", str(len(good))]]


def test_chunks_lost_with_a_dead_worker_are_rerun_whole_and_only_the_culprits_file_by_file(tmp_path, monkeypatch):
    """A crash takes every chunk in flight down with the pool; the innocent ones are re-checked in one fresh
    process each, only the chunk that crashes again is checked file by file (one process per file)."""
    from dsclean.scanning import executors
    from dsclean.scanning.check import CheckOptions

    root = tmp_path / "data"
    # the culprit first in its chunk: it crashes while the chunk next to it is still being checked
    chunks = [[f"a{i}.jpg" for i in range(40)], ["b0__segfault__.jpg", "b1.jpg", "b2.jpg"], [f"c{i}.jpg" for i in range(8)]]
    for i, rel in enumerate(r for chunk in chunks for r in chunk):
        write(root, rel, synth.jpeg(256, 256, seed=i))
    isolated = []
    real = executors.isolate
    monkeypatch.setattr(executors, "isolate", lambda r, rels, *a: isolated.append(list(rels)) or real(r, rels, *a))
    monkeypatch.setenv("DSCLEAN_TEST_FAULTS", "1")
    out = [v for chunk in executors.run_checks(str(root), chunks, CheckOptions(), 2, "processes") for v in chunk]
    assert sorted(v.path for v in out) == sorted(r for chunk in chunks for r in chunk)  # each file once
    assert {v.path: v.reason for v in out if v.status != "ok"} == {"b0__segfault__.jpg": "decoder_crash"}
    assert isolated == [chunks[1]]  # file by file: the culprit's chunk alone
