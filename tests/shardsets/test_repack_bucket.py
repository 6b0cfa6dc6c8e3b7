"""``dsclean pack --from SHARDS -o s3://...`` (a clean copy of another tool's tars into a bucket, a real moto S3
server): each output shard is uploaded as soon as it is written and its local copy removed, so the staging
folder holds about one shard at a time; a killed copy is resumed by the same command (nothing lost, nothing
written twice), and one whose deny-list changed since is refused."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest
import webdataset as wds
from support import synth

from dsclean import denylist
from dsclean.pack.remote import BucketShards, staging_folder
from dsclean.shardsets.repack import repack_shard_set

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

SHARDS = 6


@pytest.fixture
def shards(tmp_path, cli):
    """Six WebDataset tars of four samples, one truncated JPEG in each, scanned: the deny-list beside them."""
    folder = tmp_path / "shards"
    folder.mkdir()
    for s in range(SHARDS):
        with wds.TarWriter(str(folder / f"shard-{s:06d}.tar")) as w:
            for i in range(4):
                jpg = synth.jpeg(40, 32, seed=s * 10 + i)
                w.write({"__key__": f"s{s}_{i}", "jpg": synth.truncate(jpg, 0.5) if i == s % 4 else jpg, "txt": "x"})
    code, out, err = cli(["scan", str(folder), "--jobs", "1", "-q"])
    assert os.path.exists(denylist.denylist_path(folder)), out + err
    assert len(denylist.read_denylist(denylist.denylist_path(folder)).entries) == SHARDS
    return folder


def _so(endpoint):
    return ["--storage-option", f"endpoint_url={endpoint}"]


def _expected(shards, tmp_path):
    """The clean copy made to a local folder: name -> bytes (what the bucket must hold, exactly)."""
    out = tmp_path / "reference"
    s = repack_shard_set([str(shards)], str(out))
    assert s.shards == SHARDS and s.left_out == SHARDS * 2  # each denied sample's .jpg and .txt
    return {n: (out / n).read_bytes() for n in sorted(os.listdir(out))}


def _in_bucket(fs, prefix):
    fs.invalidate_cache()
    return {p.rsplit("/", 1)[1]: fs.cat_file(p) for p in fs.find(prefix)}


def test_each_shard_is_uploaded_as_written_so_staging_holds_one_at_a_time(
    shards, bucket, s3fs_direct, s3_endpoint, cli, tmp_path, monkeypatch
):
    dest = f"s3://{bucket}/copy"
    staging = staging_folder(dest)
    seen: list[tuple[str, list[str]]] = []
    original = BucketShards.put

    def watched(self, path, name):  # what the staging folder holds each time a shard is handed over
        seen.append((name, sorted(n for n in os.listdir(staging) if n != ".repack.json")))
        original(self, path, name)

    monkeypatch.setattr(BucketShards, "put", watched)
    code, out, err = cli(["pack", "--from", str(shards), "-o", dest, *_so(s3_endpoint), "--json"])
    assert code == 0, err
    summary = json.loads(out)
    assert summary["shards"] == SHARDS and summary["reused"] == 0 and summary["left_out"] == SHARDS * 2
    assert [name for name, _ in seen] == [f"shard-{s:06d}.tar" for s in range(SHARDS)]  # one upload per shard
    assert max(len(held) for _, held in seen) <= 2  # never the whole copy: the shard being handed over
    assert all(held == [name] for name, held in seen)
    assert _in_bucket(s3fs_direct, f"{bucket}/copy") == _expected(shards, tmp_path)
    assert not os.path.exists(staging)


def test_a_failed_copy_is_resumed_and_a_changed_denylist_is_refused(
    shards, bucket, s3fs_direct, s3_endpoint, cli, tmp_path, monkeypatch
):
    import s3fs

    dest = f"s3://{bucket}/copy"
    args = ["pack", "--from", str(shards), "-o", dest, *_so(s3_endpoint), "--json"]
    calls = {"n": 0}
    original_put = s3fs.S3FileSystem._put_file

    async def put_then_fail(self, lpath, rpath, *a, **k):  # the third upload fails: two shards are in the bucket
        calls["n"] += 1
        if calls["n"] == 3:
            raise PermissionError(13, "Access Denied (injected)")
        return await original_put(self, lpath, rpath, *a, **k)

    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", put_then_fail)
    s3fs.S3FileSystem.clear_instance_cache()
    code, out, err = cli(args)
    assert code != 0 and "access denied" in err.lower() and "shard-000002.tar" in err
    expected = _expected(shards, tmp_path)
    first = _in_bucket(s3fs_direct, f"{bucket}/copy")
    assert sorted(first) == ["shard-000000.tar", "shard-000001.tar"]
    assert all(first[n] == expected[n] for n in first)
    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", original_put)
    s3fs.S3FileSystem.clear_instance_cache()
    # the deny-list grew since: the shards already up would not match it: refused, naming the staging folder
    path = denylist.denylist_path(shards)
    saved = open(path, "rb").read()
    entry = json.loads(saved.splitlines()[0])
    with open(path, "a") as f:
        f.write(json.dumps({**entry, "shard": "shard-000000.tar", "key": "s0_3"}) + "\n")
    code, out, err = cli(args)
    assert code == 2 and "cannot be resumed" in err and "denied" in err and staging_folder(dest) in err
    assert _in_bucket(s3fs_direct, f"{bucket}/copy") == first  # nothing written over
    with open(path, "wb") as f:
        f.write(saved)
    code, out, err = cli(args)
    assert code == 0, err
    again = json.loads(out)
    assert again["reused"] == 2 and again["shards"] == SHARDS
    assert _in_bucket(s3fs_direct, f"{bucket}/copy") == expected  # nothing lost, nothing doubled
    assert not os.path.exists(staging_folder(dest))


def test_a_copy_whose_staging_folder_was_removed_does_not_reuse_its_shards_after_the_denylist_changed(
    shards, bucket, s3fs_direct, s3_endpoint, cli, tmp_path, monkeypatch
):
    import s3fs

    from dsclean.pack.remote import uploaded_record

    dest = f"s3://{bucket}/copy"
    args = ["pack", "--from", str(shards), "-o", dest, *_so(s3_endpoint), "--json"]
    staging = staging_folder(dest)
    calls = {"n": 0}
    original_put = s3fs.S3FileSystem._put_file

    async def put_then_fail(self, lpath, rpath, *a, **k):  # the second upload fails: shard 0 is in the bucket
        calls["n"] += 1
        if calls["n"] == 2:
            raise PermissionError(13, "Access Denied (injected)")
        return await original_put(self, lpath, rpath, *a, **k)

    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", put_then_fail)
    s3fs.S3FileSystem.clear_instance_cache()
    code, out, err = cli(args)
    assert code != 0 and "access denied" in err.lower()
    first = _in_bucket(s3fs_direct, f"{bucket}/copy")
    assert sorted(first) == ["shard-000000.tar"]
    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", original_put)
    s3fs.S3FileSystem.clear_instance_cache()
    path = denylist.denylist_path(shards)
    entry = json.loads(open(path, "rb").read().splitlines()[0])
    with open(path, "a") as f:  # s0_3 (in the shard already up) denied since
        f.write(json.dumps({**entry, "shard": "shard-000000.tar", "key": "s0_3"}) + "\n")
    code, out, err = cli(args)
    assert code == 2 and "cannot be resumed" in err
    record = uploaded_record(staging)
    assert record in err and os.path.dirname(staging) in err and "alone is not enough" in err
    # the user removes the staging folder only: the record of the uploads survives, so it is still refused
    import shutil

    shutil.rmtree(staging)
    assert os.path.exists(record)
    code, out, err = cli(args)
    assert code == 2 and ".repack.json" in err and "not reused" in err and record in err, err
    assert _in_bucket(s3fs_direct, f"{bucket}/copy") == first  # the old shard 0 (with s0_3) not claimed as the copy's
    # the advice followed: the objects listed removed from the bucket, then the URL's state folder: a fresh copy
    for name in open(record).read().split():
        if s3fs_direct.exists(f"{bucket}/copy/{name}"):
            s3fs_direct.rm_file(f"{bucket}/copy/{name}")
    shutil.rmtree(os.path.dirname(staging))
    code, out, err = cli(args)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["reused"] == 0 and summary["left_out"] == (SHARDS + 1) * 2
    with tarfile.open(fileobj=io.BytesIO(s3fs_direct.cat_file(f"{bucket}/copy/shard-000000.tar"))) as tf:
        assert "s0_3.jpg" not in tf.getnames() and "s0_1.jpg" in tf.getnames()


@pytest.mark.slow
def test_a_copy_killed_with_sigkill_is_resumed_by_the_same_command(
    shards, bucket, s3fs_direct, s3_endpoint, cli, tmp_path
):
    """kill -9 once the first shard is in the bucket (requests slowed by the proxy): the same command finishes
    the copy; the bucket then holds every shard once, each exactly the local copy's bytes."""
    import signal
    import subprocess
    import time

    from support.fixtures.cli import DSCLEAN, cli_env
    from support.s3server import FaultProxy

    dest = f"s3://{bucket}/copy"
    with FaultProxy(s3_endpoint, latency=0.3) as proxy:
        cmd = [*DSCLEAN, "pack", "--from", str(shards), "-o", dest, *_so(proxy.url)]
        proc = subprocess.Popen(cmd, env=cli_env(None), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                if s3fs_direct.exists(f"{bucket}/copy/shard-000000.tar"):
                    break
                s3fs_direct.invalidate_cache()
                time.sleep(0.05)
            assert proc.poll() is None, proc.communicate()  # still copying: killed mid-way
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
            proc.stdout.close()
            proc.stderr.close()
    # a PUT the proxy had already passed on may still land after the kill: wait until the listing settles
    up = _in_bucket(s3fs_direct, f"{bucket}/copy")
    for _ in range(20):
        time.sleep(0.5)
        s3fs_direct.invalidate_cache()
        now = _in_bucket(s3fs_direct, f"{bucket}/copy")
        if now.keys() == up.keys():
            break
        up = now
    assert "shard-000000.tar" in up and len(up) < SHARDS
    code, out, err = cli(["pack", "--from", str(shards), "-o", dest, *_so(s3_endpoint), "--json"])
    assert code == 0, err
    again = json.loads(out)
    assert again["shards"] == SHARDS and 1 <= again["reused"] <= len(up)  # what the killed run put is not redone
    got = _in_bucket(s3fs_direct, f"{bucket}/copy")
    assert got == _expected(shards, tmp_path)  # every shard once, each the local copy's very bytes
    for data in got.values():
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            names = tf.getnames()
        assert len(names) == len(set(names)) == 3 * 2  # 3 kept samples (.jpg and .txt), each member once
    assert not os.path.exists(staging_folder(dest))


def test_a_copy_that_failed_before_any_shard_was_up_starts_over_with_the_new_denylist(
    shards, bucket, s3fs_direct, s3_endpoint, cli, tmp_path, monkeypatch
):
    import s3fs

    dest = f"s3://{bucket}/copy"
    args = ["pack", "--from", str(shards), "-o", dest, *_so(s3_endpoint), "--json"]
    original_put = s3fs.S3FileSystem._put_file

    async def refuse(self, lpath, rpath, *a, **k):
        raise PermissionError(13, "Access Denied (injected)")

    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", refuse)
    s3fs.S3FileSystem.clear_instance_cache()
    code, out, err = cli(args)
    assert code != 0 and "access denied" in err.lower()
    assert _in_bucket(s3fs_direct, f"{bucket}/copy") == {}
    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", original_put)
    s3fs.S3FileSystem.clear_instance_cache()
    path = denylist.denylist_path(shards)
    entry = json.loads(open(path, "rb").read().splitlines()[0])
    with open(path, "a") as f:  # one more sample denied since: nothing of the old copy is up, so it starts over
        f.write(json.dumps({**entry, "shard": "shard-000000.tar", "key": "s0_3"}) + "\n")
    code, out, err = cli(args)
    assert code == 0, err
    assert json.loads(out)["left_out"] == (SHARDS + 1) * 2
    with tarfile.open(fileobj=io.BytesIO(s3fs_direct.cat_file(f"{bucket}/copy/shard-000000.tar"))) as tf:
        assert "s0_3.jpg" not in tf.getnames() and "s0_1.jpg" in tf.getnames()
