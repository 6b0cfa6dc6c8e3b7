"""dsclean index s3://BUCKET/PREFIX: good objects only, judged by the prefix's last bucket scan, the rest checked."""

from __future__ import annotations

import os

import pytest
from support import synth
from support.s3server import FaultProxy

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from dsclean.index.store import open_index, read_meta  # noqa: E402
from dsclean.storage.scan import BucketScanOptions, scan_bucket  # noqa: E402

SECRET = "sEcReT-9f3b1c7a2e"


def rows(index: str) -> dict[str, int]:
    idx = open_index(index)
    return {os.fsdecode(idx.path_bytes(i)): int(idx.labels[i]) for i in range(len(idx))}


def scanned_bucket(fs, bucket: str, endpoint: str) -> dict[str, bytes]:
    """A prefix scanned once (one bad object), then changed: one object added, one replaced, one bad added."""
    files = {
        "data/cats/a.jpg": synth.jpeg(64, 48, seed=1),
        "data/cats/b.png": synth.png(32, 32, seed=2),
        "data/dogs/c.jpg": synth.truncate(synth.jpeg(64, 48, seed=3), 0.5),  # bad, found by the scan
        "data/dogs/d.png": synth.png(24, 24, seed=4),
        "data/notes.txt": b"not media",
    }
    for key, data in files.items():
        fs.pipe_file(f"{bucket}/{key}", data)
    scan_bucket(f"s3://{bucket}/data", BucketScanOptions(storage_options={"endpoint_url": endpoint}, jobs=1))
    later = {
        "data/dogs/new.jpg": synth.jpeg(40, 40, seed=5),  # never scanned, good
        "data/dogs/new-bad.png": synth.truncate(synth.png(40, 40, seed=6), 0.5),  # never scanned, bad
        "data/cats/b.png": synth.truncate(synth.png(32, 32, seed=2), 0.4),  # changed since the scan: now bad
    }
    for key, data in later.items():
        fs.pipe_file(f"{bucket}/{key}", data)
    return {**files, **later}


