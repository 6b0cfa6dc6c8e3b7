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
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsclean", "scan", str(root), "--jobs", "1", "--quiet", "--report", str(tmp_path / "r")]
    )
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
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dsclean",
            "scan",
            str(root),
            "--timeout",
            "1",
            "--jobs",
            "1",
            "--quiet",
            "--report",
            str(tmp_path / "r"),
        ],
        check=True,
        env=env,
        timeout=120,
    )
    assert {v.path: v.reason for v in dsclean.iter_verdicts(str(tmp_path / "r"))}["a/slow__hang__.jpg"] == "timeout"
    from dsclean.scanning.check import CheckOptions

    # the same options (so the same cache table); the stall is gone: checked again, and fine
    s = _scan(root, tmp_path, dry_run=True, check=CheckOptions(timeout=1))
    assert s.cached == 1 and s.bad == 0


# ---- the cache's files: segments, tombstones, merging, compaction ------------------------------------


def _verdict_batch(rows: list[tuple[str, int, int, str, str | None]]):
    """A results batch of (path, size, mtime_ns, status, reason) rows, the other fields empty."""
    from dsclean.scanning.schema import verdicts_batch
    from dsclean.scanning.verdict import Verdict

    return verdicts_batch(
        [Verdict(p, "image", status, reason, "", size, mtime) for p, size, mtime, status, reason in rows]
    )


def test_cache_keeps_the_newest_row_and_honours_tombstones(tmp_path):
    from dsclean.scanning.cache import ScanCache
    from dsclean.scanning.check import CheckOptions

    path = str(tmp_path / "scan_cache")
    c = ScanCache(path, CheckOptions(), commit_every=2)
    c.add_batch(
        _verdict_batch(
            [
                ("a.jpg", 1, 10, "ok", None),
                ("b.jpg", 2, 20, "bad", "truncated"),
                ("c.jpg", 3, 30, "bad", "timeout"),
                ("d.jpg", 4, 40, "ok", None),
            ]
        ),
        skip=[b"d.jpg"],
    )  # d moved now: never cached
    c.close()
    c = ScanCache(path, CheckOptions())
    assert set(c.lookup([("a.jpg", 1, 10), ("b.jpg", 2, 20), ("c.jpg", 3, 30), ("d.jpg", 4, 40)])) == {"a.jpg", "b.jpg"}
    assert c.lookup([("a.jpg", 1, 11)]) == {}  # another mtime: no verdict
    c.add_batch(_verdict_batch([("a.jpg", 5, 50, "warn", "trailing_data")]))
    c.forget("b.jpg")  # quarantined: a file put back at that path is checked again
    c.close()
    c = ScanCache(path, CheckOptions())
    got = c.lookup([("a.jpg", 5, 50), ("b.jpg", 2, 20), ("a.jpg", 1, 10)])
    assert list(got) == ["a.jpg"] and got["a.jpg"][2:4] == ("warn", "trailing_data")
    assert ScanCache(path, CheckOptions(lenient=True)).rows_of(["a.jpg"]) == {}  # other options: nothing
    c.close()


def test_each_run_keeps_its_segments_and_many_runs_are_compacted(tmp_path):
    """A run's segments are not merged when it ends (no row read back and written again); past MAX_RUNS
    runs a closing run compacts them all into one file: the newest row per path, no tombstone."""
    from dsclean.scanning import cache as C
    from dsclean.scanning.check import CheckOptions

    path = str(tmp_path / "scan_cache")
    for run in range(C.MAX_RUNS + 1):
        c = C.ScanCache(path, CheckOptions(), commit_every=3)
        c.add_batch(_verdict_batch([(f"r{run}-{i}.jpg", i, run, "ok", None) for i in range(10)]))  # a segment
        c.add_batch(_verdict_batch([("same.jpg", 1, run, "ok", None)]))  # every run: a newer verdict
        if run == 2:
            c.forget("r0-0.jpg")
        c.close()  # writes the second segment
        assert len(os.listdir(c.folder)) - 1 == (2 * (run + 1) if run < C.MAX_RUNS else 1)  # minus the lock file
    assert C.cached_rows(path) == 10 * (C.MAX_RUNS + 1) - 1 + 1  # newest of same.jpg only, no r0-0, no tombstone
    c = C.ScanCache(path, CheckOptions())
    assert c.lookup([("same.jpg", 1, C.MAX_RUNS)]) and not c.lookup([("same.jpg", 1, 0)])
    assert not c.lookup([("r0-0.jpg", 0, 0)]) and c.lookup([("r0-1.jpg", 1, 0)])


