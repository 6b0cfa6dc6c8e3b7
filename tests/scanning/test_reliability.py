"""Quarantine integrity under attack (issue 12): temp-name collisions, read-only sources, races,
full disks, special files, memory exhaustion, foreign results and roots. Real mounts, real
processes, real FIFOs and sockets; each row of RELIABILITY.md section 6 is a test here."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import time

import pytest
from support import synth
from support.files import write
from support.fixtures.cli import DSCLEAN
from support.mounts import read_only_bind, tmpfs
from support.treegen import contents, make_tree, tree_state

import dsclean
from dsclean import reasons as R
from dsclean.cli import main
from dsclean.errors import UserError
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.quarantine import moves as quarantine_moves
from dsclean.scanning.quarantine.journal import PARTIAL_SUFFIX, temp_name
from dsclean.scanning.quarantine.moves import ChangedError, Quarantine
from dsclean.scanning.quarantine.recovery import recover
from dsclean.scanning.quarantine.restore import restore
from dsclean.scanning.results import read_problems
from dsclean.scanning.scanner import ScanOptions, scan


def _journal(qdir, tag=""):
    return [json.loads(line) for line in (qdir / f"manifest{tag}.jsonl").read_text().splitlines() if line.strip()]


def _consistent(qdir, root):
    """Every move the journal calls done is in the quarantine, every other move's file is back in ROOT."""
    entries = _journal(qdir)
    outcome = {e["id"]: e["op"] for e in entries if e["op"] in ("done", "abort")}
    moves = [e for e in entries if e["op"] == "move"]
    assert all(e["id"] in outcome for e in moves), "a move without an outcome"
    for e in moves:
        if outcome[e["id"]] == "done":
            assert (qdir / e["dst"]).exists(), e
        else:
            assert not (qdir / e["dst"]).exists() or any(
                m["dst"] == e["dst"] and outcome[m["id"]] == "done" for m in moves
            ), e
    assert not list(qdir.rglob("*" + PARTIAL_SUFFIX)) and not list(root.rglob("*" + PARTIAL_SUFFIX))


# ---- 1. temp names never collide with user files ------------------------------------------------


def test_cross_device_restore_never_touches_a_user_file_named_like_a_temp(tmp_path):
    """Root on a real tmpfs, quarantine on disk: the move out and the restore both copy across devices."""
    with tmpfs(tmp_path / "mnt", "4m"):
        root, qdir = tmp_path / "mnt" / "root", tmp_path / "q"
        write(root, "a/x.jpg", b"bad bytes of x")
        with Quarantine(str(qdir), str(root)) as q:
            q.move("a/x.jpg", "corrupt")
        # The user's own files named exactly like dsclean's old temp names, beside source and target.
        write(root, "a/x.jpg.dsclean-partial", b"user file 1")
        write(qdir, "a/x.jpg.dsclean-partial", b"user file 2")
        report = restore(str(qdir))
        assert report.restored == 1 and not report.refused and not report.failed
        assert (root / "a/x.jpg").read_bytes() == b"bad bytes of x"
        assert (root / "a/x.jpg.dsclean-partial").read_bytes() == b"user file 1"
        assert (qdir / "a/x.jpg.dsclean-partial").read_bytes() == b"user file 2"
        # recover after the fact removes nothing it did not create
        recover(str(qdir))
        assert (root / "a/x.jpg.dsclean-partial").read_bytes() == b"user file 1"
        assert (qdir / "a/x.jpg.dsclean-partial").read_bytes() == b"user file 2"
        assert [
            e.get("tmp", "").endswith(PARTIAL_SUFFIX) for e in _journal(qdir) if e["op"] in ("move", "restore")
        ] == [True, True]


def test_a_temp_name_that_exists_is_never_opened_over(tmp_path, monkeypatch):
    """Even if the journaled temp name were taken (it is a random 128-bit name), O_EXCL refuses it."""
    with tmpfs(tmp_path / "mnt", "4m"):
        root, qdir = tmp_path / "mnt" / "root", tmp_path / "q"
        write(root, "x.jpg", b"to move")
        taken = qdir / ".taken.dsclean-partial"
        write(qdir, ".taken.dsclean-partial", b"somebody's file")
        names = iter([taken.name])
        real = temp_name
        monkeypatch.setattr(quarantine_moves, "temp_name", lambda ident: next(names, None) or real(ident))
        with Quarantine(str(qdir), str(root)) as q:
            assert q.move("x.jpg") == "x.jpg"  # the first try is refused and journaled as aborted; the retry works
        assert taken.read_bytes() == b"somebody's file"
        assert (qdir / "x.jpg").read_bytes() == b"to move" and not (root / "x.jpg").exists()
        assert [e["op"] for e in _journal(qdir)] == ["move", "abort", "move", "done"]


