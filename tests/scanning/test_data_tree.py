"""Issue 10 (1-3): the data tree is left as found, a job half done is not a success, restore and symlink farms."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest
from support import synth
from support.files import write
from support.fixtures.cli import run_cli
from support.mounts import make_read_only, tmpfs
from support.treegen import make_tree, tree_state

import dsclean
from dsclean import locations
from dsclean.errors import UserError
from dsclean.scanning.scanner import ScanOptions, format_summary, scan


def listing(root) -> set[str]:
    """Every name under ``root``, recursively, hidden included (folders end with /)."""
    out = set()
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel + "/"
        out |= {prefix + d + "/" for d in dirs} | {prefix + f for f in files}
    return out


def imagefolder_classes(root) -> list[str]:
    """torchvision's find_classes: every folder directly under the root, hidden ones included."""
    return sorted(e.name for e in os.scandir(root) if e.is_dir())


@pytest.fixture
def tree(tree):
    """The shared tree, plus names that are not media."""
    root, expected = tree
    write(root, ".git/config", b"[core]")  # hidden folder and files: untouched, still a "class" to ImageFolder
    write(root, "cats/.hidden.jpg", synth.HTML_PAGE)
    write(root, "notes.txt", b"not media")
    return root, expected


# ----------------------------------------------------------------------------- 1. nothing of dsclean's in ROOT


@pytest.mark.parametrize(
    "case",
    ["dry-run", "dry-run-with-quarantine", "report-default", "quarantine", "quarantine-twice-cached", "cli-quarantine"],
)
def test_listing_differs_only_by_the_moved_files(tree, tmp_path, case):
    root, expected = tree
    before, classes = listing(root), imagefolder_classes(root)
    q = str(tmp_path / "q")
    if case == "dry-run":
        scan(str(root), ScanOptions(dry_run=True, jobs=1))
    elif case == "dry-run-with-quarantine":
        scan(str(root), ScanOptions(dry_run=True, quarantine=q, jobs=1))
    elif case == "report-default":
        scan(str(root), ScanOptions(jobs=1))
        scan(str(root), ScanOptions(jobs=1))  # cached
    elif case == "cli-quarantine":
        assert run_cli("scan", root, "--quarantine", q, "-q").returncode == 0
    else:
        scan(str(root), ScanOptions(quarantine=q, jobs=1))
        if case == "quarantine-twice-cached":
            assert scan(str(root), ScanOptions(quarantine=q, jobs=1)).cached == 6
    moved = {p for p, st in expected.items() if st == "bad"} if "quarantine" in case and "dry" not in case else set()
    after = listing(root)
    assert after <= before and before - after == moved
    assert imagefolder_classes(root) == classes == [".git", "cats", "dogs"]


def test_quarantine_report_or_state_inside_root_is_refused_unless_allowed(tree, tmp_path, monkeypatch):
    root, _ = tree
    before = listing(root)
    for options in (
        ScanOptions(quarantine=str(root / "bad")),
        ScanOptions(report_dir=str(root / "reports")),
        ScanOptions(state_dir=str(root / "state")),
    ):
        with pytest.raises(
            UserError, match="inside the dataset root.*ImageFolder.*one more class.*--allow-inside-root"
        ):
            scan(str(root), options)
    proc = run_cli("scan", root, "--quarantine", root / "bad")
    assert proc.returncode == 2 and "ImageFolder" in proc.stderr and "Traceback" not in proc.stderr
    assert listing(root) == before  # refused before anything changed
    s = scan(str(root), ScanOptions(quarantine=str(root / "bad"), allow_inside_root=True, jobs=1))
    added = listing(root) - before
    assert added and all(p.startswith("bad/") for p in added)  # the quarantine folder is the only addition
    assert s.quarantined == 6