def test_many_segments_are_compacted_whatever_the_runs(tmp_path, monkeypatch):
    """MAX_SEGMENTS bounds the files of one options folder even when few runs wrote them."""
    from dsclean.scanning import cache as C
    from dsclean.scanning.check import CheckOptions

    monkeypatch.setattr(C, "MAX_SEGMENTS", 5)
    path = str(tmp_path / "scan_cache")
    c = C.ScanCache(path, CheckOptions(), commit_every=2)
    for i in range(5):  # five segments: not past the bound
        c.add_batch(_verdict_batch([(f"{i}-{j}.jpg", j, i, "ok", None) for j in range(2)]))
    c.close()
    assert len(_segment_names(c.folder)) == 5
    c = C.ScanCache(path, CheckOptions(), commit_every=2)
    c.add_batch(_verdict_batch([("last.jpg", 1, 1, "ok", None)]))
    c.close()  # six: compacted into one
    assert len(_segment_names(c.folder)) == 1 and C.cached_rows(path) == 11


def _segment_names(folder: str) -> list[str]:
    return [n for n in os.listdir(folder) if n.endswith(".arrow")]


def test_a_rescan_from_a_run_of_many_segments_reuses_every_verdict(tmp_path, monkeypatch):
    """The cache alone (the previous results gone) answers for every file a scan decided, from the many
    segments the scan left (one per commit, not merged), and the re-scan leaves them as they are."""
    from dsclean.scanning import cache as C
    from dsclean.scanning import scanner

    monkeypatch.setattr(scanner, "FRESH_ROWS", 7)  # the scan hands its verdicts over every 7 rows...
    monkeypatch.setattr(
        C.ScanCache.__init__, "__kwdefaults__", {"commit_every": 7, "commit_seconds": 2.0}
    )  # ...and commits them
    root = tmp_path / "data"
    for i in range(40):
        write(root, f"c/{i}.jpg", synth.jpeg(16, 16, seed=i))
    write(root, "c/cut.jpg", synth.truncate(synth.jpeg(64, 64), 0.5))
    state = str(tmp_path / "state")
    first = _scan(root, tmp_path, dry_run=True, state_dir=state, chunk_size=8)
    (folder,) = (tmp_path / "state").rglob("verdicts_*")
    segments = sorted(_segment_names(str(folder)))
    assert first.files == 41 and first.bad == 1 and len(segments) >= 2
    import shutil

    shutil.rmtree(tmp_path / "r")  # no previous results: every verdict must come from the cache's segments
    again = _scan(root, tmp_path, dry_run=True, state_dir=state)
    assert (again.files, again.cached, again.bad) == (41, 41, 1)
    assert sorted(_segment_names(str(folder))) == segments  # nothing new to write, nothing merged


def test_a_torn_segment_or_a_leftover_temp_file_is_never_read(tmp_path):
    """A power loss can leave a renamed segment without its data, a kill -9 a temp file: neither is trusted."""
    from dsclean.scanning import cache as C
    from dsclean.scanning.check import CheckOptions

    path = str(tmp_path / "scan_cache")
    c = C.ScanCache(path, CheckOptions())
    c.add_batch(_verdict_batch([("a.jpg", 1, 10, "ok", None)]))
    c.close()
    (seg,) = [n for n in os.listdir(c.folder) if n.endswith(".arrow")]
    good = Path(c.folder, seg).read_bytes()
    Path(c.folder, "99999999999999999999-1-000001.arrow").write_bytes(b"\0" * len(good))  # torn: zeros
    stale = Path(c.folder, ".x.arrow.1.tmp")
    stale.write_bytes(good)
    os.utime(stale, (0, 0))
    c = C.ScanCache(path, CheckOptions())
    assert set(c.lookup([("a.jpg", 1, 10)])) == {"a.jpg"}
    c.add_batch(_verdict_batch([("b.jpg", 1, 10, "ok", None)]))
    c.close()
    assert not stale.exists()  # a killed writer's temp file, removed by a later run