def test_recover_removes_only_the_temp_the_journal_names(tmp_path):
    root, qdir = tmp_path / "root", tmp_path / "q"
    write(root, "a/x.jpg", b"original")
    write(qdir, "a/x.jpg.dsclean-partial", b"user file")  # the old fixed temp name: not proven ours
    write(qdir, "a/.0123abcd.dsclean-partial", b"half a copy")  # what a killed cross-device move leaves
    (qdir / ".dsclean-quarantine").touch()
    entry = {
        "op": "move",
        "id": "0123abcd",
        "root": str(root),
        "src": "a/x.jpg",
        "dst": "a/x.jpg",
        "tmp": temp_name("0123abcd"),
    }
    (qdir / "manifest.jsonl").write_text(json.dumps(entry) + "\n")
    report = recover(str(qdir))
    assert report.reverted == 1 and not report.refused
    assert not (qdir / "a/.0123abcd.dsclean-partial").exists()
    assert (qdir / "a/x.jpg.dsclean-partial").read_bytes() == b"user file"
    assert (root / "a/x.jpg").read_bytes() == b"original"


# ---- 2. a source that cannot be removed: roll back; overlapping scans ----------------------------


def test_read_only_subtree_rolls_back_every_copy(tmp_path, capsys):
    """A read-only bind mount inside ROOT: link fails (EXDEV), the copy is made, the unlink fails (EROFS)."""
    root, qdir = tmp_path / "root", tmp_path / "q"
    expected = make_tree(root / "ro", n_good=2, n_bad=4)
    for i in range(4):
        write(root, f"rw/bad{i}.jpg", synth.HTML_PAGE + f"rw {i}".encode())
    original = tree_state(root)
    with read_only_bind(root / "ro"):
        assert main(["scan", str(root), "--quarantine", str(qdir), "--jobs", "1"]) == 3
        err = capsys.readouterr().err
        assert "4 of 8 moves failed: Read-only file system" in err
        for rel, status in expected.items():
            assert (root / "ro" / rel).exists()  # every file of the read-only part is still in place ...
            assert not (qdir / "ro" / rel).exists()  # ... and only there
        assert sorted(contents(root, qdir)) == sorted(original.values())
        _consistent(qdir, root)
        aborts = [e for e in _journal(qdir) if e["op"] == "abort"]
        assert len(aborts) == 4 and all("Read-only" in e["error"] for e in aborts)
    assert recover(str(qdir)).refused == []
    restore(str(qdir))
    assert tree_state(root) == original


def test_append_only_folder_rolls_back_the_link(tmp_path):
    """Same device: the link succeeds, the unlink fails (chattr +a): the new name is removed again."""
    with tmpfs(tmp_path / "mnt", "8m") as mnt:
        root, qdir = tmp_path / "mnt" / "root", tmp_path / "mnt" / "q"
        write(root, "d/x.jpg", b"stays")
        proc = subprocess.run(["chattr", "+a", str(root / "d")], capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"chattr +a not supported here: {proc.stderr.strip()}")
        try:
            with Quarantine(str(qdir), str(root)) as q, pytest.raises(PermissionError):
                q.move("d/x.jpg", "corrupt")
            assert (root / "d/x.jpg").read_bytes() == b"stays" and not (qdir / "d/x.jpg").exists()
            assert [e["op"] for e in _journal(qdir)] == ["move", "abort"]
        finally:
            subprocess.run(["chattr", "-a", str(root / "d")], check=True)
        assert mnt


