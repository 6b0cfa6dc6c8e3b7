"""The next scan of the root checks again the files that failed in training, whatever its cache says."""

from __future__ import annotations

import json

from support.failurelogs import log_failures
from support.fixtures.cli import run_cli

from dsclean import rechecked
from dsclean.fromlog import FromLogOptions, quarantine_from_log
from dsclean.scanning.scanner import ScanOptions, scan


def test_the_next_scan_rechecks_recorded_failures_and_says_so(tree, tmp_path):
    root, files = tree
    q = tmp_path / "bad"
    first = scan(str(root), ScanOptions(jobs=1, quarantine=str(q)))
    assert first.quarantined == 2 and first.training_rechecked == 0  # cut.jpg and junk.png
    # the file goes bad in a way the cache cannot see (same size, same mtime: bit rot under a read-only mount)
    log = tmp_path / "f.jsonl"
    log_failures(
        log,
        [
            (0, {"kind": "exception", "path": "cats/c0.jpg", "root": str(root), "error": "OSError"}),
            (1, {"kind": "exception", "path": "cats/c1.jpg", "root": str(root), "error": "KeyError"}),
        ],
    )
    s = quarantine_from_log([str(log)], FromLogOptions(dry_run=True))
    assert {i.outcome for i in s.items} == {"left"}
    import os

    st = os.stat(root / "cats/c0.jpg")
    data = bytearray(files["cats/c0.jpg"])
    data[len(data) // 2 :] = b"\0" * (len(data) - len(data) // 2)
    (root / "cats/c0.jpg").write_bytes(bytes(data))
    os.utime(root / "cats/c0.jpg", ns=(st.st_atime_ns, st.st_mtime_ns))
    again = scan(str(root), ScanOptions(jobs=1, quarantine=str(q)))
    assert again.training_rechecked == 2 and again.training_bad == 1 and again.cached >= 1
    assert not (root / "cats/c0.jpg").exists() and (q / "cats/c0.jpg").exists()
    assert rechecked.pending_paths(str(root)) == frozenset()  # done: the third scan trusts its cache again
    third = scan(str(root), ScanOptions(jobs=1, quarantine=str(q)))
    assert third.training_rechecked == 0


def test_the_cli_message_and_json_and_scan_from_log(tree, tmp_path):
    root, _ = tree
    out = run_cli("scan", str(root), "--dry-run", "-j", "1", "-q")  # the cache now knows every file
    assert out.returncode == 0, out.stderr
    log = tmp_path / "f.jsonl"
    log_failures(
        log,
        [
            (0, {"kind": "exception", "path": str(root / "cats/cut.jpg"), "error": "OSError"}),
            (0, {"kind": "exception", "path": "cats/c2.jpg", "root": str(root), "error": "E"}),
        ],
    )
    out = run_cli("scan", str(root), "--dry-run", "-j", "1", "--from-log", str(log))
    assert "Re-used" in out.stdout  # the other files came from the cache
    assert "Re-checked 2 files that failed in training: 1 bad (would be quarantined), 1 ok" in out.stdout, out.stdout
    out = run_cli("scan", str(root), "--dry-run", "-j", "1", "--from-log", str(log), "--json")
    summary = json.loads(out.stdout)
    assert summary["training_rechecked"] == 2 and summary["training_bad"] == 1


def test_scan_from_log_user_mistakes(tree, tmp_path):
    import os

    root, _ = tree
    out = run_cli("scan", str(root), "--dry-run", "--from-log", str(tmp_path / "nope.jsonl"))
    assert out.returncode == 2 and "no failure log" in out.stderr and "Traceback" not in out.stderr
    os.mkfifo(tmp_path / "fifo.jsonl")
    out = run_cli("scan", str(root), "--dry-run", "--from-log", str(tmp_path / "fifo.jsonl"))
    assert out.returncode == 2 and "not a regular file" in out.stderr