def test_a_class_folder_is_never_taken_for_a_quarantine_or_report_folder(tree, tmp_path):
    """Even with --allow-inside-root: dsclean leaves its own folders out of the scan, so a quarantine or report
    folder that is one of the dataset's folders would hide its files from every scan."""
    root, _ = tree
    before = listing(root)
    for options in (
        ScanOptions(quarantine=str(root / "cats"), allow_inside_root=True),
        ScanOptions(report_dir=str(root / "dogs"), allow_inside_root=True),
    ):
        with pytest.raises(UserError, match="already holds media files"):
            scan(str(root), options)
    proc = run_cli("scan", root, "--quarantine", root / "cats", "--allow-inside-root")
    assert proc.returncode == 2 and "already holds" in proc.stderr and "Traceback" not in proc.stderr
    assert listing(root) == before
    s = scan(str(root), ScanOptions(quarantine=str(root / "bad"), allow_inside_root=True, jobs=1))
    assert s.quarantined == 6
    s = scan(str(root), ScanOptions(quarantine=str(root / "bad"), allow_inside_root=True, jobs=1))  # its own: fine
    assert any("left out of the scan" in n for n in s.notes)


def test_quarantine_that_is_a_file_says_so(tree, tmp_path):
    root, _ = tree
    (tmp_path / "afile").write_text("x")
    proc = run_cli("scan", root, "--quarantine", tmp_path / "afile")
    assert proc.returncode == 2 and f"quarantine folder {tmp_path / 'afile'} is a file, not a folder" in proc.stderr


def test_read_only_root_dry_run_works_and_quarantine_explains(tmp_path):
    with tmpfs(tmp_path / "ro") as mount:
        make_tree(tmp_path / "ro")
        make_read_only(mount)
        proc = run_cli("scan", mount, "--dry-run", "-q")
        assert proc.returncode == 0, proc.stderr
        results = locations.find_results(mount)[0]
        assert len(results) == 1 and not results[0].startswith(mount)
        assert dsclean.read_results(results[0]).num_rows == 12
        proc = run_cli("scan", mount, "--quarantine", tmp_path / "q")
        assert proc.returncode == 2
        assert "read-only file system: bad files cannot be moved" in proc.stderr and "--dry-run" in proc.stderr
        # it names where the suggested --dry-run's results go: the state folder, not the quarantine it never creates
        assert f"results go to {locations.root_state_dir(mount)})" in proc.stderr
        assert not (tmp_path / "q").exists()


def test_results_files_are_created_with_the_users_umask(tree, tmp_path):
    root, _ = tree
    proc = run_cli("scan", root, "--quarantine", tmp_path / "q", "-q", preexec_fn=lambda: os.umask(0o027))
    assert proc.returncode == 0, proc.stderr
    state = locations.root_state_dir(str(root))
    for path in (
        tmp_path / "q" / "scan_results.parquet",
        tmp_path / "q" / "problems.jsonl",
        tmp_path / "q" / "scan_summary.json",
        os.path.join(state, "last_scan.json"),
    ):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640, path


# ----------------------------------------------------------------------------- 2. a job half done is not a success


def test_failed_moves_exit_3_with_counts_and_every_failed_path_listed(tmp_path):
    root, q = tmp_path / "data", tmp_path / "q"
    for i in range(25):
        write(root, f"ro/bad{i}.jpg", synth.HTML_PAGE + str(i).encode())
    for i in range(3):
        write(root, f"rw/bad{i}.jpg", synth.HTML_PAGE + b"rw" + str(i).encode())
    write(root, "rw/good.jpg", synth.jpeg(8, 8))
    with tmpfs(q / "ro") as mount:
        make_read_only(mount)  # moves into q/ro fail before the source is touched
        proc = run_cli("scan", root, "--quarantine", q)
        assert proc.returncode == 3, proc.stderr
        assert "25 of 28 moves failed: Read-only file system" in proc.stderr
        assert "INCOMPLETE: 25 of 28 moves failed" in proc.stdout and "... and 5 more" in proc.stdout
        problems = dsclean.read_problems(str(q))
        failed = {p["path"] for p in problems if "quarantine_error" in p}
        assert failed == {f"ro/bad{i}.jpg" for i in range(25)}  # every one, not only the 20 on screen
        summary = json.loads((q / "scan_summary.json").read_text())
        assert summary["move_failures"] == 25 and summary["quarantined"] == 3
        assert len(list((root / "ro").iterdir())) == 25  # still in place
        status = json.loads(run_cli("status", q, "--json").stdout)["quarantine"]
        assert (status["moved"], status["failed"]) == (3, 25)
        assert status["failures"] == {"Read-only file system": 25}
    assert run_cli("scan", root, "--quarantine", q, "--check", "-q").returncode == 1  # now complete: findings