def test_scan_resumes_after_kill_9_between_segments(tmp_path):
    """The resumed scan re-uses every verdict of every segment the killed scan had written (a kill
    mid-write leaves only a temp file), and the files the killed run had decided are not checked again."""
    root = tmp_path / "data"
    good = synth.jpeg(64, 64)
    for i in range(3000):
        write(root, f"c/{i}.jpg", good + str(i).encode())
    env = {**os.environ, "DSCLEAN_STATE_DIR": str(tmp_path / "state")}
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
        ],
        env=env,
    )
    from dsclean.locations import root_state_dir

    cache = Path(root_state_dir(str(root), str(tmp_path / "state"))) / "scan_cache"
    deadline = time.time() + 120
    while time.time() < deadline and cached_rows(str(cache)) == 0:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    recorded = cached_rows(str(cache))
    assert 0 < recorded <= 3000
    killed = _segments(cache)
    s = _scan(root, tmp_path, dry_run=True, state_dir=str(tmp_path / "state"))
    assert s.files == 3000 and s.cached == recorded and s.bad == 0
    assert killed <= _segments(cache)  # the killed run's segments stay (two runs: nothing compacted)
    assert bool(_segments(cache) - killed) == (recorded < 3000)  # this run's own segments
    assert cached_rows(str(cache)) == 3000


def _segments(cache: Path) -> set[str]:
    return {n for f in cache.iterdir() for n in os.listdir(f) if n.endswith(".arrow")}


_STARTED = """
import sys
from multiprocessing import forkserver
from dsclean.scanning import executors
from dsclean.scanning.scanner import ScanOptions, scan
s = scan(sys.argv[1], ScanOptions(dry_run=True, report_dir=sys.argv[2], jobs=2))
print(s.files, s.cached, executors._local is not None, forkserver._forkserver._forkserver_pid is not None)
"""


def test_a_rescan_with_nothing_to_check_starts_no_worker(tmp_path):
    """Workers (forkserver, pool, its resource tracker) start with the first file to check: a fully
    cached re-scan starts none; a scan with one changed file does."""
    root = tmp_path / "data"
    make_tree(root)

    def run() -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", _STARTED, str(root), str(tmp_path / "r")],
            cwd=str(tmp_path),
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return out.stdout.split()

    assert run() == ["12", "0", "True", "True"]
    assert run() == ["12", "12", "False", "False"]
    write(root, "cats/good0.jpg", synth.jpeg(9, 9))
    assert run() == ["12", "11", "True", "True"]


def test_a_file_quarantined_by_a_fresh_check_and_put_back_is_checked_again(tmp_path):
    """Bit rot keeps size and mtime: the ok row of the first scan must not answer for the file once a
    --rescan has quarantined it and it is put back (a restore, a backup copied with cp -p)."""
    import glob

    root = tmp_path / "data"
    good = synth.jpeg(64, 64)
    p = write(root, "a/x.jpg", good)
    write(root, "a/y.jpg", synth.jpeg(64, 64, seed=1))
    st = os.stat(p)
    assert _scan(root, tmp_path, report_dir=str(tmp_path / "r1"), dry_run=True).bad == 0
    with open(p, "r+b") as f:
        f.write(b"\0" * len(good))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    q = tmp_path / "q"
    rescanned = _scan(root, tmp_path, rescan=True, quarantine=str(q), report_dir=str(tmp_path / "r2"))
    assert rescanned.quarantined == 1 and not p.exists()
    moved = [f for f in glob.glob(str(q / "**" / "x.jpg*"), recursive=True) if os.path.isfile(f)]
    os.rename(moved[0], p)
    assert os.stat(p).st_mtime_ns == st.st_mtime_ns and os.path.getsize(p) == len(good)
    again = _scan(root, tmp_path, dry_run=True, report_dir=str(tmp_path / "r3"))
    assert again.bad == 1 and again.cached == 1  # y.jpg from the cache, x.jpg checked again


