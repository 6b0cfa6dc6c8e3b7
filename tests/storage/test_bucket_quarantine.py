"""Quarantine in a bucket: copy, verify, delete, journaled; restore; kill -9 mid-move then recovery."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support import synth

from dsclean.cli import main
from dsclean.storage.quarantine import journal_dir
from dsclean.storage.scan import BucketScanOptions, scan_bucket

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def put_set(fs, bucket, bad=3, good=2):
    for i in range(bad):
        fs.pipe_file(f"{bucket}/ds/bad{i}.png", synth.truncate(synth.png(16, 16, seed=i), 0.5))
    for i in range(good):
        fs.pipe_file(f"{bucket}/ds/good{i}.png", synth.png(16, 16, seed=10 + i))


def keys(fs, bucket, prefix):
    fs.invalidate_cache()
    return sorted(p.split("/", 2)[2] for p in fs.find(f"{bucket}/{prefix}"))


def test_bad_objects_move_to_the_quarantine_prefix_and_restore_puts_them_back(
    bucket, s3fs_direct, s3_endpoint, tmp_path, capsys
):
    put_set(s3fs_direct, bucket)
    before = {k: s3fs_direct.cat_file(f"{bucket}/ds/{k}") for k in keys(s3fs_direct, bucket, "ds")}
    state = str(tmp_path / "state")
    opts = BucketScanOptions(
        storage_options={"endpoint_url": s3_endpoint}, jobs=1, quarantine=f"s3://{bucket}/q", state_dir=state
    )
    summary = scan_bucket(f"s3://{bucket}/ds", opts)
    assert summary.quarantined == 3 and summary.move_failures == 0
    assert keys(s3fs_direct, bucket, "ds") == ["good0.png", "good1.png"]
    assert keys(s3fs_direct, bucket, "q") == ["bad0.png", "bad1.png", "bad2.png"]
    for k in ("bad0.png", "bad1.png", "bad2.png"):
        assert s3fs_direct.cat_file(f"{bucket}/q/{k}") == before[k]  # the very bytes
    journal = os.path.join(journal_dir(f"s3://{bucket}/q", state), "manifest.jsonl")
    ops = [json.loads(line)["op"] for line in open(journal)]
    assert ops == ["move", "done"] * 3  # each move announced before, its outcome after
    # a second scan finds nothing more (the quarantine prefix is outside the scanned one)
    again = scan_bucket(f"s3://{bucket}/ds", opts)
    assert again.files == 2 and again.quarantined == 0
    # ... and says what the quarantine holds, all runs: the problems file lists the earlier moves
    assert again.quarantine_state["moved"] == 3 and again.quarantine_state["by_reason"] == {"truncated": 3}
    earlier = [json.loads(line) for line in open(again.problems_path)]
    assert sorted((p["path"], p["reason"], p["quarantined_as"]) for p in earlier) == [
        (f"bad{i}.png", "truncated", f"bad{i}.png") for i in range(3)
    ]

    assert main(["status", f"s3://{bucket}/q/", "--state-dir", state, "--json"]) == 0
    held = json.loads(capsys.readouterr().out)["quarantine"]
    assert held["moved"] == 3 and held["roots"] == [f"s3://{bucket}/ds"] and held["quarantine"] == f"s3://{bucket}/q"
    code = main(
        ["restore", f"s3://{bucket}/q", "--storage-option", f"endpoint_url={s3_endpoint}", "--state-dir", state]
    )
    assert code == 0 and "3 restored" in capsys.readouterr().out
    assert keys(s3fs_direct, bucket, "q") == []
    assert {k: s3fs_direct.cat_file(f"{bucket}/ds/{k}") for k in keys(s3fs_direct, bucket, "ds")} == before


def test_quarantine_inside_the_scanned_prefix_is_not_scanned(bucket, s3fs_direct, s3_endpoint, tmp_path):
    put_set(s3fs_direct, bucket, bad=1, good=1)
    opts = BucketScanOptions(
        storage_options={"endpoint_url": s3_endpoint},
        jobs=1,
        quarantine=f"s3://{bucket}/ds/_quarantine",
        state_dir=str(tmp_path),
    )
    assert scan_bucket(f"s3://{bucket}/ds", opts).quarantined == 1
    second = scan_bucket(f"s3://{bucket}/ds", opts)
    assert second.files == 1 and second.bad == 0  # the quarantined copy is not checked (and moved) again


def test_denylist_lists_bad_objects_and_moves_nothing(bucket, s3fs_direct, s3_endpoint, tmp_path):
    put_set(s3fs_direct, bucket, bad=2, good=1)
    report = tmp_path / "r"
    opts = BucketScanOptions(
        storage_options={"endpoint_url": s3_endpoint}, jobs=1, denylist=True, report_dir=str(report)
    )
    summary = scan_bucket(f"s3://{bucket}/ds", opts)
    assert summary.would_quarantine == 2 and summary.quarantined == 0
    assert len(keys(s3fs_direct, bucket, "ds")) == 3
    entries = [json.loads(line) for line in open(report / "denylist.jsonl")]
    assert sorted(e["path"] for e in entries) == ["bad0.png", "bad1.png"]


def _scan_cmd(bucket, endpoint, state):
    return [
        sys.executable,
        "-m",
        "dsclean",
        "scan",
        f"s3://{bucket}/ds",
        "--quarantine",
        f"s3://{bucket}/q",
        "--storage-option",
        f"endpoint_url={endpoint}",
        "--state-dir",
        state,
        "-j",
        "1",
        "-q",
    ]


def test_kill_9_mid_quarantine_then_recovery_loses_nothing_and_leaves_nothing_twice(
    bucket, s3fs_direct, s3_endpoint, tmp_path
):
    put_set(s3fs_direct, bucket, bad=3, good=1)
    before = {k: s3fs_direct.cat_file(f"{bucket}/ds/{k}") for k in keys(s3fs_direct, bucket, "ds")}
    state = str(tmp_path / "state")
    env = {**os.environ, "PYTHONPATH": REPO, "DSCLEAN_TEST_FAULTS": "1", "DSCLEAN_TEST_KILL_AT": "copied:2"}
    proc = subprocess.run(_scan_cmd(bucket, s3_endpoint, state), env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    # killed after the 2nd copy was verified and before its original was deleted: one object in two places
    ds, q = keys(s3fs_direct, bucket, "ds"), keys(s3fs_direct, bucket, "q")
    assert len(set(ds) & set(q)) == 1 and len(q) == 2
    code = main(
        ["recover", f"s3://{bucket}/q", "--storage-option", f"endpoint_url={s3_endpoint}", "--state-dir", state]
    )
    assert code == 0
    ds, q = keys(s3fs_direct, bucket, "ds"), keys(s3fs_direct, bucket, "q")
    assert not set(ds) & set(q)  # nothing in two places
    assert sorted(ds + q) == sorted(before)  # nothing lost
    for k in q:
        assert s3fs_direct.cat_file(f"{bucket}/q/{k}") == before[k]
    # the next scan finishes the job: every bad object in the quarantine, the good one where it was
    env.pop("DSCLEAN_TEST_KILL_AT")
    proc = subprocess.run(_scan_cmd(bucket, s3_endpoint, state), env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert keys(s3fs_direct, bucket, "ds") == ["good0.png"]
    assert keys(s3fs_direct, bucket, "q") == ["bad0.png", "bad1.png", "bad2.png"]


def test_recovery_reverts_a_move_killed_before_its_copy(bucket, s3fs_direct, s3_endpoint, tmp_path):
    """An intent journaled, the process killed before the copy: recovery marks it aborted, the original stays."""
    from dsclean.scanning.quarantine.journal import Journal
    from dsclean.storage.quarantine import recover

    put_set(s3fs_direct, bucket, bad=1, good=0)
    state = str(tmp_path / "state")
    folder = journal_dir(f"s3://{bucket}/q", state)
    os.makedirs(folder)
    j = Journal(os.path.join(folder, "manifest.jsonl"))
    j.append(
        {
            "op": "move",
            "id": "x1",
            "root": f"s3://{bucket}/ds",
            "src": "bad0.png",
            "qroot": f"s3://{bucket}/q",
            "dst": "bad0.png",
            "size": 1,
            "etag": None,
        }
    )
    j.close()
    report = recover(f"s3://{bucket}/q", {"endpoint_url": s3_endpoint}, state)
    assert (report.reverted, report.completed) == (1, 0)
    assert keys(s3fs_direct, bucket, "ds") == ["bad0.png"] and keys(s3fs_direct, bucket, "q") == []


def test_an_object_changed_since_its_check_is_not_moved(bucket, s3fs_direct, s3_endpoint, tmp_path):
    import pytest

    from dsclean.storage.fs import Store
    from dsclean.storage.quarantine import BucketQuarantine, MoveError

    put_set(s3fs_direct, bucket, bad=1, good=0)
    info = s3fs_direct.info(f"{bucket}/ds/bad0.png")
    src = Store(f"s3://{bucket}/ds", {"endpoint_url": s3_endpoint})
    q = Store(f"s3://{bucket}/q", {"endpoint_url": s3_endpoint})
    with BucketQuarantine(src, q, str(tmp_path)) as bq:
        with pytest.raises(MoveError, match="changed since it was checked"):
            bq.move("bad0.png", info["size"], "0" * 32)  # the ETag the check saw is not the object's now
        with pytest.raises(MoveError, match="not a key below"):
            bq.move("../escape.png", 1, None)
    assert keys(s3fs_direct, bucket, "ds") == ["bad0.png"] and keys(s3fs_direct, bucket, "q") == []
    lines = [json.loads(line) for line in open(os.path.join(journal_dir(q.url, str(tmp_path)), "manifest.jsonl"))]
    assert [e["op"] for e in lines] == ["move", "abort"]  # the refused move is journaled with its outcome


def test_quarantine_flags_move_whole_objects_with_a_flag_as_the_local_scan_does(
    bucket, s3fs_direct, s3_endpoint, tmp_path, capsys
):
    """``--quarantine-flags dark``: a whole, decodable but dark object moves with reason ``flagged`` (journaled,
    restorable); a truncated one still moves as bad; the others stay. With ``--denylist`` it is listed instead."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (3, 3, 3)).save(buf, "PNG")
    files = {
        "dark.png": buf.getvalue(),
        "photo.png": synth.png(64, 64, seed=1),
        "bad.png": synth.truncate(synth.png(64, 64, seed=3), 0.5),
    }
    for key, data in files.items():
        s3fs_direct.pipe_file(f"{bucket}/ds/{key}", data)
    state = str(tmp_path / "state")
    endpoint = ["--storage-option", f"endpoint_url={s3_endpoint}", "--state-dir", state]
    code = main(
        ["scan", f"s3://{bucket}/ds", "--denylist", "--quarantine-flags", "dark", "-j", "1", "--json", *endpoint]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["flag_quarantined"] == 1 and summary["flags"]["dark"] == 1  # every problem handled
    deny = os.path.join(os.path.dirname(summary["results_path"]), "denylist.jsonl")
    assert sorted((e["path"], e["reason"]) for e in map(json.loads, open(deny))) == [
        ("bad.png", "truncated"),
        ("dark.png", "flagged"),
    ]
    assert keys(s3fs_direct, bucket, "ds") == sorted(files)  # a deny-list moves nothing

    code = main(
        [
            "scan",
            f"s3://{bucket}/ds",
            "--quarantine",
            f"s3://{bucket}/q",
            "--quarantine-flags",
            "dark",
            "-j",
            "1",
            "--json",
            *endpoint,
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["quarantined"] == 2 and summary["flag_quarantined"] == 1 and summary["move_failures"] == 0
    assert keys(s3fs_direct, bucket, "q") == ["bad.png", "dark.png"] and keys(s3fs_direct, bucket, "ds") == [
        "photo.png"
    ]
    moves = [json.loads(line) for line in open(os.path.join(journal_dir(f"s3://{bucket}/q", state), "manifest.jsonl"))]
    assert {(e["src"], e["reason"]) for e in moves if e["op"] == "move"} == {
        ("bad.png", "truncated"),
        ("dark.png", "flagged"),
    }
    problems = {p["path"]: p for p in map(json.loads, open(summary["problems_path"]))}
    assert problems["dark.png"]["status"] == "ok" and problems["dark.png"]["flag"] == "dark"  # whole: ok, flagged
    assert main(["restore", f"s3://{bucket}/q", *endpoint]) == 0
    assert keys(s3fs_direct, bucket, "ds") == sorted(files)
    capsys.readouterr()
    code = main(["scan", f"s3://{bucket}/ds", "--quarantine-flags", "no_such_flag", *endpoint])
    assert code == 2 and "unknown flag 'no_such_flag'" in capsys.readouterr().err


def test_a_part_starts_while_a_sibling_part_recovers_its_journal_and_a_second_run_of_a_part_is_refused(
    bucket, s3_endpoint, tmp_path, monkeypatch
):
    """Each part, on entry, recovers the journals no run holds, holding each one's lock a while: a part starting
    meanwhile waits for that (it used to exit "in use" at once); two runs of the same part are still refused."""
    import threading
    import time
    from types import SimpleNamespace

    import pytest

    from dsclean.errors import UserError
    from dsclean.storage import quarantine
    from dsclean.storage.fs import Store

    src = Store(f"s3://{bucket}/ds", {"endpoint_url": s3_endpoint})
    q = Store(f"s3://{bucket}/q", {"endpoint_url": s3_endpoint})
    a, b = ".part-0000-of-0002", ".part-0001-of-0002"
    with quarantine.BucketQuarantine(src, q, str(tmp_path), tag=b):
        pass  # part b's journal exists: part a's entry recovers it
    real, recovering = quarantine.recover_locked, threading.Event()

    def slow(journal, folder, qstore, policy, store_of, tag):  # part a holds part b's journal for a second
        if tag == b and threading.current_thread() is not threading.main_thread():
            recovering.set()
            time.sleep(1.0)
        return real(journal, folder, qstore, policy, store_of, tag)

    monkeypatch.setattr(quarantine, "recover_locked", slow)
    entered = threading.Event()

    def part_a() -> None:
        with quarantine.BucketQuarantine(src, q, str(tmp_path), tag=a):
            entered.set()

    thread = threading.Thread(target=part_a)
    thread.start()
    try:
        assert recovering.wait(30)
        with quarantine.BucketQuarantine(src, q, str(tmp_path), tag=b) as part_b:  # starts while a holds its journal
            assert part_b.journal is not None
            assert entered.wait(30)  # part a's recovery of b ended (its lock given up) before b got it

            def no_wait(seconds: float) -> None:
                raise AssertionError(f"a second run of a part waited {seconds} s instead of being refused")

            monkeypatch.setattr(quarantine, "time", SimpleNamespace(monotonic=time.monotonic, sleep=no_wait))
            with pytest.raises(UserError, match="in use by another dsclean process"):
                with quarantine.BucketQuarantine(src, q, str(tmp_path), tag=b):
                    pass  # a second run of part b: refused at once
    finally:
        thread.join(30)