def test_records_are_cumulative_and_restore_removes_restored_files(tree, tmp_path):
    root, expected = tree
    q = tmp_path / "q"
    scan(str(root), ScanOptions(quarantine=str(q), jobs=1))
    second = scan(str(root), ScanOptions(quarantine=str(q), jobs=1))  # a repeated (or resumed) run
    assert second.quarantined == 0 and second.cached == 6
    problems = dsclean.read_problems(str(q))
    bad = {p for p, st in expected.items() if st == "bad"}
    assert {p["path"] for p in problems if p["status"] == "bad"} == bad
    assert all(p["reason"] in ("truncated", "not_media", "corrupt") and p["quarantined_as"] for p in problems)
    assert all(p["detail"] != "quarantined by an earlier run" for p in problems)  # the journal kept the words
    summary = json.loads((q / "scan_summary.json").read_text())
    assert summary["quarantine_state"]["moved"] == 6
    assert summary["quarantine_state"]["by_reason"] == {"truncated": 2, "not_media": 2, "corrupt": 2}
    assert "now holds 6 files of all runs" in format_summary(second)
    status = run_cli("status", q)
    assert status.returncode == 0 and "in quarantine: 6 files" in status.stdout
    root_status = run_cli("status", root)
    assert "found by: the last scan of" in root_status.stdout and "in quarantine: 6 files" in root_status.stdout
    assert run_cli("restore", q).returncode == 0
    assert dsclean.read_problems(str(q)) == []  # restored files leave the problems file
    assert json.loads((q / "scan_summary.json").read_text())["quarantine_state"]["moved"] == 0
    assert json.loads(run_cli("status", q, "--json").stdout)["quarantine"]["restored"] == 6


def test_a_fully_cached_rescan_prints_no_absurd_rate(tree, tmp_path):
    root, _ = tree
    scan(str(root), ScanOptions(jobs=1))
    text = format_summary(scan(str(root), ScanOptions(jobs=1)))
    first = text.splitlines()[0]
    assert "every verdict from the scan cache, nothing decoded" in first and "MB/s" not in first


# ----------------------------------------------------------------------------- 3. restore into a moved tree


def test_restore_refuses_a_missing_root_and_restores_into_the_moved_tree(tree, tmp_path):
    root, expected = tree
    q = tmp_path / "q"
    scan(str(root), ScanOptions(quarantine=str(q), jobs=1))
    moved = tmp_path / "moved"
    os.rename(root, moved)
    proc = run_cli("restore", q)
    assert proc.returncode == 2 and "no longer exists" in proc.stderr and "--root" in proc.stderr
    assert not root.exists()  # the old path was not recreated
    proc = run_cli("restore", q, "--root", moved)
    assert proc.returncode == 0 and "6 restored" in proc.stdout, proc.stderr
    assert {p for p in tree_state(moved)} >= set(expected)
    entries = [json.loads(x) for x in (q / "manifest.jsonl").read_text().splitlines()]
    assert {e["root"] for e in entries if e["op"] == "restore"} == {str(moved)}
    assert run_cli("restore", q, "--root", tmp_path / "nope").returncode == 2


# ----------------------------------------------------------------------------- 3. symlink farms


@pytest.fixture
def farm(tmp_path):
    """A symlink farm: class folders linking to storage elsewhere, and a class of per-file links."""
    storage = tmp_path / "storage"
    write(storage, "cats/a.jpg", synth.jpeg(8, 8, seed=1))
    write(storage, "cats/broken.jpg", synth.HTML_PAGE)
    write(storage, "dogs/b.jpg", synth.jpeg(8, 8, seed=2))
    write(storage, "dogs/bad.jpg", synth.HTML_PAGE + b"dog")
    root = tmp_path / "farm"
    (root / "birds").mkdir(parents=True)
    os.symlink(storage / "cats", root / "cats")  # a linked class folder
    os.symlink(storage / "dogs" / "b.jpg", root / "birds" / "b.jpg")  # per-file links in a real folder
    os.symlink(storage / "dogs" / "bad.jpg", root / "birds" / "bad.jpg")
    os.symlink(root, root / "birds" / "loop")  # a loop
    return root, storage