def test_index_of_a_prefix_keeps_good_objects_only(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    scanned_bucket(s3fs_direct, bucket, s3_endpoint)
    out = tmp_path / "i.arrow"
    code, stdout, err = cli(
        [
            "index",
            f"s3://{bucket}/data/",
            "-o",
            out,
            "--storage-option",
            f"endpoint_url={s3_endpoint}",
            "--storage-option",
            "key=testing",
            "--storage-option",
            f"secret={SECRET}",  # a storage option's value: never in the index
            "--json",
        ]
    )
    assert code == 0, err
    meta = read_meta(str(out))
    assert meta["root"] == f"s3://{bucket}/data" and meta["classes"] == ["cats", "dogs"]
    assert rows(str(out)) == {"cats/a.jpg": 0, "dogs/d.png": 1, "dogs/new.jpg": 1}
    import json

    summary = json.loads(stdout)
    assert summary["excluded_bad"] == 1  # dogs/c.jpg, by the scan's verdict (not read again)
    assert summary["checked"] == 3 and summary["checked_bad"] == 2  # new.jpg, new-bad.png, b.png (changed)
    assert sorted(summary["bad_paths"]) == ["cats/b.png", "dogs/new-bad.png"]
    assert summary["unscanned"] == 2 and summary["changed_since_scan"] == 1
    raw = out.read_bytes()
    assert SECRET.encode() not in raw and s3_endpoint.encode() not in raw


def test_no_check_sniffs_the_first_bytes_of_unscanned_objects(bucket, s3fs_direct, s3_endpoint, tmp_path):
    from dsclean.index.bucket import BucketIndexOptions, build_bucket_index

    s3fs_direct.pipe_file(f"{bucket}/p/x/good.jpg", synth.jpeg(32, 32, seed=1))
    s3fs_direct.pipe_file(f"{bucket}/p/x/cut.jpg", synth.truncate(synth.jpeg(32, 32, seed=2), 0.5))
    s3fs_direct.pipe_file(f"{bucket}/p/y/fake.png", b"<html>not an image</html>" * 50)
    out = str(tmp_path / "i.arrow")
    options = BucketIndexOptions(storage_options={"endpoint_url": s3_endpoint})
    summary = build_bucket_index(f"s3://{bucket}/p", out, options=_opts(check=False), bucket=options)
    # magic bytes only: the truncated JPEG starts like a JPEG and stays; the HTML page named .png does not
    assert rows(out) == {"x/cut.jpg": 0, "x/good.jpg": 0}
    assert summary.not_media == 1 and summary.checked == 3
    summary = build_bucket_index(f"s3://{bucket}/p", out, options=_opts(check=True), bucket=options)
    assert rows(out) == {"x/good.jpg": 0} and summary.checked_bad == 2  # decoded: the cut one is bad too


def _opts(**kw):
    from dsclean.index.options import IndexOptions

    return IndexOptions(**kw)


def test_labels_none_and_scan_results_file(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    s3fs_direct.pipe_file(f"{bucket}/q/a/1.png", synth.png(16, 16, seed=1))
    s3fs_direct.pipe_file(f"{bucket}/q/b/2.png", synth.truncate(synth.png(16, 16, seed=2), 0.5))
    report = tmp_path / "r"
    scan_bucket(
        f"s3://{bucket}/q",
        BucketScanOptions(storage_options={"endpoint_url": s3_endpoint}, jobs=1, report_dir=str(report)),
    )
    out = tmp_path / "i.npy"
    args = ["index", f"s3://{bucket}/q", "-o", out, "--storage-option", f"endpoint_url={s3_endpoint}", "--no-labels"]
    code, _, err = cli([*args, "--scan-results", report / "scan_results.parquet", "--no-check"])
    assert code == 0, err
    assert rows(str(out)) == {"a/1.png": -1}  # b/2.png left out by those results, though never read here


def test_index_url_errors_are_clear(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    out = tmp_path / "i.arrow"
    code, _, err = cli(
        ["index", "s3://no-such-bucket-zz/x", "-o", out, "--storage-option", f"endpoint_url={s3_endpoint}"]
    )
    assert code == 2 and "no such bucket" in err and "s3://no-such-bucket-zz/x" in err and "Traceback" not in err
    s3fs_direct.pipe_file(f"{bucket}/d/a/1.png", synth.png(16, 16, seed=1))
    with FaultProxy(s3_endpoint, failures=1000, status=403, listings=True) as proxy:
        code, _, err = cli(
            ["index", f"s3://{bucket}/d", "-o", out, "--storage-option", f"endpoint_url={proxy.url}", "--no-check"]
        )
    assert code == 2 and "access denied (403)" in err and f"s3://{bucket}/d" in err and "Traceback" not in err
    assert not out.exists()
    code, _, err = cli(["index", str(tmp_path), "-o", out, "--storage-option", "endpoint_url=http://x"])
    assert code == 2 and "--storage-option" in err and "local" in err
    code, _, err = cli(["index", f"s3://{bucket}/d", "-o", out, "--dedup"])
    assert code == 2 and "dedup" in err and "not yet" in err and "Traceback" not in err


def test_splits_of_a_bucket_split_root_share_classes_and_its_scan(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    import json

    objects = {
        "root/train/cats/a.jpg": synth.jpeg(32, 32, seed=1),
        "root/train/dogs/b.png": synth.png(16, 16, seed=2),
        "root/val/cats/c.jpg": synth.jpeg(32, 32, seed=3),
        "root/val/dogs/d.jpg": synth.truncate(synth.jpeg(32, 32, seed=4), 0.5),
    }
    for key, data in objects.items():
        s3fs_direct.pipe_file(f"{bucket}/{key}", data)
    scan_bucket(f"s3://{bucket}/root", BucketScanOptions(storage_options={"endpoint_url": s3_endpoint}, jobs=1))
    base = ["--storage-option", f"endpoint_url={s3_endpoint}"]
    code, _, err = cli(["index", f"s3://{bucket}/root", "-o", tmp_path / "x.arrow", *base])
    assert code == 2 and "is a split root" in err and "--splits" in err
    out = tmp_path / "splits"
    code, stdout, err = cli(["index", f"s3://{bucket}/root", "-o", out, "--splits", "--json", *base])
    assert code == 0, err
    got = json.loads(stdout)
    assert rows(str(out / "train.arrow")) == {"cats/a.jpg": 0, "dogs/b.png": 1}
    assert rows(str(out / "val.arrow")) == {"cats/c.jpg": 0}  # dogs/d.jpg: bad by the split root's scan
    assert read_meta(str(out / "val.arrow"))["classes"] == ["cats", "dogs"]
    assert read_meta(str(out / "val.arrow"))["root"] == f"s3://{bucket}/root/val"
    assert got["val"]["excluded_bad"] == 1 and got["val"]["checked"] == 0 and got["train"]["checked"] == 0
    s3fs_direct.pipe_file(f"{bucket}/root/val/birds/e.png", synth.png(16, 16, seed=5))
    code, _, err = cli(["index", f"s3://{bucket}/root", "-o", out, "--splits", *base])
    assert code == 2 and "class folders differ" in err and "birds" in err
    code, _, err = cli(["index", f"s3://{bucket}/root", "-o", out, "--splits", "--allow-class-mismatch", *base])
    assert code == 0, err
    assert read_meta(str(out / "train.arrow"))["classes"] == ["birds", "cats", "dogs"]
    assert rows(str(out / "val.arrow")) == {"birds/e.png": 0, "cats/c.jpg": 1}


def test_the_scans_quarantine_inside_the_prefix_is_not_listed(bucket, s3fs_direct, s3_endpoint, tmp_path):
    from dsclean.index.bucket import BucketIndexOptions, build_bucket_index

    s3fs_direct.pipe_file(f"{bucket}/set/cats/a.jpg", synth.jpeg(32, 32, seed=1))
    s3fs_direct.pipe_file(f"{bucket}/set/dogs/b.jpg", synth.truncate(synth.jpeg(32, 32, seed=2), 0.5))
    options = {"endpoint_url": s3_endpoint}
    scan_bucket(
        f"s3://{bucket}/set",
        BucketScanOptions(storage_options=options, jobs=1, quarantine=f"s3://{bucket}/set/_quarantine"),
    )
    assert s3fs_direct.exists(f"{bucket}/set/_quarantine/dogs/b.jpg")  # the bad object moved inside the prefix
    out = str(tmp_path / "i.arrow")
    summary = build_bucket_index(f"s3://{bucket}/set", out, bucket=BucketIndexOptions(storage_options=options))
    assert read_meta(out)["classes"] == ["cats"] and rows(out) == {"cats/a.jpg": 0}
    assert summary.checked == 0  # nothing read: the quarantine is not data


def test_a_crashing_check_of_an_unscanned_object_costs_that_object_only(
    bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch
):
    from dsclean.index.bucket import BucketIndexOptions, build_bucket_index

    monkeypatch.setenv("DSCLEAN_TEST_FAULTS", "1")  # an object named __segfault__ really crashes its check
    for i in range(4):
        s3fs_direct.pipe_file(f"{bucket}/u/c/ok{i}.png", synth.png(16, 16, seed=i))
    s3fs_direct.pipe_file(f"{bucket}/u/c/y__segfault__.png", synth.png(16, 16, seed=8))
    out = str(tmp_path / "i.arrow")
    summary = build_bucket_index(
        f"s3://{bucket}/u", out, jobs=2, bucket=BucketIndexOptions(storage_options={"endpoint_url": s3_endpoint})
    )
    assert rows(out) == {f"c/ok{i}.png": 0 for i in range(4)}  # the index process lived on: checks are isolated
    assert summary.checked_bad_reasons == {"decoder_crash": 1} and summary.bad_paths == ["c/y__segfault__.png"]


def test_csv_labels_name_keys_relative_to_the_prefix(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    for key in ("flat/1.png", "flat/2.png", "flat/3.png"):
        s3fs_direct.pipe_file(f"{bucket}/{key}", synth.png(16, 16, seed=len(key)))
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n1.png,cat\n3.png,dog\n")
    out = tmp_path / "i.arrow"
    base = ["index", f"s3://{bucket}/flat", "-o", out, "--storage-option", f"endpoint_url={s3_endpoint}", "--no-check"]
    code, _, err = cli([*base, "--labels", labels])
    assert code == 0, err
    assert rows(str(out)) == {"1.png": 0, "3.png": 1} and read_meta(str(out))["classes"] == ["cat", "dog"]
    labels.write_text("path,label\nflat/1.png,cat\n")  # the bucket's key, not relative to the prefix
    code, _, err = cli([*base, "--labels", labels])
    assert code == 2 and "relative to the prefix" in err and "Traceback" not in err


def test_too_many_first_folders_refuse_folder_labels(tmp_path, monkeypatch):
    """An ``<id>/img.jpg`` layout would make one class (one set entry while listing) per object: refused."""
    import dsclean.index.bucket as bucket_index
    from dsclean.errors import UserError
    from dsclean.index.bucket import build_bucket_index

    root = tmp_path / "set"
    for i in range(4):
        (root / f"id{i}").mkdir(parents=True)
        (root / f"id{i}" / "img.png").write_bytes(synth.png(8, 8, seed=i))
    monkeypatch.setattr(bucket_index, "MAX_FOLDER_CLASSES", 3)
    with pytest.raises(UserError, match="more than 3 distinct first folders") as err:
        build_bucket_index(f"file://{root}", str(tmp_path / "i.arrow"))
    assert f"file://{root}" in str(err.value) and "--labels" in str(err.value)
    assert not (tmp_path / "i.arrow").exists()
    monkeypatch.setattr(bucket_index, "MAX_FOLDER_CLASSES", 4)  # at the bound: indexed, a class each
    build_bucket_index(f"file://{root}", str(tmp_path / "i.arrow"))
    assert read_meta(str(tmp_path / "i.arrow"))["classes"] == ["id0", "id1", "id2", "id3"]


def test_file_url_top_level_is_read_entry_by_entry(tmp_path, monkeypatch):
    """``file://`` split detection reads the top level through os.scandir, stopping past the bound."""
    import os

    import dsclean.splits
    from dsclean.storage.fs import Store
    from dsclean.storage.listing import top_entries

    root = tmp_path / "set"
    for name in ("train", "val", "b", "c", "d"):
        (root / name).mkdir(parents=True)
    (root / "f.png").write_bytes(b"x")
    got = dict(top_entries(Store(f"file://{root}"), str(root)))
    assert got == {"train": True, "val": True, "b": True, "c": True, "d": True, "f.png": False}
    read = []
    real = os.scandir

    class Counting:
        def __init__(self, path):
            self.it = real(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.it.close()

        def __iter__(self):
            for entry in self.it:
                read.append(entry.name)
                yield entry

    monkeypatch.setattr(os, "scandir", Counting)
    monkeypatch.setattr(dsclean.splits, "MAX_TOP_ENTRIES", 1)
    from dsclean.index.bucket import split_prefixes
    from dsclean.storage.reads import ReadPolicy

    assert split_prefixes(Store(f"file://{root}"), ("train", "val"), ReadPolicy()) == []
    assert 0 < len(read) <= 3  # stopped past the bound: the rest of the level never read


def test_exclude_leaves_a_folder_of_the_prefix_out(bucket, s3fs_direct, s3_endpoint, tmp_path, cli):
    """``index URL --exclude``: a key prefix under the root (relative, or as a URL) is not listed, so neither its
    objects nor a class made only of it are in the index; a typo or a folder elsewhere is an error."""
    for key, data in {
        "d/cats/a.png": synth.png(16, 16, seed=1),
        "d/cats/old/b.png": synth.png(16, 16, seed=2),
        "d/dogs/c.png": synth.png(16, 16, seed=3),
        "d/junk/e.png": synth.png(16, 16, seed=4),
        "d/junkyard/f.png": synth.png(16, 16, seed=5),  # shares the text "junk" but not the folder
    }.items():
        s3fs_direct.pipe_file(f"{bucket}/{key}", data)
    out = tmp_path / "i.arrow"
    endpoint = ["--storage-option", f"endpoint_url={s3_endpoint}", "--no-check"]
    code, _, err = cli(
        [
            "index",
            f"s3://{bucket}/d",
            "-o",
            out,
            *endpoint,
            "--exclude",
            "junk",
            "--exclude",
            f"s3://{bucket}/d/cats/old",
        ]
    )
    assert code == 0, err
    assert rows(str(out)) == {"cats/a.png": 0, "dogs/c.png": 1, "junkyard/f.png": 2}
    assert read_meta(str(out))["classes"] == ["cats", "dogs", "junkyard"]
    for bad, words in (
        ("jnuk", "no object under"),
        (f"s3://{bucket}/other", "not under the root"),
        (f"s3://{bucket}/d", "the root"),
        ("../x", "not a folder under the root"),
    ):
        code, _, err = cli(["index", f"s3://{bucket}/d", "-o", tmp_path / "j.arrow", *endpoint, "--exclude", bad])
        assert code == 2 and words in err and bad in err and "Traceback" not in err, (bad, err)
        assert not (tmp_path / "j.arrow").exists()
