"""dsclean pack from and to a bucket, and dsclean verify of a pack in a bucket (a real moto S3 server, s3fs)."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from support import synth  # noqa: E402
from support.s3server import FaultProxy  # noqa: E402

from dsclean.errors import UserError  # noqa: E402
from dsclean.pack.remote import staging_folder  # noqa: E402

GOOD = {
    "cats/a.jpg": lambda: synth.jpeg(64, 48, seed=1),
    "cats/b.png": lambda: synth.png(32, 32, seed=2),
    "dogs/c.jpg": lambda: synth.jpeg(48, 40, seed=4),
    "dogs/e.png": lambda: synth.png(24, 24, seed=5),
}
BAD = "dogs/d.jpg"


@pytest.fixture
def source(bucket, s3fs_direct, s3_endpoint, cli, tmp_path):
    """A bucket prefix of 4 good images and one truncated one, scanned (no quarantine): the scan knows the bad one."""
    for rel, make in GOOD.items():
        s3fs_direct.pipe_file(f"{bucket}/data/{rel}", make())
    s3fs_direct.pipe_file(f"{bucket}/data/{BAD}", synth.truncate(synth.jpeg(64, 48, seed=3), 0.5))
    url = f"s3://{bucket}/data"
    code, out, err = cli(["scan", url, "--storage-option", f"endpoint_url={s3_endpoint}", "--jobs", "1"])
    assert code != 0 or "bad" in out + err  # the scan found the truncated object (exit code says "found bad")
    return url


def _so(endpoint: str) -> list[str]:
    return ["--storage-option", f"endpoint_url={endpoint}"]


def _packed_paths(folder: str) -> list[str]:
    from dsclean.data.shards import open_packed_index

    idx = open_packed_index(folder)
    return sorted(os.fsdecode(bytes(idx.data[idx.offsets[i] : idx.offsets[i + 1]])) for i in range(len(idx)))


def test_pack_a_bucket_prefix_to_a_local_folder_leaves_out_the_bad_object(source, s3_endpoint, cli, tmp_path):
    out = tmp_path / "shards"
    code, stdout, err = cli(
        ["pack", source, "-o", str(out), "--samples-per-shard", "2", "--shuffle", "1", *_so(s3_endpoint)]
    )
    assert code == 0, err
    assert _packed_paths(str(out)) == sorted(GOOD)  # the scan's bad object is not packed
    from dsclean.data.shards import open_packed_index

    idx = open_packed_index(str(out))
    paths = [os.fsdecode(bytes(idx.data[idx.offsets[i] : idx.offsets[i + 1]])) for i in range(len(idx))]
    assert idx.meta["classes"] == ["cats", "dogs"]  # the first "folder" of each key, as ImageFolder labels
    assert {p: int(label) for p, label in zip(paths, idx.labels)} == {p: 0 if p < "d" else 1 for p in GOOD}
    assert "1 objects left out: found bad by the last scan of the prefix" in stdout
    code, stdout, err = cli(["verify", str(out), "--decode"])
    assert code == 0, stdout + err
    state = json.loads((out / "pack.json").read_text())
    assert state["source"]["root"] == source and s3_endpoint not in json.dumps(state)
    # --jobs 2: the objects read in the pack's worker processes; the storage options (here the credentials too:
    # a worker process may predate this test's environment) travel with each shard's job
    again = tmp_path / "shards2"
    creds = ["--storage-option", "key=testing", "--storage-option", "secret=testing"]
    code, stdout, err = cli(
        ["pack", source, "-o", str(again), "--samples-per-shard", "2", "--shuffle", "1", "-j", "2", *_so(s3_endpoint)]
        + creds
    )
    assert code == 0, err
    for name in ("data-000000.tar", "data-000001.tar"):  # the same bytes as the run in this process
        assert (again / name).read_bytes() == (out / name).read_bytes()


def test_a_warning_an_index_leaves_out_is_left_out_too(source, s3_endpoint, cli, tmp_path):
    # scanned again with --lenient: the truncated object is a warning (truncated), which an index leaves out
    assert cli(["scan", source, "--lenient", "--jobs", "1", *_so(s3_endpoint)]).code == 0
    from dsclean.scanning.results import read_results
    from dsclean.storage.reuse import last_results

    rows = read_results(last_results(source)).to_pydict()
    got = {os.fsdecode(p): (s, r) for p, s, r in zip(rows["path"], rows["status"], rows["reason"])}
    assert got[BAD] == ("warn", "truncated")  # (so only the warning rule leaves it out)
    out = tmp_path / "shards"
    code, stdout, err = cli(["pack", source, "-o", str(out), *_so(s3_endpoint)])
    assert code == 0, err
    assert _packed_paths(str(out)) == sorted(GOOD)
    assert "1 objects left out" in stdout


def test_pack_to_a_bucket_then_verify_and_a_damaged_shard_is_named(
    source, bucket, s3fs_direct, s3_endpoint, cli, tmp_path
):
    dest = f"s3://{bucket}/shards"
    code, stdout, err = cli(
        ["pack", source, "-o", dest, "--samples-per-shard", "2", "--shuffle", "1", *_so(s3_endpoint)]
    )
    assert code == 0, err
    names = sorted(p.rsplit("/", 1)[1] for p in s3fs_direct.ls(f"{bucket}/shards", refresh=True))
    assert names == ["data-000000.tar", "data-000001.tar", "index.arrow", "pack.json", "shardindex.json"]
    assert sorted(s3fs_direct.ls(bucket, refresh=True)) == [f"{bucket}/data", f"{bucket}/shards"]  # nothing elsewhere
    assert not os.path.exists(staging_folder(dest))  # the staging folder is gone once the bucket holds the pack
    assert os.path.isdir(os.path.dirname(staging_folder(dest)))  # (it was there: the URL's state folder)
    code, stdout, err = cli(["verify", dest, "--decode", *_so(s3_endpoint)])
    assert code == 0, stdout + err
    assert stdout.startswith(f"ok: {dest}: 2 of 2 shards pass, 4 samples")
    from dsclean import verify_shards  # the API the command calls

    report = verify_shards(dest, storage_options={"endpoint_url": s3_endpoint})
    assert report.ok and report.folder == dest and report.samples == 4 and report.bytes > 0
    # damage one shard object: a byte of a sample's media flipped
    key = f"{bucket}/shards/data-000001.tar"
    data = bytearray(s3fs_direct.cat_file(key))
    data[1024 + 100] ^= 0xFF
    s3fs_direct.pipe_file(key, bytes(data))
    code, stdout, err = cli(["verify", dest, *_so(s3_endpoint)])
    assert code != 0
    assert "data-000001.tar" in stdout and "data-000000.tar" not in stdout.split("\n", 1)[1]
    assert stdout.startswith(f"PROBLEMS: {dest}: 1 of 2 shards pass")
    s3fs_direct.rm_file(f"{bucket}/shards/data-000000.tar")  # a shard gone from the bucket: named missing
    code, stdout, err = cli(["verify", dest, *_so(s3_endpoint)])
    assert code != 0 and "data-000000.tar: missing" in stdout and stdout.startswith(f"PROBLEMS: {dest}: 0 of 2")


def test_the_same_command_again_adopts_the_pack_in_the_bucket_and_another_is_refused(
    source, bucket, s3fs_direct, s3_endpoint, cli
):
    dest = f"s3://{bucket}/shards"
    args = ["pack", source, "-o", dest, "--samples-per-shard", "2", *_so(s3_endpoint)]  # a random seed
    assert cli(args).code == 0
    before = {k: s3fs_direct.info(k)["LastModified"] for k in s3fs_direct.find(f"{bucket}/shards")}
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    again = json.loads(out)
    assert again["complete"] and again["reused"] == 2 and again["written"] == 0  # its seed, read from the bucket
    shards = [k for k in before if k.endswith(".tar")]
    assert all(s3fs_direct.info(k)["LastModified"] == before[k] for k in shards)  # not uploaded again
    code, out, err = cli(["pack", source, "-o", dest, "--samples-per-shard", "3", *_so(s3_endpoint)])
    assert code != 0 and dest in err and "cannot be resumed" in err
    assert not os.path.exists(os.path.join(staging_folder(dest), "pack.json"))  # nothing left to block a later pack


def test_pack_local_index_to_a_bucket_and_from_shards(bucket, s3fs_direct, s3_endpoint, cli, tmp_path, media_shards):
    dest = f"s3://{bucket}/copy"
    code, stdout, err = cli(["pack", "--from", str(media_shards[0]), "-o", dest, *_so(s3_endpoint)])
    assert code == 0, err
    there = sorted(p.rsplit("/", 1)[1] for p in s3fs_direct.ls(f"{bucket}/copy", refresh=True))
    assert there and all(
        n.endswith(".tar") or n in ("index.arrow", "shardindex.json", "pack.json", "denylist.jsonl") for n in there
    )
    assert any(n.endswith(".tar") for n in there)
    local = sorted(n for n in os.listdir(media_shards[0]) if n.endswith(".tar"))
    assert sorted(n for n in there if n.endswith(".tar")) == local
    for n in local:  # (no deny-list: each shard copied as it is)
        assert s3fs_direct.cat_file(f"{bucket}/copy/{n}") == (media_shards[0] / n).read_bytes()
    assert not os.path.exists(staging_folder(dest))
    # a local index packed to a bucket: verified there
    dest = f"s3://{bucket}/packed"
    code, stdout, err = cli(["pack", str(media_shards[1]), "-o", dest, "--samples-per-shard", "3", *_so(s3_endpoint)])
    assert code == 0, err
    code, stdout, err = cli(["verify", dest, "--jobs", "2", *_so(s3_endpoint)])
    assert code == 0 and stdout.startswith(f"ok: {dest}:"), stdout + err


def test_a_pack_stopped_by_an_unreadable_object_is_resumed_by_the_same_command(source, bucket, s3_endpoint, cli):
    dest = f"s3://{bucket}/shards"
    args = ["pack", source, "-o", dest, "--samples-per-shard", "1", "--no-shuffle", *_so(s3_endpoint)]
    with FaultProxy(s3_endpoint, failures=100, status=403, match="/data/dogs/c.jpg") as proxy:
        code, out, err = cli([*args[:-1], f"endpoint_url={proxy.url}"])
    assert code != 0 and f"{source}/dogs/c.jpg" in err and "access denied (403)" in err
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    again = json.loads(out)
    assert again["complete"] and again["reused"] >= 2 and again["written"] + again["reused"] == 4
    code, out, err = cli(["verify", dest, "--decode", *_so(s3_endpoint)])
    assert code == 0 and "4 of 4 shards pass, 4 samples" in out, out + err


def test_a_pack_to_a_bucket_killed_mid_upload_is_resumed(
    source, bucket, s3fs_direct, s3_endpoint, cli, tmp_path, monkeypatch
):
    dest = f"s3://{bucket}/shards"
    args = ("pack", source, "-o", dest, "--samples-per-shard", "1", "--shuffle", "1", *_so(s3_endpoint))
    import s3fs

    calls = {"n": 0}
    original_put = s3fs.S3FileSystem._put_file

    async def put_then_die(self, lpath, rpath, *a, **k):  # the third upload fails: two shards are in the bucket
        calls["n"] += 1
        if calls["n"] == 3:
            raise PermissionError(13, "Access Denied (injected)")
        return await original_put(self, lpath, rpath, *a, **k)

    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", put_then_die)
    s3fs.S3FileSystem.clear_instance_cache()  # (an instance binds its sync methods when it is made)
    code, stdout, err = cli(args)
    assert code != 0 and "access denied" in err.lower() and "data-000002.tar" in err
    names = {p.rsplit("/", 1)[1] for p in s3fs_direct.ls(f"{bucket}/shards", refresh=True)}
    # uploaded as written (the shard in flight when the upload failed finished too); no metadata before every shard
    assert {"data-000000.tar", "data-000001.tar"} <= names and "data-000002.tar" not in names
    assert not names & {"pack.json", "index.arrow", "shardindex.json"}
    staged = sorted(n for n in os.listdir(staging_folder(dest)) if n.endswith(".tar"))
    assert staged == ["data-000002.tar"]  # the uploaded shards' local copies are gone: only the failed one is here
    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", original_put)
    s3fs.S3FileSystem.clear_instance_cache()
    # the source changed since: another listing, another pack; refused, naming the staging folder to remove
    s3fs_direct.pipe_file(f"{bucket}/data/cats/new.png", synth.png(20, 20, seed=9))
    code, stdout, err = cli(args)
    assert code != 0 and "cannot be resumed" in err and staging_folder(dest) in err
    s3fs_direct.rm_file(f"{bucket}/data/cats/new.png")
    # only the shards this pack uploaded (its local journal) are its own: a user's object beside them is refused
    s3fs_direct.pipe_file(f"{bucket}/shards/notes.txt", b"mine")
    code, stdout, err = cli(args)
    assert code == 2 and "is not empty" in err and "notes.txt" in err
    assert s3fs_direct.cat_file(f"{bucket}/shards/notes.txt") == b"mine"
    s3fs_direct.rm_file(f"{bucket}/shards/notes.txt")
    code, stdout, err = cli([*args, "--json"])
    assert code == 0, err
    again = json.loads(stdout)
    # resumed: the shards in the bucket read back from it, the one staged reused; only what is nowhere is written
    assert again["complete"] and again["reused"] == len(names) + 1 and again["written"] == 4 - len(names) - 1
    assert calls["n"] == len(names) + 1  # (the patched upload was not used again: 3 uploads, the failed one)
    code, stdout, err = cli(["verify", dest, *_so(s3_endpoint)])
    assert code == 0 and "4 of 4 shards pass, 4 samples" in stdout, stdout


def test_empty_prefix_403_and_404_are_clear_errors(source, bucket, s3fs_direct, s3_endpoint, cli, tmp_path):
    code, out, err = cli(["pack", f"s3://{bucket}/nothing", "-o", str(tmp_path / "o"), *_so(s3_endpoint)])
    assert code != 0 and f"s3://{bucket}/nothing" in err and "no media object" in err
    with FaultProxy(s3_endpoint, failures=100, status=403, match="/data/cats/b.png") as proxy:
        code, out, err = cli(["pack", source, "-o", str(tmp_path / "o2"), *_so(proxy.url)])
    assert code != 0 and "access denied (403)" in err and f"{source}/cats/b.png" in err
    assert not (tmp_path / "o2" / "index.arrow").exists()
    # an object gone between the listing and its read: named, 404
    from dsclean.pack.bucketsource import bucket_index
    from dsclean.pack.packer import PackOptions, pack_shards

    index, _ = bucket_index(source, {"endpoint_url": s3_endpoint})
    s3fs_direct.rm_file(f"{bucket}/data/dogs/e.png")
    summary = pack_shards(index, str(tmp_path / "o3"), PackOptions(storage_options={"endpoint_url": s3_endpoint}))
    assert not summary.complete and any("not found (404)" in f and "dogs/e.png" in f for f in summary.failures)
    # verify: a shard that cannot be read (403) is a clear error naming it
    dest = f"s3://{bucket}/shards"
    assert cli(["pack", source, "-o", dest, "--samples-per-shard", "2", *_so(s3_endpoint)]).code == 0
    with FaultProxy(s3_endpoint, failures=100, status=403, match="/shards/data-000001.tar") as proxy:
        code, out, err = cli(["verify", dest, *_so(proxy.url)])
    assert code != 0 and "access denied (403)" in err and f"{dest}/data-000001.tar" in err


def test_indexed_dataset_over_a_bucket_pack_is_refused_clearly(bucket):
    from dsclean import IndexedDataset

    with pytest.raises(UserError, match="not in a bucket"):
        IndexedDataset(f"s3://{bucket}/shards")


def test_no_storage_option_value_is_stored_and_an_output_inside_the_source_is_refused(
    source, bucket, s3fs_direct, s3_endpoint, cli, tmp_path
):
    from dsclean import locations

    secret = "not-a-real-secret-5f3a9c"  # moto takes any credentials
    dest = f"s3://{bucket}/shards"
    opts = [*_so(s3_endpoint), "--storage-option", "key=testing", "--storage-option", f"secret={secret}"]
    code, out, err = cli(["pack", source, "-o", dest, "--samples-per-shard", "2", *opts])
    assert code == 0, err
    assert secret not in out + err
    for key in s3fs_direct.find(f"{bucket}/shards"):
        assert secret.encode() not in s3fs_direct.cat_file(key), key
    state = locations.state_base()[0]
    for folder, _, files in os.walk(state):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                assert secret.encode() not in f.read(), name
    recorded = json.loads(s3fs_direct.cat_file(f"{bucket}/shards/pack.json"))
    assert recorded["source"]["root"] == source
    code, out, err = cli(["pack", source, "-o", f"{source}/packed", *_so(s3_endpoint)])
    assert code != 0 and "inside the prefix" in err
    assert not s3fs_direct.exists(f"{bucket}/data/packed")


@pytest.mark.slow
def test_a_pack_to_a_bucket_killed_with_sigkill_is_resumed(source, bucket, s3fs_direct, s3_endpoint, cli):
    """kill -9 once the first shard is in the bucket (the reads slowed by the proxy): the same command then
    finishes the pack, and verify finds it whole."""
    import signal
    import subprocess
    import time

    from support.fixtures.cli import DSCLEAN, cli_env

    dest = f"s3://{bucket}/shards"
    with FaultProxy(s3_endpoint, latency=0.3) as proxy:
        args = ["pack", source, "-o", dest, "--samples-per-shard", "1", "--shuffle", "3", *_so(proxy.url)]
        proc = subprocess.Popen([*DSCLEAN, *args], env=cli_env(None), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                if s3fs_direct.exists(f"{bucket}/shards/data-000000.tar"):
                    break
                s3fs_direct.invalidate_cache()
                time.sleep(0.05)
            assert proc.poll() is None, proc.communicate()  # still packing: killed mid-way
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
            proc.stdout.close()
            proc.stderr.close()
    s3fs_direct.invalidate_cache()
    names = {p.rsplit("/", 1)[1] for p in s3fs_direct.ls(f"{bucket}/shards", refresh=True)}
    assert "pack.json" not in names and "data-000000.tar" in names
    code, out, err = cli([*args[:-1], f"endpoint_url={s3_endpoint}", "--json"])
    assert code == 0, err
    again = json.loads(out)
    assert again["complete"] and again["reused"] >= 1 and again["written"] + again["reused"] == 4
    code, out, err = cli(["verify", dest, "--decode", *_so(s3_endpoint)])
    assert code == 0 and "4 of 4 shards pass, 4 samples" in out, out + err


def test_the_listing_streams_in_chunks_and_a_key_outside_any_folder_means_no_labels(
    bucket, s3fs_direct, s3_endpoint, monkeypatch
):
    from dsclean.index.store import open_index
    from dsclean.pack import bucketsource

    monkeypatch.setattr(bucketsource, "_CHUNK", 2)  # 5 objects: three chunks, labels across them
    for rel in ("b/1.png", "b/2.png", "a/3.png", "c/4.png"):
        s3fs_direct.pipe_file(f"{bucket}/p/{rel}", synth.png(8, 8, seed=len(rel)))
    index, _ = bucketsource.bucket_index(f"s3://{bucket}/p", {"endpoint_url": s3_endpoint})
    idx = open_index(index)
    assert idx.meta["classes"] == ["a", "b", "c"] and list(map(int, idx.labels)) == [0, 1, 1, 2]
    assert list(map(int, idx.sizes)) == [
        len(s3fs_direct.cat_file(f"{bucket}/p/{r}")) for r in ("a/3.png", "b/1.png", "b/2.png", "c/4.png")
    ]
    s3fs_direct.pipe_file(f"{bucket}/p/top.png", synth.png(8, 8, seed=9))
    index, _ = bucketsource.bucket_index(f"s3://{bucket}/p", {"endpoint_url": s3_endpoint})
    idx = open_index(index)
    assert idx.meta["classes"] == [] and list(map(int, idx.labels)) == [-1] * 5 and len(idx) == 5


def test_the_same_listing_gives_the_same_index_bytes_from_any_state_folder(source, s3_endpoint, tmp_path, cli):
    """The pack's identity is the index's content hash: another machine (another state folder, its own scan
    of the prefix) resuming a pack to a bucket must build the same bytes."""
    from dsclean.pack.bucketsource import bucket_index

    other = str(tmp_path / "other-machine")
    cli(["scan", source, "--jobs", "1", "--state-dir", other, *_so(s3_endpoint)])
    here, left_here = bucket_index(source, {"endpoint_url": s3_endpoint})
    there, left_there = bucket_index(source, {"endpoint_url": s3_endpoint}, other)
    assert here != there and left_here["bad"] == left_there["bad"] == 1
    assert left_there["results"].startswith(other)  # (its own scan's results)
    with open(here, "rb") as a, open(there, "rb") as b:
        assert a.read() == b.read()


def test_an_index_of_a_bucket_prefix_packs_like_the_prefix(source, s3_endpoint, cli, tmp_path):
    """dsclean index URL, then dsclean pack INDEX: the index's objects are read from the bucket (its root is the
    URL), the scan's bad object is not in it, and the pack verifies with a decode."""
    index = tmp_path / "bucket.arrow"
    code, _, err = cli(["index", source, "-o", str(index), "--jobs", "1", *_so(s3_endpoint)])
    assert code == 0, err
    out = tmp_path / "from-index"
    code, _, err = cli(["pack", str(index), "-o", str(out), "--samples-per-shard", "2", *_so(s3_endpoint)])
    assert code == 0, err
    assert _packed_paths(str(out)) == sorted(GOOD)
    code, stdout, err = cli(["verify", str(out), "--decode"])
    assert code == 0, stdout + err