def test_symlink_modes_on_a_farm(farm, tmp_path):
    root, storage = farm
    none = scan(str(root), ScanOptions(jobs=1, report_dir=str(tmp_path / "r0")))
    assert none.files == 0 and none.discovery.symlinks >= 3
    inside = scan(str(root), ScanOptions(jobs=1, follow_symlinks=True, report_dir=str(tmp_path / "r1")))
    assert inside.files == 0 and inside.discovery.outside_links == 3
    assert any("--symlinks all" in n for n in inside.notes)
    every = scan(str(root), ScanOptions(jobs=1, symlinks="all", report_dir=str(tmp_path / "r2")))
    assert every.files == 4 and every.bad == 2 and every.discovery.loops == 1


def test_quarantining_a_farm_moves_links_never_files_outside_root(farm, tmp_path):
    root, storage = farm
    outside = tree_state(storage)
    q = tmp_path / "q"
    proc = run_cli("scan", root, "--symlinks", "all", "--quarantine", q)
    assert proc.returncode == 3, proc.stderr  # the file under the linked folder cannot be moved
    assert "1 of 2 moves failed" in proc.stderr and "outside ROOT" in proc.stderr
    assert tree_state(storage) == outside  # nothing outside ROOT moved or changed
    assert os.path.islink(q / "birds" / "bad.jpg") and not os.path.lexists(root / "birds" / "bad.jpg")
    assert os.readlink(q / "birds" / "bad.jpg") == str(storage / "dogs" / "bad.jpg")
    assert dsclean.restore(str(q)).restored == 1 and os.path.islink(root / "birds" / "bad.jpg")


def test_index_of_a_farm(farm, tmp_path):
    root, _ = farm
    with pytest.raises(UserError, match="would be empty.*symlinks not followed"):
        dsclean.build_index(str(root), str(tmp_path / "i.arrow"))
    s = dsclean.build_index(str(root), str(tmp_path / "i.arrow"), symlinks="all")
    assert s.rows == 2 and s.checked_bad == 2 and s.discovery.loops == 1
    ds = dsclean.IndexedDataset(str(tmp_path / "i.arrow"))
    from dsclean.data.dataset import UnsafePathError

    with pytest.raises(UnsafePathError, match="follow_symlinks='all'"):  # the index's metadata switches nothing
        ds[0]
    follow = dsclean.IndexedDataset(str(tmp_path / "i.arrow"), follow_symlinks="all")
    assert [follow[i][1] for i in range(2)] == [0, 1]