def _hold_until_locked(path, proc, timeout=60.0):
    """Wait until ``proc`` holds an flock on ``path`` (a non-blocking shared lock attempt fails)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "exited early"
        if os.path.exists(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                return
            finally:
                os.close(fd)
        time.sleep(0.02)
    raise AssertionError("the first scan never took its lock")


def test_overlapping_scans_of_one_root_are_refused_parts_are_not(tmp_path):
    """Real processes: a scan holding the root (a file hangs its check until --timeout) and the others."""
    from dsclean import locations

    root, state = tmp_path / "root", tmp_path / "state"
    make_tree(root, n_good=4, n_bad=2)
    write(root, "cats/__hang__.jpg", synth.jpeg(16, 16, seed=9))
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1"}
    folder = locations.root_state_dir(str(root), str(state))
    common = ["--state-dir", str(state), "--jobs", "1", "--timeout", "20", "--dry-run"]

    def run(*args):
        return subprocess.run(
            [*DSCLEAN, "scan", str(root), *common, *args], env=env, capture_output=True, text=True, timeout=120
        )

    part0 = os.path.join(folder, "scan.part-0000-of-0002.lock")
    first = subprocess.Popen(
        [*DSCLEAN, "scan", str(root), *common, "--shard", "0/2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _hold_until_locked(part0, first)
        same_part = run("--shard", "0/2")
        whole = run()
        other_part = run("--shard", "1/2")
        assert first.poll() is None, "the first scan ended too early for the test to mean anything"
    finally:
        first.kill()
        first.wait()
    assert same_part.returncode == 2 and "another run of part 0/2 is running" in same_part.stderr
    assert whole.returncode == 2 and "two scans of" in whole.stderr
    assert other_part.returncode in (0, 1), other_part.stderr  # parts of one job array run side by side
    # The lock is in the state folder, never in ROOT.
    assert not [p for p in root.rglob("*.lock")]


def test_racing_scans_into_two_quarantines_leave_one_copy(tmp_path):
    """Two users' scans (different state folders: the lock cannot see them) race over one tree."""
    root = tmp_path / "root"
    for i in range(120):
        write(root, f"c{i % 3}/{i:03d}.jpg", synth.HTML_PAGE + f"{i}".encode())
    original = tree_state(root)
    procs = [
        subprocess.Popen(
            [
                *DSCLEAN,
                "scan",
                str(root),
                "--quarantine",
                str(tmp_path / f"q{n}"),
                "--state-dir",
                str(tmp_path / f"state{n}"),
                "--jobs",
                "1",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (1, 2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode in (0, 1, 3) for p in procs), [o[1] for o in outs]
    q1, q2 = tmp_path / "q1", tmp_path / "q2"
    assert sorted(contents(root, q1, q2)) == sorted(original.values())  # every file exactly once
    for q in (q1, q2):
        _consistent(q, root)
    moved = [json.loads(o[0])["quarantined"] for o in outs]
    assert sum(moved) == 120, moved
    for q in (q1, q2):
        restore(str(q))
    assert tree_state(root) == original


# ---- 3. a file replaced between its check and its move ------------------------------------------


def test_a_file_replaced_after_its_check_is_not_moved(tmp_path, monkeypatch):
    """Deterministic race: right before each move, every other bad file is replaced by a good one."""
    from dsclean.scanning import scanner

    root, qdir = tmp_path / "root", tmp_path / "q"
    for i in range(10):
        write(root, f"a/{i}.jpg", synth.truncate(synth.jpeg(40, 30, seed=i), 0.5))
    good = {i: synth.jpeg(40, 30, seed=100 + i) for i in range(0, 10, 2)}
    real = scanner._Sink._quarantine

    def racing(self, v, ino_dev=None):
        i = int(os.path.basename(v.path).split(".")[0])
        if i in good:  # an atomic replace (new inode), as a downloader or rsync would do
            tmp = root / "a" / f".new{i}"
            tmp.write_bytes(good[i])
            os.replace(tmp, root / v.path)
        return real(self, v, ino_dev)

    monkeypatch.setattr(scanner._Sink, "_quarantine", racing)
    summary = scan(str(root), ScanOptions(quarantine=str(qdir), jobs=1, backend="threads"))
    assert summary.quarantined == 5 and summary.warn_reasons == {R.CHANGED: 5}
    for i, data in good.items():
        assert (root / f"a/{i}.jpg").read_bytes() == data and not (qdir / f"a/{i}.jpg").exists()
    problems = {p["path"]: p for p in read_problems(summary.problems_path)}
    assert problems["a/0.jpg"]["reason"] == R.CHANGED and "the check saw: truncated" in problems["a/0.jpg"]["detail"]
    assert [e for e in _journal(qdir) if e["op"] == "abort" and "changed since it was checked" in e["changed"]]
    assert summary.quarantine_state["failed"] == 0  # `dsclean status` does not count them as failed moves
    # the results rows and counts say what happened: the replaced files warn/changed (never cached), the others bad
    rows = {os.fsdecode(r["path"]): r for r in dsclean.read_results(summary.results_path).to_pylist()}
    assert {
        p: (r["status"], r["reason"]) for p, r in rows.items() if (r["status"], r["reason"]) != ("bad", "truncated")
    } == {f"a/{i}.jpg": (R.WARN, R.CHANGED) for i in good}
    assert summary.counts == {"image": {R.BAD: 5, R.WARN: 5}}


def test_a_concurrent_replacer_never_gets_a_good_file_quarantined(tmp_path):
    """A real process replaces bad files with good ones while a real scan runs: whatever the timing,
    the quarantine holds only bad bytes and every file is in exactly one place."""
    root, qdir = tmp_path / "root", tmp_path / "q"
    n = 150
    for i in range(n):
        write(root, f"a/{i:03d}.jpg", synth.truncate(synth.jpeg(64, 48, seed=i), 0.5))
    for i in range(n):
        write(tmp_path / "good", f"{i:03d}.jpg", synth.jpeg(64, 48, seed=1000 + i))
    replacer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import os, sys, time\n"
                "good, root = sys.argv[1], sys.argv[2]\n"
                "for name in sorted(os.listdir(good)):\n"
                "    src = os.path.join(good, name)\n"
                "    try:\n"
                "        os.link(src, os.path.join(root, 'a', '.' + name))\n"
                "        os.rename(os.path.join(root, 'a', '.' + name), os.path.join(root, 'a', name))\n"
                "    except FileNotFoundError:\n"
                "        pass\n"
                "    time.sleep(0.004)\n"
            ),
            str(tmp_path / "good"),
            str(root),
        ]
    )
    try:
        summary = scan(str(root), ScanOptions(quarantine=str(qdir), jobs=2, chunk_size=4))
    finally:
        replacer.wait(timeout=120)
    good = {p.read_bytes() for p in (tmp_path / "good").iterdir()}
    in_quarantine = [p for p in qdir.rglob("*.jpg")]
    assert not [p for p in in_quarantine if p.read_bytes() in good], "a good replacement was quarantined"
    assert good <= {p.read_bytes() for p in (root / "a").iterdir()}, "a good replacement was lost"
    from dsclean.scanning.check import check_file

    assert all(check_file(str(qdir), str(p.relative_to(qdir))).status == R.BAD for p in in_quarantine)
    _consistent(qdir, root)
    # each name is once in ROOT or once in the quarantine (good replacements that came after a move
    # are new files in ROOT beside the quarantined original)
    assert summary.quarantined == len(in_quarantine)