def test_a_prefix_holding_the_users_objects_and_no_pack_is_refused_and_they_stay(
    source, bucket, s3fs_direct, s3_endpoint, cli
):
    """As a local -o folder that is not empty and holds no pack: refused before anything is packed, the
    objects there untouched (an object named like a shard is never taken for this pack's)."""
    s3fs_direct.pipe_file(f"{bucket}/foreign2/index.arrow", b"users own bytes")
    s3fs_direct.pipe_file(f"{bucket}/foreign3/data-000000.tar", b"not a dsclean shard")
    for prefix, name, body in (("foreign2", "index.arrow", b"users own bytes"), ("foreign3", "data-000000.tar", None)):
        dest = f"s3://{bucket}/{prefix}"
        code, out, err = cli(["pack", source, "-o", dest, "--samples-per-shard", "2", *_so(s3_endpoint)])
        assert code == 2, out + err
        assert dest in err and "is not empty" in err and "holds no dsclean pack" in err and name in err
        assert "remove that shard" not in err
        s3fs_direct.invalidate_cache()
        assert sorted(p.rsplit("/", 1)[1] for p in s3fs_direct.ls(f"{bucket}/{prefix}", refresh=True)) == [name]
        assert s3fs_direct.cat_file(f"{bucket}/{prefix}/{name}") == (body or b"not a dsclean shard")
        assert not os.path.exists(staging_folder(dest))  # nothing packed


