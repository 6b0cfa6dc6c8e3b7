"""IndexedDataset: sequence protocol, DataLoader (fork and spawn), errors, safety."""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import shutil

import numpy as np
import pyarrow as pa
import pytest
import soundfile as sf
import torch
from PIL import Image
from support.transforms import to_array
from torch.utils.data import DataLoader

from dsclean import IndexedDataset, collate_skip_none
from dsclean.data.dataset import SampleError, UnsafePathError
from dsclean.errors import UserError
from dsclean.index.build import build_index

# ----------------------------------------------------------------------------- fixtures


def _png(color, size=(4, 4)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def _put(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture
def images(tmp_path):
    """6 images in 2 classes (one nested), all 4x4 so they collate."""
    root = str(tmp_path / "data")
    for i, rel in enumerate(["cats/0.png", "cats/1.png", "cats/sub/2.png", "dogs/3.png", "dogs/4.png", "dogs/5.png"]):
        _put(os.path.join(root, rel), _png((i * 40, 0, 0)))
    return root


@pytest.fixture(params=["arrow", "npy"])
def index(request, images, tmp_path):
    out = str(tmp_path / f"index.{request.param}")
    build_index(images, out)
    return out


def write_raw_index(path: str, root: str, rels: list[bytes], sizes: list[int]) -> str:
    """A hand-crafted index (what an attacker or a bug could produce): paths taken as given."""
    meta = {
        "format_version": 1,
        "dsclean_version": "x",
        "classes": ["c"],
        "kinds": ["image", "audio"],
        "labels": "folder",
        "root": root,
        "created": "2020-01-01T00:00:00+00:00",
        "rows": len(rels),
    }
    n = len(rels)
    table = pa.table(
        {
            "path": pa.array(rels, pa.binary()),
            "label": pa.array([0] * n, pa.int64()),
            "kind": pa.array([0] * n, pa.int8()),
            "size": pa.array(sizes, pa.int64()),
            "mtime_ns": pa.array([0] * n, pa.int64()),
        }
    ).replace_schema_metadata({b"dsclean": json.dumps(meta).encode()})
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return path


# ----------------------------------------------------------------------------- sequence protocol


def test_sequence_protocol(index, images):
    ds = IndexedDataset(index)
    assert len(ds) == 6
    assert ds.classes == ["cats", "dogs"] and ds.class_to_idx == {"cats": 0, "dogs": 1}
    assert ds.root == os.path.abspath(images)
    assert [ds.path(i) for i in range(6)] == [
        "cats/0.png",
        "cats/1.png",
        "cats/sub/2.png",
        "dogs/3.png",
        "dogs/4.png",
        "dogs/5.png",
    ]
    img, label = ds[-1]
    assert isinstance(img, Image.Image) and img.mode == "RGB" and label == 1
    assert np.array(img)[0, 0, 0] == 5 * 40
    assert ds.path(-6) == "cats/0.png"
    assert ds[np.int64(2)][1] == 0
    for bad in (6, -7, 100):
        with pytest.raises(IndexError):
            ds[bad]
    with pytest.raises(IndexError):
        ds.path(6)


def test_targets_is_an_int64_copy(index):
    ds = IndexedDataset(index)
    t = ds.targets
    assert isinstance(t, np.ndarray) and not isinstance(t, list)
    assert ds._mapped().labels.dtype == np.int8  # the narrowest type holding the labels, on disk
    assert t.tolist() == [0, 0, 0, 1, 1, 1] and t.dtype == np.int64
    assert ds.targets is t  # made once, like ImageFolder's one list (not a copy per access)
    t[0] = 5  # a copy of the index's labels: changing it changes nothing in the index
    assert ds[0][1] == 0 and IndexedDataset(index).targets[0] == 0
    assert "_targets" not in ds.__getstate__()  # never pickled to spawned workers


def test_constructor_validates_the_index_once(index):
    ds = IndexedDataset(index)
    assert ds._idx is not None and len(ds) == 6  # mapped and validated by the process that opens it
    assert ds._trusted == ds._idx.identity  # workers trust this identity instead of validating again


def test_pickle_is_small_and_remaps(index):
    ds = IndexedDataset(index)
    ds[0]  # mapped in this process: the mapping must not travel
    blob = pickle.dumps(ds)
    assert len(blob) < 1024
    clone = pickle.loads(blob)
    assert clone._idx is None
    assert len(clone) == 6 and clone.path(3) == "dogs/3.png"


def test_reopens_after_fork(index, monkeypatch):
    ds = IndexedDataset(index)
    first = ds._mapped()
    assert ds._mapped() is first
    pid = os.fork()
    if pid == 0:  # a forked child maps the index again (its own mapping, not the parent's objects)
        os._exit(0 if ds._mapped() is not first and ds.path(3) == "dogs/3.png" else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ds._mapped() is first


def test_getitems_batch(index):
    ds = IndexedDataset(index, transform=to_array, target_transform=lambda y: y + 10)
    batch = ds.__getitems__([5, 0, -2])
    assert [lab for _, lab in batch] == [11, 10, 11]
    for (arr, lab), i in zip(batch, [5, 0, -2]):
        np.testing.assert_array_equal(arr, ds[i][0])
    with pytest.raises(IndexError):
        ds.__getitems__([0, 6])


def test_custom_loader_and_root_override(index, images, tmp_path):
    moved = str(tmp_path / "moved")
    shutil.copytree(images, moved)
    shutil.rmtree(images)
    with pytest.raises(UserError, match="root="):
        IndexedDataset(index)
    ds = IndexedDataset(index, root=moved, loader=lambda p: os.path.relpath(p, moved))
    assert ds[3] == ("dogs/3.png", 1)


def test_audio_sample(tmp_path):
    root = str(tmp_path / "sounds")
    os.makedirs(os.path.join(root, "speech"))
    data = np.linspace(-0.5, 0.5, 300, dtype=np.float32).reshape(150, 2)
    sf.write(os.path.join(root, "speech", "a.wav"), data, 16000, subtype="FLOAT")
    out = str(tmp_path / "a.arrow")
    build_index(root, out)
    (wave, rate), label = IndexedDataset(out)[0]
    assert isinstance(wave, torch.Tensor) and wave.dtype == torch.float32
    assert wave.shape == (2, 150) and rate == 16000 and label == 0
    np.testing.assert_allclose(wave.numpy(), data.T)


def test_non_utf8_path_loads(tmp_path):
    root = str(tmp_path / "data")
    _put(os.fsdecode(os.path.join(os.fsencode(root), b"cats/caf\xe9.png")), _png((1, 2, 3)))
    out = str(tmp_path / "i.npy")
    build_index(root, out)
    ds = IndexedDataset(out)
    assert os.fsencode(ds.path(0)) == b"cats/caf\xe9.png"
    assert np.array(ds[0][0])[0, 0].tolist() == [1, 2, 3]


# ----------------------------------------------------------------------------- DataLoader


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_two_workers(index, context):
    ds = IndexedDataset(index, transform=to_array)
    ds.targets  # map in the parent first: the fork child must re-open its own mapping
    loader = DataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context=context)
    images, labels = zip(*loader)
    assert torch.cat(labels).tolist() == ds.targets.tolist()
    assert torch.cat(images).shape == (6, 4, 4, 3)
    assert torch.cat(images)[:, 0, 0, 0].tolist() == [0, 40, 80, 120, 160, 200]


def _corrupt_same_size(root: str, rel: str) -> None:
    path = os.path.join(root, rel)
    size = os.path.getsize(path)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + b"\0" * (size - 8))


def test_sample_error_survives_worker(index, images):
    _corrupt_same_size(images, "dogs/4.png")
    loader = DataLoader(IndexedDataset(index, transform=to_array), batch_size=3, num_workers=2)
    batches = iter(loader)
    try:
        with pytest.raises(SampleError, match=r"sample 4 \(dogs/4.png under .*data\): .*Error"):
            list(batches)
    finally:
        # Shut the workers down now: left to the garbage collector (the traceback holds the
        # iterator in a cycle) torch's teardown waits out a 5 s join timeout per worker.
        batches._shutdown_workers()


def test_sample_error_message_and_pickle(index, images):
    _corrupt_same_size(images, "cats/1.png")
    with pytest.raises(SampleError) as info:
        IndexedDataset(index)[1]
    err = info.value
    assert str(err).startswith(f"sample 1 (cats/1.png under {os.path.abspath(images)}): ")
    assert (err.index, err.path) == (1, "cats/1.png")
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.index == 1
    assert type(err)(str(err)).args == err.args  # DataLoader re-raises as type(exc)(message)


def test_skip_and_collate(index, images, caplog):
    _corrupt_same_size(images, "cats/1.png")
    os.remove(os.path.join(images, "dogs/3.png"))
    ds = IndexedDataset(index, transform=to_array, on_error="skip")
    with caplog.at_level(logging.WARNING, logger="dsclean"):
        assert ds[1] is None and ds[1] is None and ds[3] is None
    skips = [r for r in caplog.records if "failed (skip)" in r.getMessage()]
    assert len(skips) == 3 and {r.name for r in skips} == {"dsclean.guard"}  # the guard's warning, per failure
    assert "cats/1.png" in skips[0].getMessage()
    assert ds.guarded().slots.totals()[1] == 3  # and its count: one implementation of the policy
    loader = DataLoader(ds, batch_size=3, num_workers=0, collate_fn=collate_skip_none)
    images_, labels = zip(*loader)
    assert [len(b) for b in labels] == [2, 2]
    assert torch.cat(labels).tolist() == [0, 0, 1, 1]
    empty_x, empty_y = collate_skip_none([None, None])  # an all-bad batch: empty, same structure as the last
    assert empty_x.shape == (0, 4, 4, 3) and empty_y.shape == (0,) and empty_y.dtype == torch.int64


def test_stale_entry(index, images):
    with open(os.path.join(images, "cats/0.png"), "ab") as f:
        f.write(b"more")
    ds = IndexedDataset(index)
    with pytest.raises(SampleError, match=r"sample 0 \(cats/0.png .*stale"):
        ds[0]
    assert IndexedDataset(index, on_error="skip")[0] is None


def test_missing_file(index, images):
    os.remove(os.path.join(images, "dogs/5.png"))
    with pytest.raises(SampleError, match=r"sample 5 \(dogs/5.png .*FileNotFoundError"):
        IndexedDataset(index)[5]
    with pytest.raises(SampleError, match="FileNotFoundError"):
        IndexedDataset(index, check_stale=False)[5]


def test_transform_error_names_sample(index):
    def boom(_):
        raise RuntimeError("bad transform")

    with pytest.raises(SampleError, match=r"sample 2 \(cats/sub/2.png .*in transform: RuntimeError: bad transform"):
        IndexedDataset(index, transform=boom)[2]
    assert IndexedDataset(index, transform=boom, on_error="skip")[2] is None  # skipped as the guard skips


def test_on_error_is_the_guards_policy(index, images, tmp_path):
    import dsclean
    from dsclean.data.guard import replacement_index

    _corrupt_same_size(images, "cats/1.png")
    ds = IndexedDataset(index, transform=to_array, on_error="replace")
    n = len(ds)
    j = replacement_index(0, 0, 1, 0, n)
    assert ds[1][1] == ds[j][1] and (ds[1][0] == ds[j][0]).all()  # the guard's deterministic replacement
    assert [s is None for s in IndexedDataset(index, on_error="skip").__getitems__([0, 1, 2])] == [False, True, False]
    with pytest.raises(ValueError, match=r"already guarded .*dsclean.guard\(IndexedDataset\(index\), on_error='skip'"):
        dsclean.guard(IndexedDataset(index, on_error="skip"))
    # dsclean.DataLoader runs the dataset's own guard, with the loader's log
    skip = IndexedDataset(index, transform=to_array, on_error="skip")
    loader = dsclean.DataLoader(
        skip, batch_size=4, num_workers=2, log=tmp_path / "f.jsonl", multiprocessing_context="fork"
    )
    assert loader.dataset is skip.guarded() and loader.dataset.dataset.classes == skip.classes
    labels = torch.cat([y for _, y in loader]).tolist()
    assert len(labels) == n - 1
    (line,) = dsclean.read_failures(tmp_path / "f.jsonl").failures
    assert (line["index"], line["path"], line["action"]) == (1, "cats/1.png", "skip")


# ----------------------------------------------------------------------------- safety


def test_path_escape_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    secret = tmp_path / "secret.png"
    secret.write_bytes(_png((9, 9, 9)))
    size = secret.stat().st_size
    os.symlink(secret, root / "link.png")
    os.symlink(tmp_path, root / "linkdir")
    idx = write_raw_index(
        str(tmp_path / "evil.arrow"),
        str(root),
        [b"../secret.png", str(secret).encode(), b"link.png", b"ok/../../secret.png", b"linkdir/secret.png"],
        [size] * 5,
    )
    ds = IndexedDataset(idx, on_error="skip")  # refusals are never skipped
    for i, what in enumerate(
        [
            "escapes",
            "absolute",
            "resolves to .*secret.png, outside the root",
            "escapes",
            "folder resolves to .*, outside the root",
        ]
    ):
        with pytest.raises(UnsafePathError, match=rf"sample {i} .*refused.*{what}"):
            ds[i]
    with pytest.raises(UnsafePathError):
        ds.__getitems__([2])


def test_compressed_index_refused_at_open(images, tmp_path):
    good = str(tmp_path / "good.arrow")
    build_index(images, good)
    with pa.memory_map(good) as src:
        table = pa.ipc.open_file(src).read_all()
    bad = str(tmp_path / "lz4.arrow")
    with (
        pa.OSFile(bad, "wb") as sink,
        pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as w,
    ):
        w.write_table(table)
    with pytest.raises(UserError, match="lz4.arrow: the index is compressed"):
        IndexedDataset(bad)  # the constructor maps (and validates) the index


def test_symlink_inside_root_allowed(tmp_path):
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    target = root / "real" / "a.png"
    target.write_bytes(_png((1, 1, 1)))
    os.symlink(target, root / "alias.png")
    idx = write_raw_index(str(tmp_path / "ok.arrow"), str(root), [b"alias.png"], [target.stat().st_size])
    assert IndexedDataset(idx)[0][1] == 0


def test_bad_on_error_value(index):
    with pytest.raises(ValueError, match="on_error"):
        IndexedDataset(index, on_error="ignore")
