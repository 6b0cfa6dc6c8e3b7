"""Incremental re-scans: only new or changed files are checked again."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from support import synth
from support.files import write
from support.treegen import make_tree

import dsclean
from dsclean.scanning.cache import cached_rows
from dsclean.scanning.scanner import ScanOptions, scan


def _scan(root, tmp_path, **kw):
    kw.setdefault("report_dir", str(tmp_path / "r"))
    kw.setdefault("jobs", 1)
    return scan(str(root), ScanOptions(**kw))


def _rows(tmp_path):
    t = dsclean.read_results(str(tmp_path / "r")).sort_by("path")
    return t.to_pylist()


def test_unchanged_tree_is_not_checked_again(tmp_path):
    root = tmp_path / "data"
    make_tree(root)
    first = _scan(root, tmp_path, dry_run=True)
    rows = _rows(tmp_path)
    second = _scan(root, tmp_path, dry_run=True)
    assert (first.cached, second.cached) == (0, 12)
    assert _rows(tmp_path) == rows  # the same verdicts, from the cache
    assert second.bad == first.bad == 6


def test_changed_new_and_option_changes_are_checked(tmp_path):
    root = tmp_path / "data"
    make_tree(root)
    _scan(root, tmp_path, dry_run=True)
    write(root, "cats/good0.jpg", synth.HTML_PAGE)  # changed content (size differs)
    write(root, "new/fresh.jpg", synth.jpeg(8, 8))
    s = _scan(root, tmp_path, dry_run=True)
    assert s.cached == 11 and s.files == 13
    verdicts = {v.path: v for v in dsclean.iter_verdicts(str(tmp_path / "r"))}
    assert verdicts["cats/good0.jpg"].reason == "not_media" and verdicts["new/fresh.jpg"].status == "ok"
    # same size, new mtime: checked again
    os.utime(root / "new/fresh.jpg", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert _scan(root, tmp_path, dry_run=True).cached == 12
    # different check options: everything again
    from dsclean.scanning.check import CheckOptions

    assert _scan(root, tmp_path, dry_run=True, check=CheckOptions(lenient=True)).cached == 0
    assert _scan(root, tmp_path, dry_run=True, rescan=True, check=CheckOptions(lenient=True)).cached == 0


def test_cached_bad_verdict_is_still_quarantined(tmp_path):
    root = tmp_path / "data"
    make_tree(root)
    _scan(root, tmp_path, dry_run=True)
    s = _scan(root, tmp_path, quarantine=str(tmp_path / "q"))
    assert s.cached == 12 and s.quarantined == 6
    assert len(list((tmp_path / "q").rglob("bad*"))) == 6


def test_rerun_after_kill_9_resumes_from_the_cache(tmp_path):
    root = tmp_path / "data"
    good = synth.jpeg(256, 256)
    for i in range(8000):
        write(root, f"c/{i}.jpg", good + str(i).encode())
    proc = subprocess.Popen([sys.executable, "-m", "dsclean", "scan", str(root), "--jobs", "1", "--quiet",
                             "--report", str(tmp_path / "r")])
    from dsclean.locations import root_state_dir

    cache = Path(root_state_dir(str(root))) / "scan_cache"
    deadline = time.time() + 120
    while time.time() < deadline and _cached_rows(cache) == 0:  # wait for the first commit
        time.sleep(0.05)
    assert proc.poll() is None, "the scan finished before it could be killed"
    proc.kill()
    proc.wait()
    recorded = _cached_rows(cache)
    s = _scan(root, tmp_path)
    assert s.files == 8000 and s.cached == recorded > 0
    assert s.bad == 0


def _cached_rows(cache) -> int:
    return cached_rows(str(cache))


def test_verdicts_about_the_moment_are_not_cached(tmp_path):
    """A timeout (or permission error) says nothing lasting about the bytes: check again next time."""
    import subprocess

    root = tmp_path / "data"
    write(root, "a/slow__hang__.jpg", synth.jpeg(8, 8))
    write(root, "a/ok.jpg", synth.jpeg(8, 8, seed=1))
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1"}
    subprocess.run([sys.executable, "-m", "dsclean", "scan", str(root), "--timeout", "1", "--jobs", "1",
                    "--quiet", "--report", str(tmp_path / "r")], check=True, env=env, timeout=120)
    assert {v.path: v.reason for v in dsclean.iter_verdicts(str(tmp_path / "r"))}["a/slow__hang__.jpg"] == "timeout"
    from dsclean.scanning.check import CheckOptions

    # the same options (so the same cache table); the stall is gone: checked again, and fine
    s = _scan(root, tmp_path, dry_run=True, check=CheckOptions(timeout=1))
    assert s.cached == 1 and s.bad == 0