# ---- 4. a full disk ----------------------------------------------------------------------------


def _big_bad_tree(root, n=16):
    for i in range(n):  # ~100 KB each, incompressible: 1.6 MB of bad files
        write(root, f"a/{i:02d}.jpg", synth.truncate(synth.jpeg(900, 900, seed=i, quality=95), 0.6))


def test_full_quarantine_disk_mid_scan_loses_nothing(tmp_path, capsys):
    root = tmp_path / "root"
    _big_bad_tree(root)
    original = tree_state(root)
    with tmpfs(tmp_path / "mnt", "1m"):
        qdir = tmp_path / "mnt" / "q"
        code = main(["scan", str(root), "--quarantine", str(qdir), "--jobs", "1"])
        err = capsys.readouterr().err
        assert code == 3 and "No space left on device" in err
        assert not list(qdir.rglob("*" + PARTIAL_SUFFIX)) and not list(qdir.rglob(".*.tmp"))
        assert sorted(contents(root, qdir)) == sorted(original.values())
        _consistent(qdir, root)
        moved = len([e for e in _journal(qdir) if e["op"] == "done"])
        assert 0 < moved < 16
        failed = [p for p in read_problems(str(qdir / "problems.jsonl")) if "quarantine_error" in p]
        assert len(failed) == 16 - moved and all("No space left on device" in p["quarantine_error"] for p in failed)
        report = recover(str(qdir))
        assert not report.refused and not list(qdir.rglob("*" + PARTIAL_SUFFIX))
        restore(str(qdir))
    assert tree_state(root) == original


def test_full_report_disk_exit_2_before_anything_moved_exit_3_after(tmp_path, capsys):
    root = tmp_path / "root"
    make_tree(root, n_good=3, n_bad=3)
    original = tree_state(root)
    with tmpfs(tmp_path / "mnt", "8k") as mnt:
        with open(os.path.join(mnt, "filler"), "wb") as f:  # full from the start
            f.write(b"\0" * 8192)
        code = main(["scan", str(root), "--quarantine", str(tmp_path / "q"), "--report", os.path.join(mnt, "r")])
        err = capsys.readouterr().err
        assert code == 2 and "No space left on device" in err and "not writable" in err
        assert os.listdir(os.path.join(mnt, "r")) == []  # no temp file left
        assert tree_state(root) == original  # nothing moved
    with tmpfs(tmp_path / "mnt2", "8k") as mnt:  # room to start, not to finish
        for i in range(40):
            write(root, f"more/bad{i}.jpg", synth.HTML_PAGE + b"x" * 300 + str(i).encode())
        original = tree_state(root)
        code = main(["scan", str(root), "--quarantine", str(tmp_path / "q2"), "--report", os.path.join(mnt, "r")])
        err = capsys.readouterr().err
        assert code == 3 and "No space left on device (ENOSPC) writing" in err
        assert "problems.jsonl" in err or "scan_results.parquet" in err
        assert "files had been quarantined" in err
        assert os.listdir(os.path.join(mnt, "r")) == []
        assert sorted(contents(root, tmp_path / "q2")) == sorted(original.values())
        _consistent(tmp_path / "q2", root)


