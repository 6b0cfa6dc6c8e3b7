"""Job-array parts: disjoint, complete, mergeable, and one index identical to a single-machine run."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from support.treegen import make_tree, tree_state

import dsclean
from dsclean.errors import UserError
from dsclean.scanning.merge import merge, read_parts
from dsclean.scanning.scanner import ScanOptions, in_part, scan

N = 3


pytestmark = pytest.mark.tree(n_good=30, n_bad=12)


@pytest.fixture
def tree(tree):
    """The shared tree's root (30 good, 12 bad files)."""
    return tree[0]


def _part_scans(root, report, **kw):
    return [scan(str(root), ScanOptions(shard=(i, N), report_dir=str(report), jobs=1, **kw)) for i in range(N)]


def test_parts_partition_the_files(tree, tmp_path):
    summaries = _part_scans(tree, tmp_path / "r")
    assert sum(s.files for s in summaries) == 42 and all(s.files > 0 for s in summaries)
    files = sorted(glob.glob(str(tmp_path / "r" / "scan_results.part-*-of-0003.parquet")))
    assert len(files) == N
    paths = [set(pq.read_table(f, columns=["path"])["path"].to_pylist()) for f in files]
    assert not (paths[0] & paths[1] or paths[0] & paths[2] or paths[1] & paths[2])
    for i, ps in enumerate(paths):
        assert all(in_part(os.fsdecode(p), (i, N)) for p in ps)


def test_part_assignment_is_stable():
    # fixed values: a change here would reshuffle every running job array
    assert [in_part(p, (0, 4)) for p in ("a.jpg", "cats/1.png", "x/y/z.wav")] == [
        __import__("zlib").crc32(p.encode()) % 4 == 0 for p in ("a.jpg", "cats/1.png", "x/y/z.wav")
    ]


def test_merge_then_index_equals_a_single_machine_run(tree, tmp_path):
    single = scan(str(tree), ScanOptions(report_dir=str(tmp_path / "single"), jobs=1))
    dsclean.build_index(str(tree), str(tmp_path / "single.arrow"), scan_results=single.results_path)
    _part_scans(tree, tmp_path / "parts")
    files = sorted(glob.glob(str(tmp_path / "parts" / "scan_results.part-*.parquet")))
    m = merge(files, str(tmp_path / "merged"))
    assert (m.rows, m.bad, m.parts) == (42, 12, N)
    merged = dsclean.read_results(str(tmp_path / "merged")).sort_by("path").drop_columns(["mtime_ns"])
    alone = dsclean.read_results(single.results_path).sort_by("path").drop_columns(["mtime_ns"])
    assert merged.equals(alone)
    assert len(dsclean.read_problems(str(tmp_path / "merged"))) == 12
    # index from the merged results, and straight from the part files: both identical to the single run
    dsclean.build_index(str(tree), str(tmp_path / "merged.arrow"), scan_results=m.results_path)
    dsclean.build_index(str(tree), str(tmp_path / "direct.arrow"), scan_results=files)
    ref = dsclean.IndexedDataset(str(tmp_path / "single.arrow"))
    for name in ("merged.arrow", "direct.arrow"):
        ds = dsclean.IndexedDataset(str(tmp_path / name))
        assert [ds.path(i) for i in range(len(ds))] == [ref.path(i) for i in range(len(ref))]
        assert list(ds.targets) == list(ref.targets) and ds.classes == ref.classes
    assert len(ref) == 30


def test_merge_refuses_missing_duplicate_and_foreign_parts(tree, tmp_path):
    _part_scans(tree, tmp_path / "r")
    files = sorted(glob.glob(str(tmp_path / "r" / "scan_results.part-*.parquet")))
    with pytest.raises(UserError, match="missing parts of 3: 1/3"):
        merge([files[0], files[2]])
    with pytest.raises(UserError, match="part 0/3 is given twice"):
        read_parts([files[0], files[0], files[1], files[2]])
    whole = scan(str(tree), ScanOptions(report_dir=str(tmp_path / "whole"), jobs=1))
    with pytest.raises(UserError, match="not a part's results"):
        merge([*files, whole.results_path])
    other = tmp_path / "other"
    make_tree(other, n_good=3, n_bad=0)
    scan(str(other), ScanOptions(shard=(1, N), report_dir=str(tmp_path / "o"), jobs=1))
    foreign = str(tmp_path / "o" / "scan_results.part-0001-of-0003.parquet")
    with pytest.raises(UserError, match="different scans"):
        merge([files[0], foreign, files[2]])


