"""Shard sets in a bucket (a real S3 server, moto): a prefix of tars or Parquet files is recognised without a flag
and read from the store (tars streamed by the workers, no local copy), results named by key relative to the
prefix, nothing written into the bucket unless a --denylist URL says so; reads retried, a 403 named."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import webdataset as wds
from support import synth
from support.s3server import FaultProxy

from dsclean import denylist
from dsclean.shardsets.detect import detect
from dsclean.shardsets.repack import repack_shard_set
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set, verify_shard_set

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


def tars(folder: str, shards: int = 3, per: int = 8) -> set[tuple[str, str]]:
    """WebDataset tars (TarWriter) with one truncated JPEG each; returns the bad (shard, key)."""
    os.makedirs(folder, exist_ok=True)
    bad = set()
    for s in range(shards):
        name = f"shard-{s:06d}.tar"
        with wds.TarWriter(os.path.join(folder, name)) as w:
            for i in range(per):
                jpg = synth.jpeg(32, 32, seed=s * 100 + i)
                if i == s + 1:
                    jpg = synth.truncate(jpg, 0.5)
                    bad.add((name, f"s{s}_{i:03d}"))
                w.write({"__key__": f"s{s}_{i:03d}", "jpg": jpg, "json": {"i": i}})
    return bad


def upload(fs, folder: str, dest: str) -> None:
    for name in sorted(os.listdir(folder)):
        fs.put_file(os.path.join(folder, name), f"{dest}/{name}")


def options(endpoint: str, tmp_path, name: str, **kw) -> ShardScanOptions:
    return ShardScanOptions(jobs=1, report_dir=str(tmp_path / name), storage_options={"endpoint_url": endpoint}, **kw)


def rows(summary) -> list[dict]:
    return pq.read_table(summary.results_path).sort_by("path").to_pylist()


def test_a_prefix_of_tars_is_read_from_the_bucket_as_the_same_folder_is(bucket, s3fs_direct, s3_endpoint, tmp_path):
    local = str(tmp_path / "shards")
    bad = tars(local)
    upload(s3fs_direct, local, f"{bucket}/data/shards")
    s3fs_direct.pipe_file(f"{bucket}/data/shards/README.md", b"not a shard")
    before = sorted(s3fs_direct.find(bucket))
    ss = detect([f"s3://{bucket}/data/shards/"], None, {"endpoint_url": s3_endpoint})
    assert ss is not None and ss.kind == "webdataset" and ss.store is not None
    assert ss.names == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    remote = scan_shard_set([f"s3://{bucket}/data/shards/"], options(s3_endpoint, tmp_path, "remote"))
    here = scan_shard_set([local], ShardScanOptions(jobs=1, report_dir=str(tmp_path / "local"), dry_run=True))
    assert rows(remote) == rows(here)  # same rows: shard named by its key relative to the prefix
    assert (remote.shards, remote.checked, remote.bad) == (3, 24, 3)
    assert remote.folder == f"s3://{bucket}/data/shards"
    # the deny-list: beside the results, locally; the bucket is untouched
    assert remote.denylist_path == os.path.join(str(tmp_path / "remote"), "denylist.jsonl")
    assert {(e["shard"], e["key"]) for e in denylist.read_denylist(remote.denylist_path).entries} == bad
    assert sorted(s3fs_direct.find(bucket)) == before
    v = verify_shard_set(
        [f"s3://{bucket}/data/shards"], options(s3_endpoint, tmp_path, "v", denylist=remote.denylist_path)
    )
    assert v.ok and v.denied_bad == 3 and v.checked == 24


def test_brace_pattern_of_urls_missing_shard_and_a_denylist_object(bucket, s3fs_direct, s3_endpoint, tmp_path):
    local = str(tmp_path / "shards")
    bad = tars(local)
    upload(s3fs_direct, local, f"{bucket}/sh")
    pattern = f"s3://{bucket}/sh/shard-{{000000..000003}}.tar"
    deny_url = f"s3://{bucket}/lists/deny.jsonl"
    s = scan_shard_set([pattern], options(s3_endpoint, tmp_path, "r", denylist=deny_url))
    assert s.shards == 3 and s.problems == {"missing_shard": 1} and s.denylist_path == deny_url
    written = s3fs_direct.cat_file(f"{bucket}/lists/deny.jsonl").decode().splitlines()
    assert {(json.loads(line)["shard"], json.loads(line)["key"]) for line in written} == bad
    again = scan_shard_set([pattern], options(s3_endpoint, tmp_path, "r2", denylist=deny_url))
    assert again.denied_added == 0 and again.denied_already == 3  # read back from the object, not appended twice
    assert len(s3fs_direct.cat_file(f"{bucket}/lists/deny.jsonl").decode().splitlines()) == 3
    out = str(tmp_path / "clean")
    copy = repack_shard_set([f"s3://{bucket}/sh/"], out, deny_url, storage_options={"endpoint_url": s3_endpoint})
    assert copy.shards == 3 and copy.left_out == 3 * 2  # each denied sample's .jpg and .json
    with tarfile.open(os.path.join(out, "shard-000001.tar")) as tf:
        assert "s1_002.jpg" not in tf.getnames() and "s1_001.jpg" in tf.getnames()


def test_parquet_objects_are_a_shard_set(bucket, s3fs_direct, s3_endpoint, tmp_path):
    images = [synth.jpeg(32, 32, seed=i) for i in range(6)]
    images[4] = synth.truncate(images[4], 0.5)
    table = pa.table({"img": pa.array(images, type=pa.binary()), "label": list(range(6))})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=2)
    s3fs_direct.pipe_file(f"{bucket}/pq/part-0.parquet", buf.getvalue())
    s = scan_shard_set([f"s3://{bucket}/pq"], options(s3_endpoint, tmp_path, "r", column="img"))
    assert (s.kind, s.shards, s.checked, s.bad) == ("parquet", 1, 6, 1)
    bad = [r for r in rows(s) if r["status"] == "bad"]
    assert [(r["shard"], r["row"]) for r in bad] == [("part-0.parquet", 4)]


def test_throttled_reads_are_retried_and_a_refused_shard_is_named(bucket, s3fs_direct, s3_endpoint, tmp_path):
    local = str(tmp_path / "shards")
    tars(local)
    upload(s3fs_direct, local, f"{bucket}/t")
    with FaultProxy(s3_endpoint, failures=2, status=503, match=".tar") as proxy:
        s = scan_shard_set([f"s3://{bucket}/t"], options(proxy.url, tmp_path, "a", dry_run=True))
    assert proxy.injected >= 2 * 3 and s.checked == 24 and s.bad == 3 and not s.problems
    with FaultProxy(s3_endpoint, failures=100, status=403, match="shard-000001") as proxy:
        s = scan_shard_set([f"s3://{bucket}/t"], options(proxy.url, tmp_path, "b", dry_run=True))
    assert s.checked == 16 and s.problems == {"unreadable": 1}
    with open(s.problems_path) as f:
        refused = [json.loads(line) for line in f if json.loads(line)["reason"] == "unreadable"]
    assert refused[0]["shard"] == "shard-000001.tar" and "access denied (403)" in refused[0]["detail"]


def test_cli_scan_and_verify_a_bucket_shard_set(bucket, s3fs_direct, s3_endpoint, tmp_path):
    local = str(tmp_path / "shards")
    tars(local)
    upload(s3fs_direct, local, f"{bucket}/c")
    url, opt = f"s3://{bucket}/c/", f"endpoint_url={s3_endpoint}"
    env = {**os.environ, "DSCLEAN_STATE_DIR": str(tmp_path / "state")}
    run = subprocess.run(
        [sys.executable, "-m", "dsclean", "scan", url, "--storage-option", opt, "--json", "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["kind"] == "webdataset" and out["checked"] == 24 and out["bad"] == 3
    assert not out["denylist_path"].startswith("s3://") and os.path.exists(out["denylist_path"])
    verify = subprocess.run(
        [sys.executable, "-m", "dsclean", "verify", url, "--storage-option", opt],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr  # the bad samples are on the scan's deny-list
    assert "3 samples denied" in verify.stdout
    report = subprocess.run(
        [sys.executable, "-m", "dsclean", "report", url, "-o", str(tmp_path / "r.html"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert report.returncode == 0, report.stderr  # the scan's results found through the prefix's state folder
    page = (tmp_path / "r.html").read_text()
    assert "shard-000001.tar" in page and "truncated" in page


def test_workers_started_before_the_credentials_were_set_read_with_them(
    bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch
):
    from dsclean.scanning.executors import stop_local_workers

    local = str(tmp_path / "shards")
    tars(local, shards=1)
    upload(s3fs_direct, local, f"{bucket}/e")
    stop_local_workers()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    scan_shard_set([local], ShardScanOptions(jobs=1, report_dir=str(tmp_path / "l"), dry_run=True))  # workers start
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # set later, as in a notebook
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    s = scan_shard_set([f"s3://{bucket}/e"], options(s3_endpoint, tmp_path, "r", dry_run=True))
    assert s.checked == 8 and s.bad == 1 and not s.problems


def test_cli_pack_from_a_bucket_leaves_out_what_its_scan_denied(bucket, s3fs_direct, s3_endpoint, tmp_path):
    local = str(tmp_path / "shards")
    bad = tars(local, shards=2)
    upload(s3fs_direct, local, f"{bucket}/p")
    url, opt = f"s3://{bucket}/p", f"endpoint_url={s3_endpoint}"
    env = {**os.environ, "DSCLEAN_STATE_DIR": str(tmp_path / "state")}

    def dsclean(*args):
        return subprocess.run(
            [sys.executable, "-m", "dsclean", *args, "--storage-option", opt],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )

    assert dsclean("scan", url, "--quiet", "--jobs", "1").returncode == 0
    out = str(tmp_path / "clean")
    run = dsclean("pack", "--from", url, "-o", out, "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["shards"] == 2 and summary["left_out"] == 2 * len(bad)
    kept = set()
    for name in sorted(os.listdir(out)):
        with tarfile.open(os.path.join(out, name)) as tf:
            kept |= {(name, m.split(".")[0]) for m in tf.getnames()}
    assert kept and not (kept & bad)
