"""IndexedDataset over an index of a bucket prefix: samples read from the store, in forked DataLoader workers too."""

from __future__ import annotations

import pickle

import pytest
from support import synth

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from dsclean.data.dataset import IndexedDataset  # noqa: E402
from dsclean.data.errors import SampleError  # noqa: E402
from dsclean.errors import UserError  # noqa: E402
from dsclean.index.bucket import BucketIndexOptions, build_bucket_index  # noqa: E402

SIZES = {"cats/a.jpg": (40, 30), "cats/b.png": (20, 22), "dogs/c.png": (18, 16), "dogs/d.jpg": (50, 44)}


@pytest.fixture
def bucket_index(bucket, s3fs_direct, s3_endpoint, tmp_path):
    """An index of s3://BUCKET/data: four good objects in two classes (one bad object left out)."""
    for i, (key, (w, h)) in enumerate(SIZES.items()):
        data = synth.jpeg(w, h, seed=i) if key.endswith(".jpg") else synth.png(w, h, seed=i)
        s3fs_direct.pipe_file(f"{bucket}/data/{key}", data)
    s3fs_direct.pipe_file(f"{bucket}/data/dogs/bad.jpg", synth.truncate(synth.jpeg(30, 30, seed=9), 0.5))
    out = str(tmp_path / "i.arrow")
    build_bucket_index(
        f"s3://{bucket}/data", out, bucket=BucketIndexOptions(storage_options={"endpoint_url": s3_endpoint})
    )
    return out


def size_of(img):
    return img.size


def test_samples_come_from_the_bucket(bucket_index, bucket, s3fs_direct, s3_endpoint):
    ds = IndexedDataset(bucket_index, transform=size_of, storage_options={"endpoint_url": s3_endpoint})
    assert ds.root == f"s3://{bucket}/data" and ds.classes == ["cats", "dogs"]
    got = {ds.path(i): ds[i] for i in range(len(ds))}
    assert got == {k: (SIZES[k], 0 if k.startswith("cats") else 1) for k in SIZES}
    assert ds.raw(0) == s3fs_direct.cat_file(f"{bucket}/data/{ds.path(0)}")
    assert ds.samples[0] == (f"s3://{bucket}/data/{ds.path(0)}", 0)
    clone = pickle.loads(pickle.dumps(ds))  # what a spawned worker gets: options, never an open filesystem
    assert clone[1] == ds[1]


@pytest.mark.slow
def test_forked_dataloader_workers_read_every_good_sample(bucket_index, s3_endpoint):
    import torch.utils.data

    ds = IndexedDataset(bucket_index, transform=size_of, storage_options={"endpoint_url": s3_endpoint})
    ds[0]  # the parent opens its filesystem (and s3fs's event loop thread) before the fork
    loader = torch.utils.data.DataLoader(
        ds, batch_size=1, num_workers=2, multiprocessing_context="fork", collate_fn=lambda batch: batch[0]
    )
    got = sorted((tuple(size), label) for size, label in loader)
    assert got == sorted((SIZES[k], 0 if k.startswith("cats") else 1) for k in SIZES)


def test_a_key_deleted_after_indexing_is_named(bucket_index, bucket, s3fs_direct, s3_endpoint, caplog):
    ds = IndexedDataset(bucket_index, storage_options={"endpoint_url": s3_endpoint})
    gone = ds.path(2)
    s3fs_direct.rm(f"{bucket}/data/{gone}")
    with pytest.raises(SampleError) as err:
        ds[2]
    assert gone in str(err.value) and "not found (404)" in str(err.value) and err.value.path == gone
    from dsclean.data.guard import guard

    guarded = guard(IndexedDataset(bucket_index, storage_options={"endpoint_url": s3_endpoint}), on_error="skip")
    assert guarded[2] is None and guarded[1] is not None
    assert any(gone in r.getMessage() for r in caplog.records if r.name.startswith("dsclean.guard"))