def test_a_pack_of_an_index_of_a_bucket_prefix_into_that_prefix_is_refused(
    source, bucket, s3fs_direct, s3_endpoint, cli, tmp_path
):
    index = tmp_path / "train.arrow"
    assert cli(["index", source, "-o", str(index), "--jobs", "1", *_so(s3_endpoint)]).code == 0
    for dest in (f"{source}/packed", source, f"{source}/"):
        code, out, err = cli(["pack", str(index), "-o", dest, *_so(s3_endpoint)])
        assert code == 2 and "inside the prefix" in err and dest in err, out + err
    s3fs_direct.invalidate_cache()
    assert not s3fs_direct.exists(f"{bucket}/data/packed")
    assert not [k for k in s3fs_direct.find(f"{bucket}/data") if k.endswith((".tar", "pack.json"))]
    # a sibling prefix whose name starts the same is outside it
    code, out, err = cli(["pack", str(index), "-o", f"{source}-packed", *_so(s3_endpoint)])
    assert code == 0, err


def test_a_missing_bucket_and_an_index_to_a_url_are_clear_errors(source, bucket, s3_endpoint, cli, tmp_path):
    missing = "s3://no-such-bucket-dsclean/x"
    code, out, err = cli(["pack", source, "-o", missing, "--samples-per-shard", "2", *_so(s3_endpoint)])
    assert code == 2 and missing in err and "no such bucket" in err, out + err
    assert "resume" not in err and not os.path.exists(staging_folder(missing))  # refused before a shard was packed
    # a prefix the credentials cannot write: refused before a shard is packed, not "run again to resume"
    nowrite = f"s3://{bucket}/nowrite"
    with FaultProxy(s3_endpoint, failures=100, status=403, match="/nowrite", puts=True) as proxy:
        code, out, err = cli(["pack", source, "-o", nowrite, "--samples-per-shard", "2", *_so(proxy.url)])
    assert code == 2 and nowrite in err and "cannot write" in err and "access denied (403)" in err, out + err
    assert "resume" not in err and not os.path.exists(staging_folder(nowrite))
    code, out, err = cli(["verify", missing, *_so(s3_endpoint)])
    assert code == 2 and missing in err and "no such bucket" in err and "not a shard set" not in err, out + err
    code, out, err = cli(["index", source, "-o", f"s3://{bucket}/idx.arrow", *_so(s3_endpoint)])
    assert code == 2 and "-o must be a local file" in err and f"s3://{bucket}/idx.arrow" in err, out + err
    assert "does not exist" not in err