def _segment(paths: list[bytes], mtime: int):
    import pyarrow as pa

    from dsclean.scanning.results import SCHEMA

    n = len(paths)
    cols = {f.name: pa.nulls(n, f.type) for f in SCHEMA}
    cols.update(
        path=pa.array(paths, pa.binary()),
        kind=pa.array(["image"] * n),
        status=pa.array(["ok"] * n),
        size=pa.array([10] * n, pa.int64()),
        mtime_ns=pa.array([mtime] * n, pa.int64()),
    )
    return pa.RecordBatch.from_arrays([cols[f.name].cast(f.type) for f in SCHEMA], schema=SCHEMA)


def test_a_compaction_by_another_process_does_not_crash_a_reader(tmp_path):
    """A running scan indexed the segments; `dsclean index` of the same root closes its cache meanwhile
    and compacts them into one file under a name the scan already knows: the scan checks again, no crash."""
    from dsclean.scanning.cache import MAX_RUNS, ScanCache
    from dsclean.scanning.check import CheckOptions

    folder, opts = str(tmp_path / "scan_cache"), CheckOptions()
    for i in range(MAX_RUNS + 2):  # runs killed before closing: one segment each, the same 100 paths
        killed = ScanCache(folder, opts)
        killed.add_batch(_segment([f"f{j}.jpg".encode() for j in range(100)], mtime=i))
        killed.commit()
    reader = ScanCache(folder, opts)
    assert reader.lookup([("f50.jpg", 10, MAX_RUNS + 1)])  # the newest row answers; the index is built
    ScanCache(folder, opts).close()  # compacts
    reader._decoded.clear()  # as if the decoded batches had been evicted
    after = reader.lookup([("f50.jpg", 10, MAX_RUNS + 1)])  # no crash: no row (checked again) or the right one
    assert set(after) <= {"f50.jpg"} and all(row[0] == b"f50.jpg" for row in after.values())
    fresh = ScanCache(folder, opts)
    assert fresh.lookup([("f50.jpg", 10, MAX_RUNS + 1)])  # the compacted file keeps the newest row


def _damage_middle(path, n=2000) -> None:
    """Flip ``n`` bytes in the middle of a file (a bad block): its header and footer stay intact."""
    b = bytearray(Path(path).read_bytes())
    mid = len(b) // 2
    for i in range(mid, min(mid + n, len(b))):
        b[i] ^= 0x5A
    Path(path).write_bytes(bytes(b))


