"""The bucket quarantine's journal promise: an object found at the destination after a crash is dsclean's
copy only if the intent says the destination was free when it was written; recovery never deletes or
overwrites anything else (a pre-existing object at the quarantine key, a user's new object at a restore's key)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from storage.test_bucket_quarantine import REPO, _scan_cmd, keys, put_set
from support import synth
from support.s3server import FaultProxy

from dsclean.cli import main
from dsclean.scanning.quarantine.journal import Journal
from dsclean.storage.quarantine import MoveError, journal_dir, recover


def _journal(bucket, state):
    path = os.path.join(journal_dir(f"s3://{bucket}/q", state), "manifest.jsonl")
    return [json.loads(line) for line in open(path)]


def _killed_after_intent(bucket, endpoint, state):
    env = {**os.environ, "PYTHONPATH": REPO, "DSCLEAN_TEST_FAULTS": "1", "DSCLEAN_TEST_KILL_AT": "journaled:1"}
    proc = subprocess.run(_scan_cmd(bucket, endpoint, state), env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()


def _recover(bucket, endpoint, state):
    return main(["recover", f"s3://{bucket}/q", "--storage-option", f"endpoint_url={endpoint}", "--state-dir", state])


def test_kill_9_after_the_intent_over_an_object_already_at_the_quarantine_key_loses_nothing(
    bucket, s3fs_direct, s3_endpoint, tmp_path
):
    put_set(s3fs_direct, bucket, bad=1, good=0)
    original = s3fs_direct.cat_file(f"{bucket}/ds/bad0.png")
    theirs = synth.png(16, 16, seed=99)  # someone else's object, at the very key the move would copy to
    s3fs_direct.pipe_file(f"{bucket}/q/bad0.png", theirs)
    state = str(tmp_path / "state")
    _killed_after_intent(bucket, s3_endpoint, state)
    [intent] = _journal(bucket, state)
    assert intent["op"] == "move" and intent["dst_free"] is False  # checked first: the key was taken
    assert _recover(bucket, s3_endpoint, state) == 0
    s3fs_direct.invalidate_cache()
    assert s3fs_direct.cat_file(f"{bucket}/ds/bad0.png") == original  # the original stays
    assert s3fs_direct.cat_file(f"{bucket}/q/bad0.png") == theirs  # their object is not taken for our copy
    assert [e["op"] for e in _journal(bucket, state)] == ["move", "abort"]


def test_kill_9_after_the_intent_of_a_free_key_reverts_to_the_original(bucket, s3fs_direct, s3_endpoint, tmp_path):
    put_set(s3fs_direct, bucket, bad=1, good=0)
    original = s3fs_direct.cat_file(f"{bucket}/ds/bad0.png")
    state = str(tmp_path / "state")
    _killed_after_intent(bucket, s3_endpoint, state)
    [intent] = _journal(bucket, state)
    assert intent["dst_free"] is True and intent["size"] == len(original)
    assert keys(s3fs_direct, bucket, "q") == []  # killed before the copy
    assert _recover(bucket, s3_endpoint, state) == 0
    assert keys(s3fs_direct, bucket, "ds") == ["bad0.png"] and keys(s3fs_direct, bucket, "q") == []
    assert [e["op"] for e in _journal(bucket, state)] == ["move", "abort"]


@pytest.mark.parametrize("size", [None, 7], ids=["no-size", "other-size"])
def test_an_older_intent_never_takes_an_object_at_the_destination_for_its_copy(
    bucket, s3fs_direct, s3_endpoint, tmp_path, size
):
    """An intent without ``dst_free`` (written before the check, as older journals were): an object at
    the destination that is not the very bytes checked is left alone, and so is the original."""
    put_set(s3fs_direct, bucket, bad=1, good=0)
    original = s3fs_direct.cat_file(f"{bucket}/ds/bad0.png")
    theirs = synth.png(8, 8, seed=5)
    s3fs_direct.pipe_file(f"{bucket}/q/bad0.png", theirs)
    state = str(tmp_path / "state")
    folder = journal_dir(f"s3://{bucket}/q", state)
    os.makedirs(folder)
    j = Journal(os.path.join(folder, "manifest.jsonl"))
    entry = {"op": "move", "id": "x1", "root": f"s3://{bucket}/ds", "src": "bad0.png", "qroot": f"s3://{bucket}/q"}
    j.append({**entry, "dst": "bad0.png", "size": size, "etag": None})
    j.close()
    report = recover(f"s3://{bucket}/q", {"endpoint_url": s3_endpoint}, state)
    assert (report.completed, report.reverted) == (0, 1)
    assert any("not known to be ours" in r for r in report.refused)
    s3fs_direct.invalidate_cache()
    assert s3fs_direct.cat_file(f"{bucket}/ds/bad0.png") == original
    assert s3fs_direct.cat_file(f"{bucket}/q/bad0.png") == theirs


def test_restore_over_a_new_object_at_the_original_key_overwrites_nothing(
    bucket, s3fs_direct, s3_endpoint, tmp_path, capsys
):
    put_set(s3fs_direct, bucket, bad=1, good=0)
    bad = s3fs_direct.cat_file(f"{bucket}/ds/bad0.png")
    state = str(tmp_path / "state")
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run(_scan_cmd(bucket, s3_endpoint, state), env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    new = synth.png(16, 16, seed=42)  # the user put a fixed image at the old key since
    s3fs_direct.pipe_file(f"{bucket}/ds/bad0.png", new)
    code = main(
        ["restore", f"s3://{bucket}/q", "--storage-option", f"endpoint_url={s3_endpoint}", "--state-dir", state]
    )
    assert code != 0 and "already exists" in capsys.readouterr().err
    s3fs_direct.invalidate_cache()
    assert s3fs_direct.cat_file(f"{bucket}/ds/bad0.png") == new
    assert s3fs_direct.cat_file(f"{bucket}/q/bad0.png") == bad
    ops = [(e["op"], e.get("dst_free")) for e in _journal(bucket, state)]
    assert ops == [("move", True), ("done", None), ("restore", False), ("abort", None)]


def _quarantine_through(proxy_url, bucket, state):
    from dsclean.storage.fs import Store
    from dsclean.storage.quarantine import BucketQuarantine
    from dsclean.storage.reads import ReadPolicy

    src = Store(f"s3://{bucket}/ds", {"endpoint_url": proxy_url})
    q = Store(f"s3://{bucket}/q", {"endpoint_url": proxy_url})
    return BucketQuarantine(src, q, state, ReadPolicy(retries=1, base_delay=0.01))


def test_a_delete_whose_answer_was_lost_then_a_failed_retry_keeps_the_only_copy(
    bucket, s3fs_direct, s3_endpoint, tmp_path
):
    """The server deletes the original but its answer is lost, and the retry fails: the copy in the
    quarantine is then the only one, and stays; the journal says the move is done."""
    put_set(s3fs_direct, bucket, bad=1, good=0)
    original = s3fs_direct.cat_file(f"{bucket}/ds/bad0.png")
    info = s3fs_direct.info(f"{bucket}/ds/bad0.png")
    state = str(tmp_path / "state")
    with FaultProxy(s3_endpoint, match="/ds/", lose_deletes=1, fail_deletes=5) as proxy:
        with _quarantine_through(proxy.url, bucket, state) as bq:
            moved = bq.move("bad0.png", info["size"], info["ETag"].strip('"'))
    assert moved == f"s3://{bucket}/q/bad0.png"
    assert [what for _path, what in proxy.deletes] == ["forwarded, answer lost", "failed"]  # a retry, failed
    assert keys(s3fs_direct, bucket, "ds") == [] and keys(s3fs_direct, bucket, "q") == ["bad0.png"]
    assert s3fs_direct.cat_file(f"{bucket}/q/bad0.png") == original
    lines = _journal(bucket, state)
    assert [e["op"] for e in lines] == ["move", "done"]
    assert "answer was lost" in lines[1]["note"] and "HTTP 500" in lines[1]["note"]  # the journal says what happened


def test_a_delete_that_keeps_failing_leaves_the_original_and_removes_the_copy(
    bucket, s3fs_direct, s3_endpoint, tmp_path
):
    put_set(s3fs_direct, bucket, bad=1, good=0)
    original = s3fs_direct.cat_file(f"{bucket}/ds/bad0.png")
    info = s3fs_direct.info(f"{bucket}/ds/bad0.png")
    state = str(tmp_path / "state")
    with FaultProxy(s3_endpoint, match="/ds/", fail_deletes=5) as proxy:
        with _quarantine_through(proxy.url, bucket, state) as bq:
            with pytest.raises(MoveError, match="could not delete"):
                bq.move("bad0.png", info["size"], info["ETag"].strip('"'))
    assert [what for _path, what in proxy.deletes] == ["failed", "failed"]  # never reached the server
    assert keys(s3fs_direct, bucket, "ds") == ["bad0.png"] and keys(s3fs_direct, bucket, "q") == []
    assert s3fs_direct.cat_file(f"{bucket}/ds/bad0.png") == original
    lines = _journal(bucket, state)
    assert [e["op"] for e in lines] == ["move", "abort"] and "could not delete" in lines[1]["error"]


def test_an_object_unreadable_after_the_retries_is_not_moved(bucket, s3fs_direct, s3_endpoint, tmp_path):
    """Throttled past the retries, a healthy object is bad/unreadable: its bytes were never judged, so it
    stays where it is (the truly broken one beside it is moved)."""
    from dsclean.storage.reads import ReadPolicy
    from dsclean.storage.scan import BucketScanOptions, scan_bucket

    put_set(s3fs_direct, bucket, bad=1, good=1)
    with FaultProxy(s3_endpoint, failures=100, status=503, match="/ds/good0.png") as proxy:
        opts = BucketScanOptions(
            storage_options={"endpoint_url": proxy.url},
            jobs=1,
            quarantine=f"s3://{bucket}/q",
            state_dir=str(tmp_path / "state"),
            policy=ReadPolicy(retries=1, base_delay=0.01),
        )
        summary = scan_bucket(f"s3://{bucket}/ds", opts)
    assert summary.bad == 2 and summary.quarantined == 1 and summary.move_failures == 0
    assert keys(s3fs_direct, bucket, "ds") == ["good0.png"] and keys(s3fs_direct, bucket, "q") == ["bad0.png"]
    assert any(n.startswith("1 objects could not be read") for n in summary.notes)


def test_a_store_that_denies_the_checks_fails_the_move_and_recovery_cleanly(bucket, s3fs_direct, s3_endpoint, tmp_path):
    """HEADs of the quarantine keys denied (403): the move is refused and journaled, and a recovery that
    cannot look leaves its intent open for later; neither raises past dsclean, nothing moves."""
    put_set(s3fs_direct, bucket, bad=1, good=0)
    info = s3fs_direct.info(f"{bucket}/ds/bad0.png")
    state = str(tmp_path / "state")
    with FaultProxy(s3_endpoint, failures=10**6, status=403, match="/q/", heads=True) as proxy:
        with _quarantine_through(proxy.url, bucket, state) as bq:
            with pytest.raises(MoveError, match="cannot check .*HTTP 403"):
                bq.move("bad0.png", info["size"], info["ETag"].strip('"'))
        j = Journal(os.path.join(journal_dir(f"s3://{bucket}/q", state), "manifest.jsonl"))
        entry = {"op": "move", "id": "x1", "root": f"s3://{bucket}/ds", "src": "bad0.png", "qroot": f"s3://{bucket}/q"}
        j.append({**entry, "dst": "bad0.png", "size": info["size"], "etag": None, "dst_free": True})
        j.close()
        report = recover(f"s3://{bucket}/q", {"endpoint_url": proxy.url}, state)
    assert report.completed == report.reverted == 0
    assert any("x1" in r and "left for the next recovery" in r for r in report.refused)
    assert [(e["op"], e.get("dst_free")) for e in _journal(bucket, state)] == [
        ("move", False),
        ("abort", None),
        ("move", True),
    ]  # the refused move journaled; the open intent still open
    assert keys(s3fs_direct, bucket, "ds") == ["bad0.png"] and keys(s3fs_direct, bucket, "q") == []


def test_kill_9_after_a_restore_intent_then_recovery_and_restore_lose_nothing(
    bucket, s3fs_direct, s3_endpoint, tmp_path
):
    put_set(s3fs_direct, bucket, bad=1, good=0)
    bad = s3fs_direct.cat_file(f"{bucket}/ds/bad0.png")
    state = str(tmp_path / "state")
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run(_scan_cmd(bucket, s3_endpoint, state), env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    restore = [sys.executable, "-m", "dsclean", "restore", f"s3://{bucket}/q"]
    restore += ["--storage-option", f"endpoint_url={s3_endpoint}", "--state-dir", state]
    env.update(DSCLEAN_TEST_FAULTS="1", DSCLEAN_TEST_KILL_AT="journaled:1")
    proc = subprocess.run(restore, env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    assert (_journal(bucket, state)[-1]["op"], _journal(bucket, state)[-1]["dst_free"]) == ("restore", True)
    assert _recover(bucket, s3_endpoint, state) == 0  # killed before the copy: reverted
    assert keys(s3fs_direct, bucket, "ds") == [] and keys(s3fs_direct, bucket, "q") == ["bad0.png"]
    env.pop("DSCLEAN_TEST_KILL_AT")
    proc = subprocess.run(restore, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert keys(s3fs_direct, bucket, "q") == [] and s3fs_direct.cat_file(f"{bucket}/ds/bad0.png") == bad