def test_a_hostile_index_cannot_switch_the_escape_check_off(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    write(tmp_path, "secret.png", synth.png(8, 8))
    os.symlink(tmp_path / "secret.png", root / "s.png")
    import pyarrow as pa

    from dsclean.data.dataset import UnsafePathError

    meta = {
        "format_version": 1,
        "classes": ["c"],
        "kinds": ["image", "audio"],
        "labels": "folder",
        "root": str(root),
        "rows": 1,
        "symlinks": "all",
        "follow_symlinks": "all",
    }
    table = pa.table(
        {
            "path": pa.array([b"s.png"], pa.binary()),
            "label": pa.array([0], pa.int64()),
            "kind": pa.array([0], pa.int8()),
            "size": pa.array([os.path.getsize(root / "s.png")], pa.int64()),
            "mtime_ns": pa.array([0], pa.int64()),
        }
    ).replace_schema_metadata({b"dsclean": json.dumps(meta)})
    with pa.OSFile(str(tmp_path / "evil.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(UnsafePathError, match="outside the root"):
        dsclean.IndexedDataset(str(tmp_path / "evil.arrow"))[0]


def test_a_quarantine_outside_root_that_holds_another_split_is_refused(tmp_path):
    """Review 6, bug 6: --quarantine data/val while scanning data/train poured train's bad files into val/ and marked
    it dsclean's: every later scan of data/ left all of val/ (and its own damaged files) unchecked."""
    for split in ("train", "val"):
        for i in range(2):
            write(tmp_path / "data" / split, f"cats/{i}.jpg", synth.jpeg(16, 16, seed=i + len(split)))
    write(tmp_path / "data" / "train", "cats/cut.jpg", synth.truncate(synth.jpeg(32, 32), 0.5))
    before = listing(tmp_path / "data")
    proc = run_cli("scan", tmp_path / "data" / "train", "--quarantine", tmp_path / "data" / "val")
    assert proc.returncode == 2 and "already holds media files" in proc.stderr and "Traceback" not in proc.stderr
    assert listing(tmp_path / "data") == before
    assert run_cli("scan", tmp_path / "data" / "train", "--quarantine", tmp_path / "bad").returncode == 0
    assert (
        run_cli("scan", tmp_path / "data" / "train", "--quarantine", tmp_path / "bad").returncode == 0
    )  # ours: reused


def test_a_state_folder_inside_root_is_named_as_the_cause(tmp_path):
    """Review 6, bug 9: with the state folder inside ROOT, the error blamed the (default) report folder and --report."""
    write(tmp_path / "data", "cats/0.jpg", synth.jpeg(16, 16))
    proc = run_cli("scan", tmp_path / "data", "--dry-run", "--state-dir", tmp_path / "data" / "state")
    assert proc.returncode == 2 and "the state folder" in proc.stderr and "--state-dir" in proc.stderr
    assert "report folder" not in proc.stderr


def test_restore_root_refuses_another_dataset_while_the_recorded_root_exists(tmp_path):
    """Review 6, bug 5: `restore Q --root B` poured dataset A's bad files into dataset B (a class B never had),
    while A was still where the journal says. A moved copy of A (its folders there) is still accepted."""
    write(tmp_path / "A", "cats/ok.jpg", synth.jpeg(16, 16, seed=1))
    write(tmp_path / "A", "cats/broken.jpg", synth.truncate(synth.jpeg(32, 32, seed=2), 0.5))
    write(tmp_path / "B", "birds/ok.jpg", synth.jpeg(16, 16, seed=3))
    assert scan(str(tmp_path / "A"), ScanOptions(quarantine=str(tmp_path / "q"), jobs=1)).quarantined == 1
    before = listing(tmp_path / "B")
    with pytest.raises(UserError, match="looks like another dataset"):
        dsclean.restore(str(tmp_path / "q"), root=str(tmp_path / "B"))
    proc = run_cli("restore", tmp_path / "q", "--root", tmp_path / "B")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert listing(tmp_path / "B") == before
    shutil.copytree(tmp_path / "A", tmp_path / "A2")  # the same tree at a new place
    report = dsclean.restore(str(tmp_path / "q"), root=str(tmp_path / "A2"))
    assert os.path.isfile(tmp_path / "A2" / "cats" / "broken.jpg") and not report.refused


def test_a_scan_names_the_class_folders_its_moves_emptied(tmp_path):
    """Review 6, bug 7: every file of class zebra was bad and moved out; ImageFolder then refuses the empty class.
    The scan says which folders it emptied (summary note, scan_summary.json); a class with a file left is not named."""
    write(tmp_path / "data", "cats/ok.jpg", synth.jpeg(16, 16, seed=1))
    write(tmp_path / "data", "cats/cut.jpg", synth.truncate(synth.jpeg(32, 32, seed=2), 0.5))
    for i in range(2):
        write(tmp_path / "data", f"zebra/{i}.jpg", synth.truncate(synth.jpeg(32, 32, seed=3 + i), 0.4))
    s = scan(str(tmp_path / "data"), ScanOptions(quarantine=str(tmp_path / "q"), jobs=1, progress=False))
    assert s.quarantined == 3 and s.emptied_folders == ["zebra"]
    assert "zebra" in format_summary(s) and "Found no valid file" in format_summary(s)
    with open(tmp_path / "q" / "scan_summary.json") as f:
        assert json.load(f)["emptied_folders"] == ["zebra"]


def test_a_quarantine_inside_a_class_folder_is_refused_even_when_allowed_inside_root(tree, tmp_path):
    """Review 6, bug 8: with --quarantine data/cats/_q, ImageFolder loads every moved file as a cats sample."""
    root, _ = tree
    before = listing(root)
    proc = run_cli("scan", root, "--quarantine", root / "cats" / "_q", "--allow-inside-root")
    assert proc.returncode == 2 and "inside cats/ of ROOT" in proc.stderr and "Traceback" not in proc.stderr
    assert listing(root) == before
