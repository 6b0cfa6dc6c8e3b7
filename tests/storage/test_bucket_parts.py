"""A bucket scan as a job array: ``dsclean scan s3://B/P --shard I/N``, then ``dsclean merge`` of its parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from support import synth

from dsclean.index.store import open_index
from dsclean.storage.quarantine import journal_dir
from dsclean.storage.scan import BucketScanOptions, scan_bucket

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_GOOD, N_BAD = 28, 2
BAD = {f"c{i % 3}/bad{i}.png" for i in range(N_BAD)}


def put_set(fs, bucket: str) -> dict[str, bytes]:
    """30 objects under ds/ in three folders: 28 good PNGs and 2 truncated ones."""
    files = {f"c{i % 3}/good{i:02d}.png": synth.png(8, 8, seed=i) for i in range(N_GOOD)}
    files |= {key: synth.truncate(synth.png(8, 8, seed=100 + i), 0.5) for i, key in enumerate(sorted(BAD))}
    for key, data in files.items():
        fs.pipe_file(f"{bucket}/ds/{key}", data)
    return files


def opts(endpoint: str, **kw) -> BucketScanOptions:
    return BucketScanOptions(storage_options={"endpoint_url": endpoint}, jobs=1, **kw)


def verdicts(results: str) -> dict[str, tuple[str, str | None]]:
    t = pq.read_table(results, columns=["path", "status", "reason"]).to_pylist()
    return {os.fsdecode(r["path"]): (r["status"], r["reason"]) for r in t}


def keys(fs, bucket: str, prefix: str) -> list[str]:
    fs.invalidate_cache()
    return sorted(p.split("/", 2)[2] for p in fs.find(f"{bucket}/{prefix}"))


def test_parts_are_disjoint_cover_every_object_and_merge_into_the_whole_scans_verdicts(
    bucket, s3fs_direct, s3_endpoint, tmp_path, cli
):
    files = put_set(s3fs_direct, bucket)
    url = f"s3://{bucket}/ds"
    parts = [scan_bucket(url, opts(s3_endpoint, shard=(i, 3))) for i in range(3)]
    seen = [verdicts(s.results_path) for s in parts]
    assert all(seen), "with 30 keys every one of 3 parts gets some"
    assert sum(len(v) for v in seen) == len(files)  # disjoint ...
    assert set().union(*seen) == set(files)  # ... and covering every object
    assert [os.path.basename(s.results_path) for s in parts] == [
        f"scan_results.part-{i:04d}-of-0003.parquet" for i in range(3)
    ]
    assert sum(s.files for s in parts) == len(files) and sum(s.bad for s in parts) == N_BAD
    # a part does not record itself as the prefix's scan: nothing to index or report yet
    code, _out, err = cli(["report", url, "-o", str(tmp_path / "r.html")])
    assert code != 0 and "no scan of" in err

    whole = scan_bucket(url, opts(s3_endpoint, state_dir=str(tmp_path / "other-state")))
    code, out, err = cli(["merge", *(s.results_path for s in parts), "--json"])
    assert code == 0, err
    merged = json.loads(out)
    assert merged["rows"] == len(files) and merged["bad"] == N_BAD
    assert verdicts(merged["results_path"]) == verdicts(whole.results_path)
    assert {k for k, (status, _) in verdicts(merged["results_path"]).items() if status == "bad"} == BAD
    with open(os.path.join(os.path.dirname(merged["results_path"]), "scan_summary.json")) as f:
        summed = json.load(f)
    assert summed["files"] == len(files) and summed["bad_reasons"] == {"truncated": N_BAD}

    # dsclean index URL finds the merged results (the bad left out, every row judged by the scan, none read again)
    index = tmp_path / "i.arrow"
    code, out, err = cli(["index", url, "-o", str(index), "--storage-option", f"endpoint_url={s3_endpoint}", "--json"])
    assert code == 0, err
    summary = json.loads(out)
    assert summary["excluded_bad"] == N_BAD and summary["checked"] == 0 and summary["changed_since_scan"] == 0
    idx = open_index(str(index))
    assert {os.fsdecode(idx.path_bytes(i)) for i in range(len(idx))} == set(files) - BAD
    # dsclean report URL finds them too
    code, _out, err = cli(["report", url, "-o", str(tmp_path / "r.html")])
    assert code == 0, err
    # a re-scan reuses the merged results' ok rows (the parts' object identities, merged in row order)
    again = scan_bucket(url, opts(s3_endpoint))
    assert again.cached == N_GOOD and again.files == len(files) and again.bad == N_BAD


def test_a_manifest_is_split_by_the_same_hash(bucket, s3fs_direct, s3_endpoint, tmp_path):
    files = put_set(s3fs_direct, bucket)
    listed = sorted(files)[:20]  # the manifest names 20 of the 30 objects
    manifest = tmp_path / "keys.txt"
    manifest.write_text("".join(f"ds/{k}\n" for k in listed))
    url = f"s3://{bucket}/ds"
    by_listing = [set(verdicts(scan_bucket(url, opts(s3_endpoint, shard=(i, 2))).results_path)) for i in range(2)]
    by_manifest = [
        set(verdicts(scan_bucket(url, opts(s3_endpoint, shard=(i, 2), manifest=str(manifest))).results_path))
        for i in range(2)
    ]
    assert by_manifest[0] and by_manifest[1] and not by_manifest[0] & by_manifest[1]
    assert by_manifest[0] | by_manifest[1] == set(listed)
    for i in range(2):  # a key's part is the same whether listed or named by a manifest
        assert by_manifest[i] == by_listing[i] & set(listed)


def test_each_part_quarantines_its_own_objects_in_its_own_journal_and_restore_takes_them_all(
    bucket, s3fs_direct, s3_endpoint, tmp_path, cli
):
    files = put_set(s3fs_direct, bucket)
    url, qurl = f"s3://{bucket}/ds", f"s3://{bucket}/q"
    parts = [scan_bucket(url, opts(s3_endpoint, shard=(i, 3), quarantine=qurl)) for i in range(3)]
    assert sum(s.quarantined for s in parts) == N_BAD and all(s.move_failures == 0 for s in parts)
    assert keys(s3fs_direct, bucket, "q") == sorted(BAD)
    folder = journal_dir(qurl)
    for i, s in enumerate(parts):
        journal = os.path.join(folder, f"manifest.part-{i:04d}-of-0003.jsonl")
        moved = (
            {json.loads(line)["src"] for line in open(journal) if json.loads(line)["op"] == "move"}
            if os.path.exists(journal)
            else set()
        )
        mine = {k for k, (status, _) in verdicts(s.results_path).items() if status == "bad"}
        assert moved == mine  # a part moves only (and all of) the bad objects it checked
        assert s.quarantine_state["moved"] == len(mine)
    assert not os.path.exists(os.path.join(folder, "manifest.jsonl"))  # no part wrote the whole scan's journal

    code, out, err = cli(["status", qurl, "--json"])
    assert code == 0, err
    assert json.loads(out)["quarantine"]["moved"] == N_BAD
    code, out, err = cli(["restore", qurl, "--storage-option", f"endpoint_url={s3_endpoint}"])
    assert code == 0, err
    assert f"{N_BAD} restored" in out
    assert keys(s3fs_direct, bucket, "q") == []
    assert {k: s3fs_direct.cat_file(f"{bucket}/ds/{k}") for k in keys(s3fs_direct, bucket, "ds")} == files


def test_two_runs_of_one_part_are_refused_but_other_parts_run_beside_it(bucket, s3fs_direct, s3_endpoint):
    from dsclean import locations
    from dsclean.errors import UserError
    from dsclean.storage.scan import lock_prefix
    from dsclean.storage.urls import normalize

    put_set(s3fs_direct, bucket)
    url = normalize(f"s3://{bucket}/ds")
    state = locations.url_state_dir(url)
    os.makedirs(state, exist_ok=True)
    held = lock_prefix(state, url, (0, 3))  # as a running part 0/3 holds them
    try:
        with pytest.raises(UserError, match="part 0/3"):
            scan_bucket(url, opts(s3_endpoint, shard=(0, 3)))
        with pytest.raises(UserError, match="is scanning"):
            scan_bucket(url, opts(s3_endpoint))  # the whole prefix beside a part
        assert scan_bucket(url, opts(s3_endpoint, shard=(1, 3))).files > 0
    finally:
        for fd in held:
            os.close(fd)


def test_a_bad_part_number_is_a_clear_error(bucket, s3_endpoint):
    from dsclean.errors import UserError

    with pytest.raises(UserError, match="--shard 3/3: need 0 <= I < N"):
        scan_bucket(f"s3://{bucket}/ds", opts(s3_endpoint, shard=(3, 3)))


def _part_cmd(bucket: str, endpoint: str, part: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dsclean",
        "scan",
        f"s3://{bucket}/ds",
        "--shard",
        part,
        "--quarantine",
        f"s3://{bucket}/q",
        "--storage-option",
        f"endpoint_url={endpoint}",
        "-j",
        "1",
        "-q",
    ]


@pytest.mark.slow  # fault injection: a part killed with SIGKILL mid-move, five dsclean processes
def test_a_part_killed_mid_move_is_recovered_from_its_journal_nothing_lost_nothing_twice(
    bucket, s3fs_direct, s3_endpoint
):
    """``dsclean scan URL --shard I/N`` on the command line, killed (SIGKILL) after a verified copy and before
    the original's delete: ``dsclean recover`` finishes the move from the part's journal; killed again, the next
    run of another part does (each part journals its own moves); the part again, then restore."""
    from dsclean.scanning.scanner import in_part

    bad = [k for k in (f"bad{i}.png" for i in range(40)) if in_part(k, (0, 2))][:3]
    bad += [k for k in (f"bad{i}.png" for i in range(40)) if in_part(k, (1, 2))][:2]
    files = {k: synth.truncate(synth.png(8, 8, seed=i), 0.5) for i, k in enumerate(bad)}
    files |= {f"good{i}.png": synth.png(8, 8, seed=50 + i) for i in range(4)}
    for key, data in files.items():
        s3fs_direct.pipe_file(f"{bucket}/ds/{key}", data)
    env = {**os.environ, "PYTHONPATH": REPO, "DSCLEAN_TEST_FAULTS": "1", "DSCLEAN_TEST_KILL_AT": "copied:2"}
    proc = subprocess.run(_part_cmd(bucket, s3_endpoint, "0/2"), env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    ds, q = keys(s3fs_direct, bucket, "ds"), keys(s3fs_direct, bucket, "q")
    assert len(set(ds) & set(q)) == 1 and len(q) == 2  # one object in two places, an open intent in part 0's journal
    code = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsclean",
            "recover",
            f"s3://{bucket}/q",
            "--storage-option",
            f"endpoint_url={s3_endpoint}",
        ],
        env=env,
        capture_output=True,
        timeout=120,
    ).returncode
    assert code == 0
    ds, q = keys(s3fs_direct, bucket, "ds"), keys(s3fs_direct, bucket, "q")
    assert not set(ds) & set(q) and sorted(ds + q) == sorted(files)  # nothing twice, nothing lost
    # killed again (after its next verified copy): this time the next run of another part recovers its journal
    env["DSCLEAN_TEST_KILL_AT"] = "copied:1"
    proc = subprocess.run(_part_cmd(bucket, s3_endpoint, "0/2"), env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    assert len(set(keys(s3fs_direct, bucket, "ds")) & set(keys(s3fs_direct, bucket, "q"))) == 1
    env.pop("DSCLEAN_TEST_KILL_AT")
    proc = subprocess.run(_part_cmd(bucket, s3_endpoint, "1/2"), env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()  # every bad object it found moved
    ds, q = keys(s3fs_direct, bucket, "ds"), keys(s3fs_direct, bucket, "q")
    assert set(bad[3:]) <= set(q)  # part 1 moved its own two
    assert not set(ds) & set(q) and sorted(ds + q) == sorted(files)  # and finished part 0's half-done move
    proc = subprocess.run(_part_cmd(bucket, s3_endpoint, "0/2"), env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert keys(s3fs_direct, bucket, "q") == sorted(bad)
    assert keys(s3fs_direct, bucket, "ds") == [f"good{i}.png" for i in range(4)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsclean",
            "restore",
            f"s3://{bucket}/q",
            "--storage-option",
            f"endpoint_url={s3_endpoint}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and f"{len(bad)} restored" in proc.stdout, proc.stderr
    assert {k: s3fs_direct.cat_file(f"{bucket}/ds/{k}") for k in keys(s3fs_direct, bucket, "ds")} == files