def test_merge_refuses_an_output_or_state_folder_inside_root(tree, tmp_path):
    """Either would be one more class of the dataset: refused before anything is written (as scan and index do)."""
    _part_scans(tree, tmp_path / "r")
    files = sorted(glob.glob(str(tmp_path / "r" / "scan_results.part-*.parquet")))
    before = tree_state(tree)
    with pytest.raises(UserError, match="output folder .* is inside the dataset root"):
        merge(files, str(tree / "0merged"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsclean",
            "merge",
            *files,
            "-o",
            str(tmp_path / "m"),
            "--state-dir",
            str(tree / "state"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "state folder" in proc.stderr and "inside the dataset root" in proc.stderr
    assert tree_state(tree) == before and not (tmp_path / "m").exists()
    assert not (tree / "0merged").exists() and not (tree / "state").exists()
    assert merge(files, str(tmp_path / "m")).rows == 42  # outside ROOT: fine


def test_merge_refuses_overlapping_parts(tree, tmp_path):
    """Two part files that both claim a path (e.g. a tree that changed between tasks) are refused."""
    _part_scans(tree, tmp_path / "r")
    files = sorted(glob.glob(str(tmp_path / "r" / "scan_results.part-*.parquet")))
    t0, t1 = pq.read_table(files[0]), pq.read_table(files[1])
    import pyarrow as pa

    pq.write_table(pa.concat_tables([t1, t0.slice(0, 1).cast(t1.schema)]), files[1])
    with pytest.raises(UserError, match="more than one part"):
        merge(files)


def test_parted_quarantine_with_concurrent_parts_and_restore(tree, tmp_path):
    before = tree_state(tree)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dsclean",
                "scan",
                str(tree),
                "--shard",
                f"{i}/{N}",
                "--quarantine",
                str(tmp_path / "q"),
                "--jobs",
                "1",
                "--quiet",
            ]
        )
        for i in range(N)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * N  # concurrently, into one folder: a lock per part
    assert len(tree_state(tree)) == 30 and len(list((tmp_path / "q").rglob("bad*"))) == 12
    assert len(glob.glob(str(tmp_path / "q" / "manifest.part-*.jsonl"))) == N
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsclean",
            "merge",
            *sorted(glob.glob(str(tmp_path / "q" / "scan_results.part-*.parquet"))),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and "42 files, 12 bad" in out.stdout
    assert dsclean.restore(str(tmp_path / "q")).restored == 12
    assert tree_state(tree) == before


def test_cli_part_argument_errors(tree):
    for bad in ("3/3", "x", "1/0", "-1/2"):
        proc = subprocess.run(
            [sys.executable, "-m", "dsclean", "scan", str(tree), "--shard", bad], capture_output=True, text=True
        )
        assert proc.returncode == 2 and "--shard" in proc.stderr and "Traceback" not in proc.stderr


def test_merge_refuses_an_interrupted_part(tree, tmp_path):
    import json

    _part_scans(tree, tmp_path / "r")
    files = sorted(glob.glob(str(tmp_path / "r" / "scan_results.part-*.parquet")))
    summary = tmp_path / "r" / "scan_summary.part-0001-of-0003.json"
    data = json.loads(summary.read_text())
    summary.write_text(json.dumps({**data, "interrupted": True}))  # as a SIGTERM at a time limit leaves it
    with pytest.raises(UserError, match="interrupted before it finished"):
        merge(files)
    summary.unlink()
    with pytest.raises(UserError, match="cannot tell whether the part finished"):
        merge(files)


def test_status_of_a_root_adds_up_every_part(tree, tmp_path):
    """`dsclean status ROOT` after a job array: the counts of all parts, not of part 0 alone."""
    from dsclean.scanning.quarantine.status import format_status, status

    summaries = _part_scans(tree, tmp_path / "r", quarantine=None)
    st = status(str(tree))
    assert st.summary["files"] == sum(s.files for s in summaries) == 42
    assert st.summary["bad"] == sum(s.bad for s in summaries) == 12
    assert sum(st.summary["bad_reasons"].values()) == 12
    assert "42 files, 12 bad" in format_status(st)


def test_status_of_a_root_whose_job_array_ran_only_some_parts(tree, tmp_path, monkeypatch):
    """3 of 8 parts done is not 'never scanned': status names the parts done and missing, the commands that run
    the missing ones, and what the done parts found; a stale part of an older array is named, not counted."""
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(tmp_path / "state"))
    scan(str(tree), ScanOptions(shard=(3, 4), report_dir=str(tmp_path / "old"), jobs=1))  # an abandoned array of 4
    done = [scan(str(tree), ScanOptions(shard=(i, N), report_dir=str(tmp_path / "r"), jobs=1)) for i in (0, 1)]
    proc = subprocess.run([sys.executable, "-m", "dsclean", "status", str(tree)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    files, bad = sum(s.files for s in done), sum(s.bad for s in done)
    assert 0 < files < 42
    assert f"INCOMPLETE: job array of 3 parts: parts 0/3, 1/3 done ({files} files), part 2/3 missing" in out
    assert f"dsclean scan {tree} --shard 2/3" in out
    assert f"in the parts done: {files} files, {bad} bad" in out
    assert "ignored: part 3/4 (an older job array of 4 parts" in out
    assert "no recorded scan" not in out
    proc = subprocess.run(
        [sys.executable, "-m", "dsclean", "status", str(tree), "--json"], capture_output=True, text=True
    )
    st = json.loads(proc.stdout)
    assert st["array"]["parts"] == 3 and st["array"]["done"] == [0, 1] and st["array"]["missing"] == [2]
    assert st["array"]["run"] == [f"dsclean scan {tree} --shard 2/3"]
    assert st["results"] == [s.results_path for s in done] and st["summary"]["files"] == files
    scan(str(tree), ScanOptions(shard=(2, N), report_dir=str(tmp_path / "r"), jobs=1))  # the last part
    from dsclean.scanning.quarantine.status import format_status, status

    st = status(str(tree))
    assert st.array is None and st.summary["files"] == 42 and "INCOMPLETE" not in format_status(st)


def test_status_names_an_unfinished_array_newer_than_the_scan_it_reports(tree, tmp_path, monkeypatch):
    from dsclean.scanning.quarantine.status import format_status, status

    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(tmp_path / "state"))
    whole = scan(str(tree), ScanOptions(report_dir=str(tmp_path / "whole"), jobs=1))
    scan(str(tree), ScanOptions(shard=(1, N), report_dir=str(tmp_path / "r"), jobs=1))
    st = status(str(tree))
    assert st.results == [whole.results_path] and st.summary["files"] == 42
    assert st.newer_array["missing"] == [0, 2]
    text = format_status(st)
    assert "a newer job array of 3 parts is unfinished (part 1/3 done, parts 0/3, 2/3 missing)" in text
    assert f"dsclean scan {tree} --shard 0/3" in text and f"dsclean scan {tree} --shard 2/3" in text


def test_status_of_a_root_keeps_its_counts_after_merge(tree, tmp_path):
    """Review 6, bug 10: after `dsclean merge` the root's pointer named no summary, so `status` lost its counts."""
    from dsclean.scanning.quarantine.status import format_status, status

    _part_scans(tree, tmp_path / "r", quarantine=None)
    merge(sorted(glob.glob(str(tmp_path / "r" / "scan_results.part-*.parquet"))))
    st = status(str(tree))
    assert st.summary["files"] == 42 and st.summary["bad"] == 12
    assert "42 files, 12 bad" in format_status(st)