def test_the_uploaded_pack_json_records_the_source_url_and_resumes_from_another_state_folder(
    source, bucket, s3fs_direct, s3_endpoint, cli, tmp_path
):
    dest = f"s3://{bucket}/shards"
    args = ["pack", source, "-o", dest, "--samples-per-shard", "2", "--shuffle", "1", *_so(s3_endpoint)]
    code, out, err = cli([*args, "--state-dir", str(tmp_path / "machine-a"), "--json"])
    assert code == 0, err
    first = json.loads(out)
    assert first["complete"] and first["written"] >= 2
    recorded = json.loads(s3fs_direct.cat_file(f"{bucket}/shards/pack.json"))
    assert recorded["source"]["index"] == source and recorded["source"]["root"] == source
    assert str(tmp_path) not in json.dumps(recorded)
    code, out, err = cli([*args, "--state-dir", str(tmp_path / "machine-b"), "--json"])
    assert code == 0, err
    again = json.loads(out)
    assert again["complete"] and again["reused"] == first["written"] and again["written"] == 0


def test_an_object_grown_since_indexing_is_read_only_up_to_its_size_and_named_changed(
    source, bucket, s3fs_direct, s3_endpoint, tmp_path
):
    from dsclean.pack.bucketsource import bucket_index
    from dsclean.pack.objsource import fetch
    from dsclean.pack.packer import PackOptions, pack_shards
    from dsclean.storage.fs import Store
    from dsclean.storage.reads import ReadPolicy

    index, _ = bucket_index(source, {"endpoint_url": s3_endpoint})
    size = len(GOOD["cats/b.png"]())
    s3fs_direct.pipe_file(f"{bucket}/data/cats/b.png", GOOD["cats/b.png"]() + b"\0" * 100_000)
    got = fetch(Store(source, {"endpoint_url": s3_endpoint}), "cats/b.png", size, 0, ReadPolicy())
    assert got.error is None and got.data is not None and len(got.data) == size + 1  # not the 100 kB it holds
    s3fs_direct.pipe_file(f"{bucket}/data/empty.png", b"")
    assert fetch(Store(source, {"endpoint_url": s3_endpoint}), "empty.png", 0, 0, ReadPolicy()).data == b""
    options = PackOptions(storage_options={"endpoint_url": s3_endpoint}, samples_per_shard=1, shuffle=None)
    summary = pack_shards(index, str(tmp_path / "o"), options)
    assert not summary.complete
    problem = [f for f in summary.failures if "cats/b.png" in f]
    assert problem and "changed since it was indexed" in problem[0] and f"more than {size}" in problem[0]