def test_full_disk_for_a_report_or_dups_output_names_the_file(tmp_path, capsys):
    """`report -o`, `dups -o` and `scan --html` on a full disk: the message names the output that could not
    be written (a failed write() carries no file name of its own), nothing is left behind."""
    root = tmp_path / "root"
    make_tree(root, n_good=4, n_bad=2)
    write(root, "cats/copy.jpg", (root / "cats/good0.jpg").read_bytes())  # one duplicate group to write
    assert main(["scan", str(root), "--dry-run", "-q"]) == 0
    capsys.readouterr()
    with tmpfs(tmp_path / "mnt", "64k") as mnt:
        with open(os.path.join(mnt, "filler"), "wb", buffering=0) as f, pytest.raises(OSError):
            while True:  # until the tmpfs is full
                f.write(b"\0" * 4096)
        for argv, out in (
            (["report", str(root), "-o"], "report.html"),
            (["dups", str(root), "-q", "-o"], "groups.jsonl"),
            (["scan", str(root), "--dry-run", "-q", "--html"], "scan.html"),
        ):
            code = main([*argv, os.path.join(mnt, out)])
            err = capsys.readouterr().err
            assert code == 3 and f"No space left on device (ENOSPC) writing {os.path.join(mnt, out)}" in err, err
        assert sorted(os.listdir(mnt)) == ["filler"]  # no temp output left


def test_max_memory_below_the_floor_is_a_usage_error_not_a_traceback(tmp_path, capsys, monkeypatch):
    """A bare number is bytes: `--max-memory 512` (meant as 512M) would starve the worker's own bookkeeping
    (a MemoryError traceback, no results). Refused before anything runs, with the hint, by CLI and API alike."""
    root = tmp_path / "root"
    make_tree(root, n_good=3, n_bad=1)
    for argv, hint in (
        (["scan", str(root), "--dry-run", "--max-memory", "512"], "bare number is bytes"),
        (["dups", str(root), "--max-memory", "1M"], "give at least 16M"),
    ):  # 1M has its unit
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "below the 16M" in err and hint in err
    with pytest.raises(UserError, match="max_memory=512 is below the 16M"):
        scan(str(root), ScanOptions(dry_run=True, check=CheckOptions(max_memory=512)))
    with pytest.raises(UserError, match="below the 16M"):
        dsclean.find_duplicates([str(root)], dsclean.DupsOptions(max_memory=4096))
    monkeypatch.setenv("DSCLEAN_DEFAULT_MAX_MEMORY", "512")
    assert main(["scan", str(root), "--dry-run"]) == 2
    assert "DSCLEAN_DEFAULT_MAX_MEMORY=512 is below the 16M" in capsys.readouterr().err
    monkeypatch.setenv("DSCLEAN_DEFAULT_MAX_MEMORY", "lots")
    assert main(["scan", str(root), "--dry-run"]) == 2
    assert "DSCLEAN_DEFAULT_MAX_MEMORY: 'lots' is not a size" in capsys.readouterr().err
    monkeypatch.delenv("DSCLEAN_DEFAULT_MAX_MEMORY")
    assert main(["scan", str(root), "--dry-run", "-q", "--max-memory", "16M", "--check"]) == 1  # the floor works


@pytest.mark.parametrize("fmt", ["arrow", "npy"])
def test_full_disk_while_writing_an_index(tmp_path, capsys, fmt):
    root = tmp_path / "root"
    data = synth.png(8, 8)
    for i in range(3000):
        write(root, f"c/file_number_{i:05d}.png", data)
    with tmpfs(tmp_path / "mnt", "16k") as mnt:
        out = os.path.join(mnt, f"i.{fmt}")
        code = main(["index", str(root), "-o", out, "--no-check", "-q"])
        err = capsys.readouterr().err
        assert code == 2 and "ENOSPC" in err and out in err and "nothing was written" in err
        assert os.listdir(mnt) == []


# ---- 5. FIFOs, sockets, devices -----------------------------------------------------------------


def _special_tree(tmp_path):
    root = tmp_path / "root"
    make_tree(root, n_good=2, n_bad=2)
    os.mkfifo(root / "cats" / "x.jpg")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = os.getcwd()
    os.chdir(root / "dogs")  # a relative bind keeps the socket path under the 108-byte limit
    try:
        sock.bind("s.png")
    finally:
        os.chdir(cwd)
    if os.path.exists("/dev/null"):
        os.symlink("/dev/null", root / "cats" / "null.wav")
    return root, sock


