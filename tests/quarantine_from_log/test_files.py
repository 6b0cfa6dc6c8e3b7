"""quarantine --from-log for files: re-check, move only the bad, list the ok and the missing, restore."""

from __future__ import annotations

import json
import os

from support.failurelogs import log_failures
from support.fixtures.cli import run_cli

from dsclean import rechecked
from dsclean.fromlog import FromLogOptions, quarantine_from_log
from dsclean.scanning.quarantine.restore import restore


def _exc(path, root, error="OSError", message="image file is truncated", index=0):
    return {
        "kind": "exception",
        "index": index,
        "path": path,
        "root": str(root),
        "error": error,
        "message": message,
        "action": "skip",
    }


def test_bad_files_are_moved_ok_ones_listed_and_left_missing_ones_listed(tree, tmp_path):
    root, files = tree
    log = tmp_path / "runs" / "failures.jsonl"
    log_failures(
        log,
        [
            (0, _exc("cats/cut.jpg", root)),
            (1, _exc("cats/cut.jpg", root, index=7)),  # the same file from another worker: checked once
            (1, _exc("cats/c1.jpg", root, error="RuntimeError", message="in transform: size mismatch")),
            (
                None,
                {
                    "kind": "worker_died",
                    "index": 3,
                    "path": "dogs/junk.png",
                    "root": str(root),
                    "error": "SIGSEGV",
                    "message": "killed by signal",
                },
            ),
            (0, _exc("cats/gone.jpg", root)),
        ],
    )
    q = tmp_path / "bad"
    s = quarantine_from_log([str(log)], FromLogOptions(quarantine=str(q)))
    by = {os.path.relpath(i.path, root): i for i in s.items}
    assert set(by) == {"cats/cut.jpg", "cats/c1.jpg", "dogs/junk.png", "cats/gone.jpg"}
    assert by["cats/cut.jpg"].outcome == "quarantined" and by["cats/cut.jpg"].lines == 2
    assert by["dogs/junk.png"].outcome == "quarantined" and by["dogs/junk.png"].error == "SIGSEGV"
    assert by["cats/c1.jpg"].outcome == "left" and by["cats/c1.jpg"].status == "ok"
    assert by["cats/c1.jpg"].message == "in transform: size mismatch"
    assert by["cats/gone.jpg"].outcome == "missing"
    assert not (root / "cats/cut.jpg").exists() and (q / "cats/cut.jpg").read_bytes() == files["cats/cut.jpg"]
    assert (root / "cats/c1.jpg").read_bytes() == files["cats/c1.jpg"]  # never moved on the log's word alone
    assert (q / "manifest.jsonl").is_file()
    report = restore(str(q))
    assert not report.refused
    assert (root / "cats/cut.jpg").read_bytes() == files["cats/cut.jpg"]
    assert (root / "dogs/junk.png").read_bytes() == files["dogs/junk.png"]


def test_dry_run_moves_nothing_and_the_cli_exits_1_for_bad_files(tree, tmp_path):
    root, files = tree
    log = tmp_path / "f.jsonl"
    log_failures(log, [(0, _exc("cats/cut.jpg", root)), (2, _exc("cats/c0.jpg", root))])
    q = tmp_path / "bad"
    out = run_cli("quarantine", "--from-log", str(log), "--quarantine", str(q), "--dry-run", "--json")
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert {i["outcome"] for i in data["items"]} == {"would_quarantine", "left"} and data["bad"] == 1
    assert (root / "cats/cut.jpg").exists() and not q.exists()
    out = run_cli("quarantine", "--from-log", str(log), "--quarantine", str(q))
    assert out.returncode == 1 and "quarantined: " in out.stdout and "left in place" in out.stdout, out.stdout
    assert not (root / "cats/cut.jpg").exists()
    st = run_cli("status", str(q))
    assert st.returncode == 0 and "1" in st.stdout, st.stdout
    out = run_cli("restore", str(q))
    assert out.returncode == 0, out.stderr
    assert (root / "cats/cut.jpg").read_bytes() == files["cats/cut.jpg"]


def test_only_ok_files_exit_0(tree, tmp_path):
    root, _ = tree
    log = tmp_path / "f.jsonl"
    log_failures(log, [(0, _exc("cats/c0.jpg", root))])
    out = run_cli("quarantine", "--from-log", str(log), "--quarantine", str(tmp_path / "bad"))
    assert out.returncode == 0 and "checks ok: left in place" in out.stdout and "size mismatch" not in out.stdout


def test_a_torn_last_line_across_per_process_files_is_counted(tree, tmp_path):
    root, _ = tree
    log = tmp_path / "f.jsonl"
    log_failures(log, [(0, _exc("cats/cut.jpg", root)), (1, _exc("dogs/junk.png", root))])
    with open(tmp_path / "f.rank0.worker1.jsonl", "ab") as f:
        f.write(b'{"v": 1, "kind": "exception", "path": "cats/c2.j')  # killed mid-write
    s = quarantine_from_log([str(log)], FromLogOptions(dry_run=True))
    assert s.torn_lines == 1 and len(s.files_read) == 2
    assert sorted(os.path.relpath(i.path, root) for i in s.items) == ["cats/cut.jpg", "dogs/junk.png"]


def test_user_mistakes_are_clear_errors(tree, tmp_path):
    root, _ = tree
    log = tmp_path / "f.jsonl"
    log_failures(log, [(0, _exc("cats/cut.jpg", root))])
    inside = run_cli("quarantine", "--from-log", str(log), "--quarantine", str(root / "bad"))
    assert inside.returncode == 2 and "inside the dataset root" in inside.stderr and "Traceback" not in inside.stderr
    missing = run_cli("quarantine", "--from-log", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "no failure log" in missing.stderr
    rel = tmp_path / "g.jsonl"
    log_failures(rel, [(0, {"kind": "exception", "path": "cats/cut.jpg", "error": "E"})])
    noroot = run_cli("quarantine", "--from-log", str(rel))
    assert noroot.returncode == 2 and "--root" in noroot.stderr
    ok = run_cli("quarantine", "--from-log", str(rel), "--root", str(root), "--dry-run")
    assert ok.returncode == 1, ok.stderr


def test_what_was_rechecked_is_recorded_in_the_state_folder(tree, tmp_path):
    root, _ = tree
    log = tmp_path / "f.jsonl"
    log_failures(log, [(0, _exc("cats/cut.jpg", root)), (0, _exc("cats/c0.jpg", root))])
    s = quarantine_from_log([str(log)], FromLogOptions(quarantine=str(tmp_path / "bad")))
    assert s.recorded and not s.recorded.startswith(str(root))
    assert rechecked.pending_paths(str(root)) == {"cats/cut.jpg", "cats/c0.jpg"}
    outcomes = {r["path"]: r["outcome"] for r in rechecked.read(str(root))}
    assert outcomes == {"cats/cut.jpg": "quarantined", "cats/c0.jpg": "left"}


def test_log_text_cannot_drive_the_terminal(tree, tmp_path):
    root, _ = tree
    log = tmp_path / "f.jsonl"
    log_failures(log, [(0, _exc("cats/c0.jpg", root, message="\x1b]0;owned\x07\x1b[2Jgone"))])
    out = run_cli("quarantine", "--from-log", str(log))
    assert out.returncode == 0 and "\x1b" not in out.stdout and "\\x1b]0;owned" in out.stdout


def test_a_fifo_for_a_log_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "f.jsonl")
    out = run_cli("quarantine", "--from-log", str(tmp_path / "f.jsonl"))
    assert out.returncode == 2 and "not a regular file" in out.stderr