def test_a_folder_per_object_layout_keeps_no_class_per_folder_and_gives_no_labels(
    bucket, s3fs_direct, s3_endpoint, monkeypatch
):
    from dsclean.index.store import open_index
    from dsclean.pack import bucketsource

    monkeypatch.setattr(bucketsource, "MAX_CLASSES", 2)
    for rel in ("id1/img.png", "id2/img.png", "id3/img.png", "id4/img.png"):
        s3fs_direct.pipe_file(f"{bucket}/q/{rel}", synth.png(8, 8, seed=len(rel)))
    index, _ = bucketsource.bucket_index(f"s3://{bucket}/q", {"endpoint_url": s3_endpoint})
    idx = open_index(index)
    assert idx.meta["classes"] == [] and list(map(int, idx.labels)) == [-1] * 4 and len(idx) == 4
    monkeypatch.setattr(bucketsource, "MAX_CLASSES", 4)  # at the bound: still classes
    index, _ = bucketsource.bucket_index(f"s3://{bucket}/q", {"endpoint_url": s3_endpoint})
    assert open_index(index).meta["classes"] == ["id1", "id2", "id3", "id4"]


def test_a_local_output_inside_an_indexs_file_url_root_is_refused_as_inside(cli, tmp_path):
    root = tmp_path / "ds"
    (root / "cats").mkdir(parents=True)
    (root / "cats" / "a.png").write_bytes(synth.png(16, 16, seed=1))
    index = tmp_path / "i.arrow"
    assert cli(["index", f"file://{root}", "-o", str(index), "--jobs", "1"]).code == 0
    code, out, err = cli(["pack", str(index), "-o", str(root / "packed")])
    assert code == 2 and "is inside the dataset" in err and f"file://{root}" in err, out + err
    assert sorted(os.listdir(root)) == ["cats"]