def test_special_files_are_never_opened_moved_or_cached(tmp_path):
    root, sock = _special_tree(tmp_path)
    try:
        qdir, state = tmp_path / "q", tmp_path / "state"
        cmd = [
            *DSCLEAN,
            "scan",
            str(root),
            "--quarantine",
            str(qdir),
            "--state-dir",
            str(state),
            "--symlinks",
            "all",
            "--json",
            "--jobs",
            "1",
        ]
        first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # a hang fails, not blocks
        assert first.returncode == 0, first.stderr
        summary = json.loads(first.stdout)
        assert summary["warn_reasons"] == {R.NOT_REGULAR: 3} and summary["quarantined"] == 2
        problems = {p["path"]: p for p in read_problems(summary["problems_path"])}
        assert problems["cats/x.jpg"]["status"] == R.WARN and "FIFO" in problems["cats/x.jpg"]["detail"]
        assert (
            "socket" in problems["dogs/s.png"]["detail"] and "character device" in problems["cats/null.wav"]["detail"]
        )
        assert os.path.exists(root / "cats" / "x.jpg") and os.path.exists(root / "dogs" / "s.png")
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        again = json.loads(second.stdout)
        assert again["warn_reasons"] == {R.NOT_REGULAR: 3} and again["cached"] == again["files"] - 3
    finally:
        sock.close()


def test_index_and_dups_do_not_hang_on_a_fifo(tmp_path):
    root, sock = _special_tree(tmp_path)
    try:
        out = tmp_path / "i.arrow"
        for extra in ([], ["--no-check"]):
            proc = subprocess.run(
                [*DSCLEAN, "index", str(root), "-o", str(out), *extra], capture_output=True, text=True, timeout=120
            )
            assert proc.returncode == 0, proc.stderr
            from dsclean.index.store import open_index

            idx = open_index(str(out))
            names = {os.fsdecode(idx.path_bytes(i)) for i in range(len(idx))}
            assert names and not {"cats/x.jpg", "dogs/s.png", "cats/null.wav"} & names
        proc = subprocess.run([*DSCLEAN, "dups", str(root)], capture_output=True, text=True, timeout=120)
        assert proc.returncode in (0, 1), proc.stderr
    finally:
        sock.close()


# ---- 6. memory exhaustion is too_large, never corrupt --------------------------------------------


@pytest.fixture(scope="module")
def huge_canvas_gif(tmp_path_factory):
    """A ~190 KB animated GIF with an 8000x8000 canvas: decoding its frames needs hundreds of MB."""
    import io

    from PIL import Image

    frames = [Image.new("P", (8000, 8000), i) for i in range(4)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=50, disposal=2)
    return buf.getvalue()