def test_root_override_and_stale_objects(bucket_index, bucket, s3fs_direct, s3_endpoint):
    for key in SIZES:
        s3fs_direct.copy(f"{bucket}/data/{key}", f"{bucket}/moved/{key}")
    opts = {"endpoint_url": s3_endpoint}
    ds = IndexedDataset(bucket_index, transform=size_of, root=f"s3://{bucket}/moved/", storage_options=opts)
    s3fs_direct.rm(f"{bucket}/data/{ds.path(0)}")  # the recorded root no longer has it; the override does
    assert ds.root == f"s3://{bucket}/moved" and ds[0][0] == SIZES[ds.path(0)]
    s3fs_direct.pipe_file(f"{bucket}/moved/{ds.path(1)}", synth.png(99, 99, seed=5))  # another size now
    with pytest.raises(SampleError, match="stale index entry"):
        ds[1]


def test_storage_options_on_a_local_index_are_refused(media_index):
    with pytest.raises(UserError, match="storage_options"):
        IndexedDataset(media_index[1], storage_options={"endpoint_url": "http://127.0.0.1:1"})


def test_from_folder_refuses_a_url():
    with pytest.raises(UserError, match="dsclean index s3://b/p"):
        IndexedDataset.from_folder("s3://b/p")


def test_probe_all_over_a_bucket_index_names_a_missing_key(
    bucket_index, bucket, s3fs_direct, s3_endpoint, cli, monkeypatch
):
    import json

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)  # the reader's endpoint from the environment (none stored)
    ds = IndexedDataset(bucket_index)
    gone = ds.path(3)
    s3fs_direct.rm(f"{bucket}/data/{gone}")
    code, out, err = cli(["probe", bucket_index, "--num-workers", "0", "--all", "--json"])
    assert "Traceback" not in err
    got = json.loads(out)
    assert got["samples"] == 4 and [f["path"] for f in got["failures"]] == [gone]
    assert "404" in json.dumps(got["failures"])


def test_file_url_index_and_a_url_root_over_a_local_index(tmp_path):
    from dsclean.index.build import build_index

    root = tmp_path / "set"
    for key, (w, h) in SIZES.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(synth.jpeg(w, h, seed=1) if key.endswith(".jpg") else synth.png(w, h, seed=1))
    url_index = str(tmp_path / "u.arrow")
    build_bucket_index(f"file://{root}", url_index)  # a file:// prefix: listed and checked as a bucket's
    ds = IndexedDataset(url_index, transform=size_of)
    assert ds.root == f"file://{root}" and {ds.path(i): ds[i][0] for i in range(len(ds))} == SIZES
    local_index = str(tmp_path / "l.arrow")
    build_index(str(root), local_index)
    moved = IndexedDataset(local_index, transform=size_of, root=f"file://{root}")  # root= may be a URL too
    assert moved.store is not None and [moved[i] for i in range(len(moved))] == [ds[i] for i in range(len(ds))]


def test_a_key_escaping_the_prefix_is_refused_never_read(tmp_path):
    import pyarrow as pa

    from dsclean.data.errors import UnsafePathError
    from dsclean.index.store import index_schema, make_meta, write_arrow

    (tmp_path / "secret.png").write_bytes(synth.png(8, 8))
    (tmp_path / "set").mkdir()
    paths = [b"../secret.png", b"/etc/hostname"]  # a hostile index: keys out of the prefix
    table = pa.table({"path": paths, "label": [0, 0], "kind": [0, 0], "size": [1, 1], "mtime_ns": [1, 1]})
    meta = make_meta("x", ["c"], "folder", 2, None)
    meta["root"] = f"file://{tmp_path}/set"
    index = str(tmp_path / "h.arrow")
    write_arrow(table.cast(index_schema(classes=1, max_size=1, large=False, facts=False)), index, meta)
    ds = IndexedDataset(index, on_error="skip")  # skip never covers an unsafe path: it raises
    for i in range(2):
        with pytest.raises(UnsafePathError, match="escapes the prefix"):
            ds[i]


def _file_url_index(tmp_path):
    """An index of a file:// prefix (what ``dsclean index file:///...`` records): four good files."""
    root = tmp_path / "set"
    for key, (w, h) in SIZES.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(synth.jpeg(w, h, seed=1) if key.endswith(".jpg") else synth.png(w, h, seed=1))
    index = str(tmp_path / "u.arrow")
    build_bucket_index(f"file://{root}", index)
    return index, root