def test_an_index_of_a_file_url_is_refused_by_pack_with_the_way_out(tmp_path, cli):
    data = tmp_path / "data" / "cats"
    data.mkdir(parents=True)
    (data / "a.png").write_bytes(synth.png(16, 16, seed=1))
    index = tmp_path / "f.arrow"
    code, _, err = cli(["index", f"file://{tmp_path / 'data'}", "-o", str(index), "--jobs", "1"])
    assert code == 0, err
    code, _, err = cli(["pack", str(index), "-o", str(tmp_path / "out")])
    assert code == 2 and "file://" in err and f"dsclean index {tmp_path / 'data'}" in err and "Traceback" not in err


def test_a_killed_packs_uploads_are_not_reused_once_its_staging_folder_is_removed(
    source, bucket, s3fs_direct, s3_endpoint, cli, monkeypatch
):
    """The staging folder (its pack.json: the options and listing the shards were made with) removed by hand, the
    record of the uploads kept: the shards in the bucket are of an unknown pack, so they are refused, not read back
    as this run's; the advice given (remove them, then the URL's state folder) then gives a fresh pack."""
    import shutil

    import s3fs

    from dsclean.pack.remote import uploaded_record

    dest = f"s3://{bucket}/shards"
    args = ["pack", source, "-o", dest, "--samples-per-shard", "1", "--no-shuffle", *_so(s3_endpoint)]
    calls = {"n": 0}
    original_put = s3fs.S3FileSystem._put_file

    async def put_then_die(self, lpath, rpath, *a, **k):  # the second upload fails: one shard is in the bucket
        calls["n"] += 1
        if calls["n"] == 2:
            raise PermissionError(13, "Access Denied (injected)")
        return await original_put(self, lpath, rpath, *a, **k)

    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", put_then_die)
    s3fs.S3FileSystem.clear_instance_cache()
    code, _, err = cli(args)
    assert code != 0 and "access denied" in err.lower()
    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", original_put)
    s3fs.S3FileSystem.clear_instance_cache()
    before = sorted(p.rsplit("/", 1)[1] for p in s3fs_direct.ls(f"{bucket}/shards", refresh=True))
    assert before and "pack.json" not in before
    staging = staging_folder(dest)
    shutil.rmtree(staging)
    record = uploaded_record(staging)
    assert os.path.exists(record)
    code, out, err = cli([*args[:4], "--samples-per-shard", "2", *args[6:]])  # other options, same output
    assert code == 2 and "not reused" in err and record in err and os.path.dirname(staging) in err, err
    assert sorted(p.rsplit("/", 1)[1] for p in s3fs_direct.ls(f"{bucket}/shards", refresh=True)) == before
    for name in open(record).read().split():  # the advice followed
        if s3fs_direct.exists(f"{bucket}/shards/{name}"):
            s3fs_direct.rm_file(f"{bucket}/shards/{name}")
    shutil.rmtree(os.path.dirname(staging))
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    assert json.loads(out)["reused"] == 0
    code, out, err = cli(["verify", dest, *_so(s3_endpoint)])
    assert code == 0 and "4 of 4 shards pass, 4 samples" in out, out + err