def test_a_damaged_cache_segment_or_results_file_costs_checks_not_the_scan(tmp_path, capsys):
    """Never trusted, never fatal: a damaged segment's or previous results' files are checked again, with a note."""
    from dsclean.cli import main
    from dsclean.locations import root_state_dir

    root = tmp_path / "data"
    make_tree(root, n_good=400, n_bad=6)
    first = _scan(root, tmp_path, dry_run=True)
    bad = {r["path"] for r in _rows(tmp_path) if r["status"] == "bad"}
    os.unlink(tmp_path / "r" / "scan_results.parquet")  # no previous results: the cache must answer
    (seg,) = Path(root_state_dir(str(root)), "scan_cache").rglob("*.arrow")
    _damage_middle(seg)
    second = _scan(root, tmp_path, dry_run=True)
    assert second.files == first.files and second.bad == 6 and second.cached < first.files
    assert any("is damaged" in n for n in second.notes)
    assert {r["path"] for r in _rows(tmp_path) if r["status"] == "bad"} == bad
    _damage_middle(tmp_path / "r" / "scan_results.parquet", 4000)
    assert main(["scan", str(root), "--dry-run", "--report", str(tmp_path / "r"), "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "previous scan results are damaged" in out and "6 bad" in out.replace(",", "")
    assert {r["path"] for r in _rows(tmp_path) if r["status"] == "bad"} == bad


def test_a_full_state_folder_costs_the_cache_not_the_scan(tmp_path, monkeypatch, capsys):
    """The state folder on a (real) full tmpfs, the quarantine elsewhere: the scan moves its files and keeps its
    results; the cache just is not written, and a note says so."""
    from support.mounts import tmpfs

    from dsclean.cli import main

    root, q = tmp_path / "data", tmp_path / "q"
    make_tree(root, n_good=2000, n_bad=6)
    with tmpfs(tmp_path / "small", "512k") as small:
        state = os.path.join(small, "state")
        os.makedirs(state)
        free = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize
        Path(small, "filler").write_bytes(b"x" * (free - 16 * 1024))  # room for the pointer, not for a segment
        code = main(["scan", str(root), "--quarantine", str(q), "--state-dir", state, "-j", "1"])
        out = capsys.readouterr().out
    assert code == 0, out
    assert "scan cache" in out and "could not be written" in out
    assert len(dsclean.read_problems(str(q))) == 6 and len(dsclean.read_results(str(q))) == 2006
    assert sum(1 for p in q.rglob("*") if p.is_file() and p.parent != q) == 6  # the bad files, moved


_KILLABLE_RESCAN = """
import sys
from dsclean.scanning.scanner import ScanOptions, scan
root, q, r = sys.argv[1:4]
scan(root, ScanOptions(rescan=True, quarantine=q, report_dir=r, jobs=2, chunk_size=1))
"""


def test_a_tombstone_survives_a_kill_9_right_after_the_move(tmp_path):
    """The worst moment for the tombstone: a --rescan has found bit rot (same size and mtime as the ok row
    of an earlier scan) and moved the file, and is killed -9 before its next cache batch. Restored, the
    rotten file must be checked again, not answered 'ok' by the old row (which would let index ship it)."""
    import json

    root, q = tmp_path / "data", tmp_path / "q"
    good = synth.jpeg(64, 64)
    p = write(root, "a/x.jpg", good)
    write(root, "a/y.jpg", synth.jpeg(64, 64, seed=1))
    st = os.stat(p)
    assert _scan(root, tmp_path, report_dir=str(tmp_path / "r1"), dry_run=True).bad == 0  # cached: x.jpg ok
    with open(p, "r+b") as f:
        f.write(b"\0" * len(good))  # bit rot: the same size and mtime
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    stall = write(root, "b/stall__hang__.jpg", synth.jpeg(8, 8, seed=2))  # keeps the scan busy after the move
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLABLE_RESCAN, str(root), str(q), str(tmp_path / "r2")],
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and p.exists():  # moved: the journal's "done" is written after the move
            time.sleep(0.01)
        done = []
        while time.time() < deadline and not done:
            journal = [json.loads(line) for f in q.glob("manifest*.jsonl") for line in f.read_text().splitlines()]
            done = [e for e in journal if e["op"] == "done"]
            time.sleep(0.01)
        assert done and proc.poll() is None, "the scan finished (or never moved x.jpg) before it could be killed"
    finally:
        os.killpg(proc.pid, 9)  # the scan and its workers, the stalled one included
        proc.wait()
    os.unlink(stall)
    assert dsclean.restore(str(q)).restored == 1  # the rotten file is back: the same bytes, size and mtime
    assert os.stat(p).st_mtime_ns == st.st_mtime_ns and p.read_bytes() == b"\0" * len(good)
    again = _scan(root, tmp_path, dry_run=True, report_dir=str(tmp_path / "r3"))
    verdicts = {v.path: (v.status, v.reason) for v in dsclean.iter_verdicts(str(tmp_path / "r3"))}
    assert verdicts["a/x.jpg"][0] == "bad", verdicts  # checked again, not the old 'ok' of the good bytes
    assert again.cached == 1  # y.jpg
    from dsclean.index.store import open_index

    dsclean.build_index(str(root), str(tmp_path / "i.arrow"), jobs=1)  # what the user trains on
    idx = open_index(str(tmp_path / "i.arrow"))
    assert [os.fsdecode(idx.path_bytes(i)) for i in range(len(idx))] == ["a/y.jpg"]