def _scan_json(root, *args, env=None):
    proc = subprocess.run(
        [*DSCLEAN, "scan", str(root), "--json", "--jobs", "1", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode in (0, 1), proc.stderr
    summary = json.loads(proc.stdout)
    return summary, {p["path"]: p for p in read_problems(summary["problems_path"])}


@pytest.mark.slow  # fault injection: checks allocating until MemoryError
def test_memory_exhaustion_is_too_large_never_corrupt_never_cached(tmp_path, huge_canvas_gif):
    root, qdir = tmp_path / "root", tmp_path / "q"
    write(root, "a/big.gif", huge_canvas_gif)
    write(root, "a/ok.jpg", synth.jpeg(32, 32))
    # An explicit ceiling: bad, quarantined.
    s, problems = _scan_json(root, "--max-memory", "100M", "--dry-run")
    assert problems["a/big.gif"]["status"] == R.BAD and problems["a/big.gif"]["reason"] == R.TOO_LARGE
    s, problems = _scan_json(root, "--max-memory", "100M", "--dry-run")
    assert s["cached"] == 1  # ok.jpg only: too_large is never cached
    # Only the default ceiling: a warning, never moved, naming the flag to raise.
    s, problems = _scan_json(root, "--quarantine", str(qdir), env={"DSCLEAN_DEFAULT_MAX_MEMORY": str(100 << 20)})
    p = problems["a/big.gif"]
    assert p["status"] == R.WARN and p["reason"] == R.TOO_LARGE and "--max-memory" in p["detail"]
    assert s["quarantined"] == 0 and (root / "a/big.gif").exists()
    # No ceiling: the file is valid.
    s, problems = _scan_json(root, "--max-memory", "none", "--dry-run")
    assert "a/big.gif" not in problems and s["bad"] == 0


# ---- 7. results of another root ----------------------------------------------------------------


def test_scan_results_of_another_root_are_refused(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    make_tree(a, n_good=3, n_bad=0)
    make_tree(b, n_good=3, n_bad=2)
    scan(str(a), ScanOptions(report_dir=str(tmp_path / "ra"), jobs=1))
    results = str(tmp_path / "ra" / "scan_results.parquet")
    out = str(tmp_path / "i.arrow")
    assert main(["index", str(b), "-o", out, "--scan-results", results]) == 2
    err = capsys.readouterr().err
    assert f"records a scan of {a}" in err and "--root-moved" in err and not os.path.exists(out)
    # The tree really moved: a copy of a at c, indexed with a's verdicts.
    import shutil

    shutil.copytree(a, tmp_path / "c", copy_function=shutil.copy2)
    assert main(["index", str(tmp_path / "c"), "-o", out, "--scan-results", results, "--root-moved", "-q"]) == 0


# ---- 9. labels CSV spellings ---------------------------------------------------------------------


def test_labels_csv_paths_are_normalised_or_refused(tmp_path, capsys):
    from dsclean.index.store import open_index

    root = tmp_path / "root"
    for i in range(4):
        write(root, f"cats/{i}.jpg", synth.jpeg(16, 16, seed=i))
    csv = tmp_path / "labels.csv"
    csv.write_text("path,label\n./cats/0.jpg,a\ncats//1.jpg,b\ncats/./2.jpg,a\ncats/3.jpg,b\n")
    out = str(tmp_path / "i.arrow")
    assert main(["index", str(root), "-o", out, "--labels", str(csv), "-q"]) == 0
    assert len(open_index(out)) == 4
    csv.write_text("path,label\n./dogs/0.jpg,a\n")
    assert main(["index", str(root), "-o", out, "--labels", str(csv), "-q"]) == 2
    assert "not a file under" in capsys.readouterr().err
    csv.write_text("path,label\n.dsclean-hidden/0.jpg,a\n")
    write(root, ".dsclean-hidden/0.jpg", synth.jpeg(16, 16, seed=9))  # a real file, never indexed (hidden)
    out2 = str(tmp_path / "j.arrow")
    assert main(["index", str(root), "-o", out2, "--labels", str(csv), "-q"]) == 2
    assert "none of its 1 paths names a file being indexed" in capsys.readouterr().err
    assert not os.path.exists(out2)


# ---- 10. a quarantine is bound to its root -------------------------------------------------------


def test_restore_refuses_an_entry_of_another_root(tmp_path):
    root, other, qdir = tmp_path / "root", tmp_path / "elsewhere", tmp_path / "q"
    write(root, "a/x.jpg", b"x")
    write(root, "a/y.jpg", b"y")
    other.mkdir()
    with Quarantine(str(qdir), str(root)) as q:
        q.move("a/x.jpg")
        q.move("a/y.jpg")
    assert json.loads((qdir / "quarantine.json").read_text()) == {"root": str(root)}
    lines = (qdir / "manifest.jsonl").read_text().splitlines()
    edited = [json.loads(line) for line in lines]
    edited[0]["root"] = str(other)  # an edited entry pointing outside the dataset
    (qdir / "manifest.jsonl").write_text("".join(json.dumps(e) + "\n" for e in edited))
    report = restore(str(qdir))
    assert report.restored == 1 and len(report.refused) == 1 and "not this quarantine's root" in report.refused[0]
    assert not list(other.iterdir()) and (qdir / "a/x.jpg").exists() and (root / "a/y.jpg").exists()


def test_one_quarantine_folder_per_root(tmp_path):
    a, b, qdir = tmp_path / "a", tmp_path / "b", tmp_path / "q"
    write(a, "x.jpg", b"x")
    write(b, "x.jpg", b"x")
    Quarantine(str(qdir), str(a)).close()
    with pytest.raises(UserError, match="holds files of .*one quarantine folder per root"):
        Quarantine(str(qdir), str(b))


def test_a_broken_symlink_is_still_moved_as_a_link(tmp_path):
    """Nothing to compare (stat fails): the identity check must not block the move of a link."""
    root, qdir = tmp_path / "root", tmp_path / "q"
    (root / "a").mkdir(parents=True)
    os.symlink("/nonexistent/target", root / "a" / "x.jpg")
    summary = scan(str(root), ScanOptions(quarantine=str(qdir), jobs=1, backend="threads", symlinks="all"))
    assert summary.quarantined == 1 and os.readlink(qdir / "a" / "x.jpg") == "/nonexistent/target"
    assert not os.path.lexists(root / "a" / "x.jpg")


def test_a_relative_symlink_to_a_bad_file_is_quarantined_and_left_out_of_the_index(tmp_path):
    """A symlink farm (--symlinks all) with relative links: the link is moved (never its target) even
    though, from the quarantine's folder, the relative link points nowhere; the index leaves it out."""
    store, farm, qdir = tmp_path / "store", tmp_path / "farm", tmp_path / "deep" / "er" / "q"
    write(store, "bad.jpg", synth.truncate(synth.jpeg(64, 64, seed=1), 0.5))
    write(store, "ok.jpg", synth.jpeg(64, 64, seed=2))
    (farm / "cls").mkdir(parents=True)
    for name in ("bad.jpg", "ok.jpg"):
        os.symlink(f"../../store/{name}", farm / "cls" / name)
    state = ["--state-dir", str(tmp_path / "state")]
    assert main(["scan", str(farm), "--quarantine", str(qdir), "--symlinks", "all", "--jobs", "1", *state]) == 0
    assert not os.path.lexists(farm / "cls" / "bad.jpg") and os.path.islink(qdir / "cls" / "bad.jpg")
    assert (store / "bad.jpg").exists() and os.path.islink(farm / "cls" / "ok.jpg")  # targets untouched
    moves = [e for e in _journal(qdir) if e.get("op") == "move"]
    assert [e["src"] for e in moves] == ["cls/bad.jpg"]
    out = tmp_path / "i.arrow"
    assert main(["index", str(farm), "-o", str(out), "--symlinks", "all", *state]) == 0
    from dsclean import IndexedDataset

    ds = IndexedDataset(str(out), follow_symlinks="all")
    assert [ds.path(i) for i in range(len(ds))] == ["cls/ok.jpg"]
    assert main(["restore", str(qdir)]) == 0
    assert os.readlink(farm / "cls" / "bad.jpg") == "../../store/bad.jpg"  # back, and resolving again


def test_a_good_file_put_back_where_a_bad_one_was_moved_is_checked_again(tmp_path):
    """Bit rot with the mtime unchanged is quarantined; the good copy restored from a backup with the same
    size and mtime (cp -p, rsync -a) must be decoded again, not moved on the bad file's cached verdict."""
    root, qdir, backup = tmp_path / "data", tmp_path / "q", tmp_path / "backup"
    good = synth.jpeg(64, 64, seed=3)
    write(backup, "x.jpg", good)
    write(root, "a/ok.jpg", synth.jpeg(64, 64, seed=4))
    import shutil

    (root / "a").mkdir(exist_ok=True)
    shutil.copy2(backup / "x.jpg", root / "a" / "x.jpg")
    st = os.stat(root / "a" / "x.jpg")
    with open(root / "a" / "x.jpg", "r+b") as f:  # damage in place, size and mtime kept
        f.seek(len(good) // 2)
        f.write(b"\xff\xd9" + b"\0" * 30)
    os.utime(root / "a" / "x.jpg", ns=(st.st_atime_ns, st.st_mtime_ns))
    options = ScanOptions(
        jobs=1, backend="threads", quarantine=str(qdir), progress=False, state_dir=str(tmp_path / "state")
    )
    first = scan(str(root), options)
    assert first.quarantined == 1 and not (root / "a" / "x.jpg").exists()
    shutil.copy2(backup / "x.jpg", root / "a" / "x.jpg")  # same size, same mtime as the damaged file had
    second = scan(str(root), options)
    assert second.quarantined == 0 and second.bad == 0 and (root / "a" / "x.jpg").read_bytes() == good
    assert second.cached == 1  # a/ok.jpg from the cache; x.jpg decoded again


def test_index_checks_again_a_file_whose_recorded_verdict_was_about_the_moment(tmp_path, monkeypatch):
    """A bad file whose move was abandoned as `changed` stays in ROOT with a warn/changed row; that row
    says nothing about the bytes, so `dsclean index` must decode the file again, not index it as good."""
    root = tmp_path / "data"
    write(root, "a/bad.jpg", synth.truncate(synth.jpeg(64, 64, seed=5), 0.5))
    write(root, "a/ok.jpg", synth.jpeg(64, 64, seed=6))

    def changed(self, rel, reason=None, **kw):
        raise ChangedError(os.path.join(str(root), rel), "replaced (simulated)")

    monkeypatch.setattr(Quarantine, "move", changed)
    state = str(tmp_path / "state")
    s = scan(
        str(root),
        ScanOptions(jobs=1, backend="threads", quarantine=str(tmp_path / "q"), progress=False, state_dir=state),
    )
    assert s.warn_reasons == {R.CHANGED: 1} and (root / "a" / "bad.jpg").exists()
    monkeypatch.undo()
    out = tmp_path / "i.arrow"
    assert main(["index", str(root), "-o", str(out), "--state-dir", state]) == 0
    from dsclean import IndexedDataset

    ds = IndexedDataset(str(out))
    assert [ds.path(i) for i in range(len(ds))] == ["a/ok.jpg"]