def test_a_fifo_in_a_file_url_root_is_refused_not_waited_on(tmp_path):
    import os
    import signal

    index, root = _file_url_index(tmp_path)
    ds = IndexedDataset(index)
    victim = ds.path(1)
    os.unlink(root / victim)
    os.mkfifo(root / victim)  # opening it for reading would block until a writer comes: forever

    class Hung(BaseException):  # not an Exception: no retry loop or error wrapper may swallow it
        pass

    def hung(*_):
        raise Hung("the read of a FIFO blocked")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        for read in (ds.raw, ds.__getitem__):
            with pytest.raises(SampleError) as err:
                read(1)
            assert victim in str(err.value) and "not a regular file" in str(err.value)
        guarded = IndexedDataset(index, on_error="skip")
        assert guarded[1] is None and guarded[0] is not None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_symlink_out_of_a_file_url_root_is_refused_as_for_a_local_root(tmp_path):
    import os

    from dsclean.data.errors import UnsafePathError
    from dsclean.index.build import build_index

    index, root = _file_url_index(tmp_path)
    local_index = str(tmp_path / "l.arrow")
    build_index(str(root), local_index)
    ds, local = IndexedDataset(index), IndexedDataset(local_index)
    victim = ds.path(2)
    outside = tmp_path / "outside.bin"
    outside.write_bytes((root / victim).read_bytes())  # same size: only the link check can refuse it
    os.unlink(root / victim)
    os.symlink(outside, root / victim)
    for dataset in (ds, local, IndexedDataset(index, on_error="skip")):
        j = [dataset.path(i) for i in range(len(dataset))].index(victim)
        with pytest.raises(UnsafePathError, match="outside the root"):
            dataset[j]
    with pytest.raises(UnsafePathError):
        ds.raw(2)
    assert IndexedDataset(index, follow_symlinks="all").raw(2) == outside.read_bytes()  # the caller's choice


def test_a_bogus_storage_option_is_a_user_error_not_every_sample_skipped(bucket_index, bucket, s3_endpoint):
    opts = {"endpoint_url": s3_endpoint, "bogus": 1, "secret": "BOGUS-SECRET-77"}
    with pytest.raises(UserError) as err:
        IndexedDataset(bucket_index, storage_options=opts, on_error="skip")
    text = str(err.value)
    assert bucket_index in text and f"s3://{bucket}/data" in text and "bogus" in text
    assert "BOGUS-SECRET-77" not in text


def test_access_denied_on_the_first_object_is_a_user_error(bucket_index, bucket, s3_endpoint):
    from support.s3server import FaultProxy

    with FaultProxy(s3_endpoint, failures=1000, status=403, heads=True) as proxy:
        with pytest.raises(UserError, match="access denied") as err:
            IndexedDataset(bucket_index, storage_options={"endpoint_url": proxy.url}, on_error="skip")
    assert bucket_index in str(err.value) and f"s3://{bucket}/data" in str(err.value)


def test_no_credentials_is_a_user_error(bucket_index, s3_endpoint, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup
    with pytest.raises(UserError, match="credentials") as err:
        IndexedDataset(bucket_index, storage_options={"endpoint_url": s3_endpoint}, on_error="skip")
    assert bucket_index in str(err.value)


def test_a_missing_first_object_is_left_to_its_sample(bucket_index, bucket, s3fs_direct, s3_endpoint):
    opts = {"endpoint_url": s3_endpoint}
    first = IndexedDataset(bucket_index, storage_options=opts).path(0)
    s3fs_direct.rm(f"{bucket}/data/{first}")
    ds = IndexedDataset(bucket_index, storage_options=opts, on_error="skip")  # a 404 is not the user's options
    assert ds[0] is None and ds[1] is not None


def test_raw_of_a_deleted_object_raises_a_sample_error_naming_the_key(bucket_index, bucket, s3fs_direct, s3_endpoint):
    ds = IndexedDataset(bucket_index, storage_options={"endpoint_url": s3_endpoint})
    gone = ds.path(3)
    s3fs_direct.rm(f"{bucket}/data/{gone}")
    with pytest.raises(SampleError) as err:
        ds.raw(3)
    assert gone in str(err.value) and "404" in str(err.value) and err.value.path == gone
