"""``dsclean dups s3://BUCKET/PREFIX`` against a real S3 API server (moto) through s3fs: the groups of the
same files on local disk, the last bucket scan's facts reused, quarantine in the bucket and its restore,
403/404 objects named, clear errors."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest
from support import synth
from support.files import write
from support.s3server import FaultProxy

from dsclean.dups.finder import DupsOptions, find_duplicates
from dsclean.storage.scan import BucketScanOptions, scan_bucket

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


def _tree(root):
    """A split root: exact copies (within and across splits), a near copy leaking into val, a truncated
    image with an exact copy of itself (hashed, not decoded), distinct pictures."""
    a = synth.jpeg(320, 240, seed=1)
    cut = synth.truncate(synth.jpeg(160, 120, seed=9), 0.5)
    files = {
        "train/cats/a.jpg": a,
        "train/cats/a_copy.jpg": a,
        "val/cats/a.jpg": a,
        "train/dogs/b.png": synth.encode_image(synth.photo_like(320, 240, seed=2), "PNG"),
        "val/dogs/b_small.jpg": synth.encode_image(
            synth.photo_like(320, 240, seed=2).resize((200, 150)), "JPEG", quality=60
        ),
        "train/bad/cut.jpg": cut,
        "train/bad/cut_again.jpg": cut,
        **{f"train/other/{i}.jpg": synth.jpeg(256, 192, seed=100 + i) for i in range(4)},
    }
    for rel, data in files.items():
        write(root, rel, data)
    return files


def _upload(fs, bucket, prefix, files):
    for rel, data in files.items():
        fs.pipe_file(f"{bucket}/{prefix}/{rel}", data)


def _shape(result):
    """The groups with each member named by its split and relative path: comparable across local and bucket."""
    return [
        (r["kind"], [(os.path.basename(m["root"]), m["path"], m["distance"]) for m in r["members"]], len(r["splits"]))
        for r in result.records()
    ]


def _opts(endpoint, **kw):
    return DupsOptions(jobs=2, timeout=30, storage_options={"endpoint_url": endpoint}, **kw)


def test_bucket_groups_equal_the_same_files_on_local_disk(bucket, s3fs_direct, s3_endpoint, tmp_path):
    files = _tree(tmp_path / "data")
    _upload(s3fs_direct, bucket, "data", files)
    local = find_duplicates([str(tmp_path / "data/train"), str(tmp_path / "data/val")], DupsOptions(jobs=2, timeout=30))
    remote = find_duplicates([f"s3://{bucket}/data/train", f"s3://{bucket}/data/val"], _opts(s3_endpoint))
    assert _shape(remote) == _shape(local)
    kinds = sorted(k for k, _, _ in _shape(remote))
    assert kinds == ["exact", "exact", "near"]  # a x3, the truncated pair (hash only), b and its near copy
    s, ls = remote.summary, local.summary
    assert (s.files, s.images, s.undecodable, s.leaking_groups) == (ls.files, ls.images, ls.undecodable, 2)
    assert s.undecodable == 2 and s.computed == len(files) and s.failed == []
    members = {m["path"] for r in remote.records() for m in r["members"]}
    assert "cats/a_copy.jpg" in members  # keys relative to the prefix, not bucket paths


def test_cli_on_a_url_split_root_compares_its_splits(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    _upload(s3fs_direct, bucket, "data", _tree(tmp_path / "data"))
    out = tmp_path / "groups.jsonl"
    url = f"s3://{bucket}/data"
    r = cli(["dups", url, "--storage-option", f"endpoint_url={s3_endpoint}", "-o", out, "--check", "-j", "2"])
    assert r.code == 1, r.err  # groups span splits
    assert "is a split root: comparing its splits train, val" in r.err
    recs = [json.loads(line) for line in open(out)]
    leak = next(rec for rec in recs if rec["kind"] == "exact" and len(rec["splits"]) == 2)
    assert [(m["root"], m["path"]) for m in leak["members"]] == [
        (f"{url}/train", "cats/a.jpg"),
        (f"{url}/train", "cats/a_copy.jpg"),
        (f"{url}/val", "cats/a.jpg"),
    ]
    assert "root_abs" not in leak["members"][0]
    # --no-splits: one root, so nothing spans splits
    r = cli(["dups", url, "--storage-option", f"endpoint_url={s3_endpoint}", "--no-splits", "--json", "-j", "2"])
    assert r.code == 0 and json.loads(r.out)["roots"] == [url] and json.loads(r.out)["leaking_groups"] == 0


def test_the_last_bucket_scan_is_reused_for_unchanged_objects(bucket, s3fs_direct, s3_endpoint, tmp_path):
    files = _tree(tmp_path / "data")
    _upload(s3fs_direct, bucket, "data", files)
    state = str(tmp_path / "state")
    url = f"s3://{bucket}/data"
    scan_bucket(url, BucketScanOptions(storage_options={"endpoint_url": s3_endpoint}, jobs=1, state_dir=state))
    fresh = find_duplicates([f"{url}/train", f"{url}/val"], _opts(s3_endpoint, use_results=False))
    reused = find_duplicates([f"{url}/train", f"{url}/val"], _opts(s3_endpoint, state_dir=state))
    # the scan of the parent prefix serves its splits; the two truncated objects it marked bad are left out
    assert reused.summary.excluded_bad == 2 and reused.summary.computed == 0
    assert reused.summary.from_results == len(files) - 2
    assert "the last scan of " + url in reused.summary.results_sources[0]
    assert _shape(reused) == [g for g in _shape(fresh) if not g[1][0][1].startswith("bad/")]
    # an object replaced since the scan (new ETag, size and time) is read again
    s3fs_direct.pipe_file(f"{bucket}/data/train/other/0.jpg", synth.jpeg(200, 100, seed=55))
    again = find_duplicates([f"{url}/train", f"{url}/val"], _opts(s3_endpoint, state_dir=state))
    assert again.summary.computed == 1 and again.summary.from_results == len(files) - 3


def _keys(fs, bucket, prefix):
    fs.invalidate_cache()
    return sorted(p[len(f"{bucket}/{prefix}/") :] for p in fs.find(f"{bucket}/{prefix}"))


def test_quarantine_in_the_bucket_and_restore(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    files = _tree(tmp_path / "data")
    _upload(s3fs_direct, bucket, "data", files)
    state = str(tmp_path / "state")
    url, q = f"s3://{bucket}/data/train", f"s3://{bucket}/q"
    endpoint = ["--storage-option", f"endpoint_url={s3_endpoint}", "--state-dir", state]
    before = _keys(s3fs_direct, bucket, "data/train")
    r = cli(["dups", url, "--quarantine", q, "--dry-run", "--json", "-j", "2", *endpoint])
    assert r.code == 0 and json.loads(r.out)["planned"] == 2 and _keys(s3fs_direct, bucket, "data/train") == before
    r = cli(["dups", url, "--quarantine", q, "--json", "-j", "2", *endpoint])
    s = json.loads(r.out)
    assert r.code == 0 and (s["planned"], s["moved"], s["move_errors"]) == (2, 2, []), r.err
    moved = ["bad/cut_again.jpg", "cats/a_copy.jpg"]
    assert _keys(s3fs_direct, bucket, "q/train") == moved
    assert sorted(set(before) - set(_keys(s3fs_direct, bucket, "data/train"))) == moved
    for rel in moved:  # the very bytes
        assert s3fs_direct.cat_file(f"{bucket}/q/train/{rel}") == files[f"train/{rel}"]
    # the duplicates are gone: a second run finds none and moves nothing
    r = cli(["dups", url, "--quarantine", q, "--json", "-j", "2", *endpoint])
    assert json.loads(r.out)["exact_groups"] == 0 and json.loads(r.out)["moved"] == 0
    r = cli(["restore", f"{q}/train", *endpoint])
    assert r.code == 0 and "2 restored" in r.out, r.err
    assert _keys(s3fs_direct, bucket, "data/train") == before and _keys(s3fs_direct, bucket, "q") == []


@pytest.mark.parametrize("status, said", [(403, "access denied (403)"), (404, "object not found (404)")])
def test_a_refused_or_missing_object_is_named_not_a_crash(status, said, bucket, s3fs_direct, s3_endpoint, tmp_path):
    files = _tree(tmp_path / "data")
    _upload(s3fs_direct, bucket, "data", files)
    with FaultProxy(s3_endpoint, failures=100, status=status, match="/train/other/1.jpg") as proxy:
        result = find_duplicates([f"s3://{bucket}/data/train"], _opts(proxy.url))
    assert proxy.injected >= 1
    (failed,) = result.summary.failed
    assert failed.startswith(f"s3://{bucket}/data/train/other/1.jpg: ") and said in failed
    assert result.summary.files == 8  # every other object compared
    assert sorted(k for k, _, _ in _shape(result)) == ["exact", "exact"]


def test_user_mistakes_are_clear_errors(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    _upload(s3fs_direct, bucket, "data", {"train/a.jpg": synth.jpeg(64, 64, seed=1)})
    opt = ["--storage-option", f"endpoint_url={s3_endpoint}"]
    url = f"s3://{bucket}/data"
    cases = [
        (["dups", "s3://no-such-bucket-here/x", *opt], "s3://no-such-bucket-here/x: no such bucket"),
        (["dups", url, "-o", f"{url}/groups.jsonl", *opt], "never into a bucket"),
        (["dups", url, "--quarantine", f"{url}/q", *opt], "inside the dataset"),
        (["dups", url, "--quarantine", str(tmp_path / "q"), *opt], "a URL quarantine"),
        (["dups", str(tmp_path), *opt], "--storage-option: only for a storage URL"),
        (["dups", str(tmp_path), "--manifest", str(tmp_path / "m.txt")], "--manifest: only for a storage URL"),
        (["dups", url, f"{url}/train", "--no-splits", *opt], "is inside"),
        (["dups", url, "--max-memory", "1G", *opt], "--max-memory: not yet for a storage URL"),
    ]
    for argv, said in cases:
        r = cli(argv)
        assert r.code == 2 and said in r.err and "Traceback" not in r.err, (argv, r.err)


@pytest.mark.slow  # crashes and hangs worker processes on purpose
def test_objects_that_crash_or_hang_their_decoder_are_named_and_left_out(bucket, s3fs_direct, s3_endpoint):
    # fresh worker processes with the scan's test-only fault hook on (DSCLEAN_TEST_FAULTS=1)
    a = synth.jpeg(128, 128, seed=5)
    _upload(
        s3fs_direct,
        bucket,
        "r",
        {
            "a.jpg": a,
            "a2.jpg": a,
            "x__segfault__.jpg": synth.jpeg(64, 64, seed=6),
            "y__hang__.jpg": synth.jpeg(64, 64, seed=7),
        },
    )
    argv = ["dups", f"s3://{bucket}/r", "--storage-option", f"endpoint_url={s3_endpoint}", "--timeout", "2"]
    proc = subprocess.run(
        [sys.executable, "-m", "dsclean", *argv, "-j", "2", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "DSCLEAN_TEST_FAULTS": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert (s["exact_groups"], s["duplicate_files"]) == (1, 1)
    assert sorted(f.split(": ")[0] for f in s["failed"]) == [
        f"s3://{bucket}/r/x__segfault__.jpg",
        f"s3://{bucket}/r/y__hang__.jpg",
    ]


def test_a_folder_and_a_bucket_prefix_compared_for_leakage(bucket, s3fs_direct, s3_endpoint, tmp_path):
    files = _tree(tmp_path / "data")
    _upload(s3fs_direct, bucket, "data", {k: v for k, v in files.items() if k.startswith("train/")})
    local_val, url = str(tmp_path / "data/val"), f"s3://{bucket}/data/train"
    result = find_duplicates([url, local_val], _opts(s3_endpoint))
    leaks = [
        (r["kind"], [(m["root"], m["path"]) for m in r["members"]]) for r in result.records() if len(r["splits"]) == 2
    ]
    assert sorted(leaks) == [
        ("exact", [(url, "cats/a.jpg"), (url, "cats/a_copy.jpg"), (local_val, "cats/a.jpg")]),
        ("near", [(url, "dogs/b.png"), (local_val, "dogs/b_small.jpg")]),
    ]


def test_manifest_and_objects_through_temp_files(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    files = _tree(tmp_path / "data")
    _upload(s3fs_direct, bucket, "data", files)
    url, opt = f"s3://{bucket}/data/train", ["--storage-option", f"endpoint_url={s3_endpoint}", "-j", "2", "--json"]
    manifest = tmp_path / "keys.txt"
    manifest.write_text(
        "data/train/cats/a.jpg\ndata/train/cats/a_copy.jpg\ndata/train/other/0.jpg\ndata/val/cats/a.jpg\n"
    )
    r = cli(["dups", url, "--manifest", manifest, "--no-results", *opt])
    s = json.loads(r.out)
    assert r.code == 0 and (s["files"], s["exact_groups"], s["duplicate_files"]) == (3, 1, 1), r.err


def test_objects_past_max_in_memory_go_through_a_temp_file_with_the_same_facts(
    bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch
):
    import signal

    from dsclean.dups import objects
    from dsclean.dups.worker import Limits
    from dsclean.storage.fs import Store
    from dsclean.storage.listing import Obj
    from dsclean.storage.reads import ReadPolicy

    files = _tree(tmp_path / "data")
    _upload(s3fs_direct, bucket, "data", files)
    store = Store(f"s3://{bucket}/data/train", {"endpoint_url": s3_endpoint})
    objs = [Obj(k[len("train/") :], len(v)) for k, v in files.items() if k.startswith("train/")]
    through_files = []
    real = objects.facts_row
    monkeypatch.setattr(objects, "facts_row", lambda path, opts: through_files.append(path) or real(path, opts))
    handler = signal.getsignal(signal.SIGINT)  # enter() ignores Ctrl-C, as a worker process does
    try:
        in_memory = objects.facts_objects(store, objs, Limits(timeout=0))
        assert through_files == []
        via_temp = objects.facts_objects(store, objs, Limits(timeout=0, read_policy=ReadPolicy(max_in_memory=1024)))
    finally:
        signal.signal(signal.SIGINT, handler)
    assert len(through_files) == len(objs)  # every object is larger than 1 KiB
    assert not any(os.path.exists(p) for p in through_files)  # each temp file removed after use
    assert via_temp == in_memory and all(row[5] is not None for row in via_temp)


@pytest.mark.slow  # kills a run on purpose
def test_a_dups_killed_mid_move_loses_nothing(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    files = _tree(tmp_path / "data")
    _upload(s3fs_direct, bucket, "data", files)
    state = str(tmp_path / "state")
    url, q = f"s3://{bucket}/data/train", f"s3://{bucket}/q"
    opt = ["--storage-option", f"endpoint_url={s3_endpoint}", "--state-dir", state]
    before = _keys(s3fs_direct, bucket, "data/train")
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1", "DSCLEAN_TEST_KILL_AT": "copied:1"}
    with open(tmp_path / "stderr", "wb") as err:  # not a pipe: the killed run's workers would hold it open
        proc = subprocess.Popen(
            [sys.executable, "-m", "dsclean", "dups", url, "--quarantine", q, "-j", "2", "-q", *opt],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # its own process group: the killed run's worker processes are ended below
        )
        try:
            code = proc.wait(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert code == -9, (tmp_path / "stderr").read_text()
    # killed after the first copy was verified, before its original was deleted: one object in two places
    ds, held = _keys(s3fs_direct, bucket, "data/train"), _keys(s3fs_direct, bucket, "q/train")
    assert ds == before and len(held) == 1 and held[0] in ds
    r = cli(["recover", f"{q}/train", *opt])
    assert r.code == 0, r.err
    ds, held = _keys(s3fs_direct, bucket, "data/train"), _keys(s3fs_direct, bucket, "q/train")
    assert not set(ds) & set(held) and sorted(ds + held) == before  # nothing in two places, nothing lost
    # the next run moves the other copy; restore puts both back
    r = cli(["dups", url, "--quarantine", q, "--json", "-j", "2", *opt])
    assert json.loads(r.out)["moved"] == 1 and len(_keys(s3fs_direct, bucket, "q/train")) == 2, r.err
    assert cli(["restore", f"{q}/train", *opt]).code == 0
    assert _keys(s3fs_direct, bucket, "data/train") == before


def test_credentials_set_after_an_earlier_run_reach_the_workers(
    bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch
):
    # workers started by a local run without credentials in the environment are not reused for the bucket
    files = _tree(tmp_path / "data")
    _upload(s3fs_direct, bucket, "data", files)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    local = find_duplicates([str(tmp_path / "data/train")], DupsOptions(jobs=2, timeout=30, use_results=False))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    remote = find_duplicates([f"s3://{bucket}/data/train"], _opts(s3_endpoint, use_results=False))
    assert remote.summary.failed == [] and _shape(remote) == _shape(local)
