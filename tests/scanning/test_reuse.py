"""Re-scan fast path: ok rows of the previous results reused for unchanged files (dsclean.scanning.reuse).

Most tests delete the scan cache after the first scan: what is still reused can then only
come from the previous results, so they test the fast path, not the cache behind it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image
from support import synth
from support.files import write
from support.treegen import make_tree

import dsclean
from dsclean.locations import root_state_dir
from dsclean.quality.flags import FlagOptions
from dsclean.scanning.cache import cached_rows
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.scanner import ScanOptions, scan


def _scan(root, tmp_path, **kw):
    kw.setdefault("report_dir", str(tmp_path / "r"))
    kw.setdefault("jobs", 1)
    kw.setdefault("backend", "threads")
    return scan(str(root), ScanOptions(**kw))


def _rows(report) -> dict[str, dict]:
    return {os.fsdecode(r["path"]): r for r in dsclean.read_results(str(report)).to_pylist()}


def _drop_cache(root) -> None:
    shutil.rmtree(Path(root_state_dir(str(root))) / "scan_cache", ignore_errors=True)


def _make(root) -> None:
    make_tree(root)  # 6 ok, 6 bad


def test_ok_rows_come_from_the_previous_results(tmp_path):
    root = tmp_path / "data"
    _make(root)
    first = _scan(root, tmp_path, dry_run=True)
    before = _rows(tmp_path / "r")
    _drop_cache(root)
    again = _scan(root, tmp_path, dry_run=True)
    ok = sum(r["status"] == "ok" for r in before.values())
    assert ok == 6 and again.cached == ok  # the bad ones are checked again (they go through the cache path)
    assert _rows(tmp_path / "r") == before  # every field, facts and flags included
    assert (again.files, again.bad, again.counts, again.bytes) == (first.files, first.bad, first.counts, first.bytes)
    # and the next re-scan (cache refilled with the bad ones by the last run) reuses all
    assert _scan(root, tmp_path, dry_run=True).cached == 12


def test_touched_and_resized_files_are_checked_again(tmp_path):
    root = tmp_path / "data"
    write(root, "a/one.jpg", synth.jpeg(32, 32, seed=1))
    write(root, "a/two.jpg", synth.jpeg(32, 32, seed=2))
    write(root, "a/three.jpg", synth.jpeg(32, 32, seed=3))
    _scan(root, tmp_path, dry_run=True)
    _drop_cache(root)
    # same size, new mtime
    st = os.stat(root / "a/one.jpg")
    os.utime(root / "a/one.jpg", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    # size changed (now damaged), mtime put back as it was
    st = os.stat(root / "a/two.jpg")
    data = (root / "a/two.jpg").read_bytes()
    (root / "a/two.jpg").write_bytes(synth.truncate(data, 0.5))
    os.utime(root / "a/two.jpg", ns=(st.st_atime_ns, st.st_mtime_ns))
    s = _scan(root, tmp_path, dry_run=True)
    assert s.cached == 1  # only three.jpg
    rows = _rows(tmp_path / "r")
    assert rows["a/two.jpg"]["status"] == "bad" and rows["a/two.jpg"]["size"] == len(data) // 2
    assert rows["a/one.jpg"]["status"] == "ok"
    assert rows["a/one.jpg"]["mtime_ns"] == os.stat(root / "a/one.jpg").st_mtime_ns


def test_results_of_other_options_or_rescan_are_not_reused(tmp_path):
    root = tmp_path / "data"
    _make(root)
    _scan(root, tmp_path, dry_run=True)
    _drop_cache(root)
    assert _scan(root, tmp_path, dry_run=True, check=CheckOptions(lenient=True)).cached == 0
    assert _scan(root, tmp_path, dry_run=True, rescan=True, check=CheckOptions(lenient=True)).cached == 0
    assert _scan(root, tmp_path, dry_run=True, use_cache=False, check=CheckOptions(lenient=True)).cached == 0
    # the last results are the lenient ones: a default scan reuses none of them either
    _drop_cache(root)
    assert _scan(root, tmp_path, dry_run=True).cached == 0


def test_results_of_another_root_are_not_reused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        write(root, "x/pic.jpg", synth.jpeg(16, 16))
    _scan(a, tmp_path, dry_run=True)
    assert _scan(b, tmp_path, dry_run=True).cached == 0  # same report folder, same paths, another tree


def _grey(level: int) -> bytes:
    return synth.encode_image(Image.new("RGB", (64, 64), (level, level, level)), "PNG")


def test_flags_follow_todays_thresholds_on_reused_rows(tmp_path):
    root = tmp_path / "data"
    write(root, "dim.png", _grey(20))  # mean luma 0.078: dark at 0.10, not at 0.05
    write(root, "photo.png", synth.png(64, 64))
    _scan(root, tmp_path, dry_run=True)
    assert "dark" in _rows(tmp_path / "r")["dim.png"]["flags"]
    _drop_cache(root)
    s = _scan(root, tmp_path, dry_run=True, flags=FlagOptions(dark=0.05))
    assert s.cached == 2 and "dark" not in s.flags
    assert "dark" not in _rows(tmp_path / "r")["dim.png"]["flags"]
    s = _scan(root, tmp_path, dry_run=True)  # back to the defaults: the flag is back
    assert s.cached == 2 and s.flags.get("dark") == 1
    assert "dark" in _rows(tmp_path / "r")["dim.png"]["flags"]


def test_reused_row_with_a_quarantine_flag_is_moved(tmp_path):
    root = tmp_path / "data"
    write(root, "dim.png", _grey(20))
    write(root, "photo.png", synth.png(64, 64))
    _scan(root, tmp_path, dry_run=True)
    _drop_cache(root)
    s = _scan(root, tmp_path, quarantine=str(tmp_path / "q"), quarantine_flags=("dark",))
    assert s.cached == 2 and s.quarantined == 1 and s.flag_quarantined == 1
    assert not (root / "dim.png").exists() and (root / "photo.png").exists()
    assert len(list((tmp_path / "q").rglob("dim.png"))) == 1


@pytest.mark.slow  # fault injection: kill -9 mid-rescan
def test_kill_9_mid_rescan_then_resume(tmp_path):
    """Every file touched after a full scan; the re-scan checking them is killed: the previous results
    stay whole, and the resumed scan reuses what the killed one committed to the cache."""
    root = tmp_path / "data"
    small, large = synth.jpeg(8, 8), synth.jpeg(256, 256)
    n = 6000
    for i in range(n):
        write(root, f"c/{i}.jpg", small + str(i).encode())
    assert _scan(root, tmp_path, dry_run=True).files == n  # quick: tiny files
    touched = 1_700_000_000 * 10**9
    for i in range(n):  # rewritten larger (slow enough to kill the re-scan midway), one mtime for all
        write(root, f"c/{i}.jpg", large + str(i).encode())
        os.utime(root / f"c/{i}.jpg", ns=(touched, touched))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dsclean",
            "scan",
            str(root),
            "--jobs",
            "1",
            "--quiet",
            "--dry-run",
            "--report",
            str(tmp_path / "r"),
        ]
    )
    cache = Path(root_state_dir(str(root))) / "scan_cache"
    deadline = time.time() + 120
    while time.time() < deadline and _rows_with_mtime(cache, touched) == 0:  # the killed run's first commit
        time.sleep(0.05)
    assert proc.poll() is None, "the re-scan finished before it could be killed"
    proc.kill()
    proc.wait()
    recorded = _rows_with_mtime(cache, touched)
    assert 0 < recorded <= n  # usually part of them; on a loaded machine the killed run may have checked all
    assert {r["mtime_ns"] for r in _rows(tmp_path / "r").values()} != {touched}  # the old results, whole
    s = _scan(root, tmp_path, dry_run=True)
    assert s.files == n and s.cached == recorded and s.bad == 0
    rows = _rows(tmp_path / "r")
    assert len(rows) == n and {r["mtime_ns"] for r in rows.values()} == {touched}
    assert _scan(root, tmp_path, dry_run=True).cached == n  # and now all from the previous results


def _rows_with_mtime(cache: Path, mtime_ns: int) -> int:
    return cached_rows(str(cache), mtime_ns)


def test_previous_results_in_another_order_are_matched(tmp_path):
    """Results written in completion order (several workers) are not in discovery order: still matched."""
    import pyarrow.parquet as pq

    root = tmp_path / "data"
    for i in range(40):
        write(root, f"d{i % 3}/{i}.jpg", synth.jpeg(8, 8, seed=i))
    _scan(root, tmp_path, dry_run=True)
    before = _rows(tmp_path / "r")
    path = tmp_path / "r" / "scan_results.parquet"
    table = pq.read_table(path)
    shuffled = table.take(list(range(table.num_rows))[::-1][::2] + list(range(table.num_rows))[::-1][1::2])
    pq.write_table(shuffled, path, row_group_size=7)  # keeps the schema metadata; several row groups
    _drop_cache(root)
    s = _scan(root, tmp_path, dry_run=True)
    assert s.cached == 40
    assert _rows(tmp_path / "r") == before


def test_every_part_of_a_job_array_is_reused(tmp_path):
    root = tmp_path / "data"
    _make(root)
    for i in range(2):
        _scan(root, tmp_path, dry_run=True, shard=(i, 2))
    s = _scan(root, tmp_path, dry_run=True)  # the whole tree: its own (empty) cache, both parts' results
    assert s.files == 12 and s.cached == 6 and s.bad == 6


def test_a_file_moved_for_a_flag_and_put_back_is_checked_again(tmp_path):
    """Its row says ok (a flag is not a verdict), but it left the root: back with the same size and
    mtime (a restore, cp -p), it is checked, not matched."""
    root = tmp_path / "data"
    write(root, "dim.png", _grey(20))
    write(root, "photo.png", synth.png(64, 64))
    s = _scan(root, tmp_path, quarantine=str(tmp_path / "q"), quarantine_flags=("dark",))
    assert s.quarantined == 1 and not (root / "dim.png").exists()
    [moved] = list((tmp_path / "q").rglob("dim.png"))
    os.rename(moved, root / "dim.png")  # keeps size and mtime
    _drop_cache(root)
    s = _scan(root, tmp_path, dry_run=True)
    assert s.files == 2 and s.cached == 1  # photo.png only
    assert "dark" in _rows(tmp_path / "r")["dim.png"]["flags"]


def test_a_file_restored_with_dsclean_restore_is_checked_again_once(tmp_path):
    """dsclean restore drops the file's line from the problems list; the quarantine's journal still says it was
    put back after the previous scan, so the re-scan checks it; the scan after that reuses its new row."""
    root, q = tmp_path / "data", tmp_path / "q"
    write(root, "dim.png", _grey(20))
    write(root, "photo.png", synth.png(64, 64))
    s = _scan(root, tmp_path, quarantine=str(q), quarantine_flags=("dark",))
    assert s.quarantined == 1 and not (root / "dim.png").exists()
    dsclean.restore(str(q))
    assert (root / "dim.png").exists()
    _drop_cache(root)
    s = _scan(root, tmp_path, quarantine=str(q))  # the same quarantine, no flag moves this time
    assert s.files == 2 and s.cached == 1  # photo.png only: dim.png was checked
    _drop_cache(root)
    s = _scan(root, tmp_path, quarantine=str(q))
    assert s.files == 2 and s.cached == 2  # that restore is older than the previous results now
