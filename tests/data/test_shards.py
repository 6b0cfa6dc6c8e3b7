"""IndexedDataset over a packed shard set: same samples as the folder index, read from per-process maps."""

from __future__ import annotations

import io
import os
import pickle
import shutil

import numpy as np
import pytest
import torch
from support.packing import make_indexed
from support.transforms import to_array
from torch.utils.data import DataLoader

from dsclean import IndexedDataset
from dsclean.data.dataset import SampleError
from dsclean.errors import UserError
from dsclean.pack.packer import PackOptions, pack_shards


@pytest.fixture(scope="module")
def sets(media_index, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    _, index = media_index
    pack_shards(index, str(tmp / "shards"), PackOptions(samples_per_shard=4, shuffle=3))
    return index, str(tmp / "shards")


def _same_sample(a, b) -> bool:
    if isinstance(a, tuple):  # audio: (tensor, rate)
        return torch.equal(a[0], b[0]) and a[1] == b[1]
    return np.array_equal(np.asarray(a), np.asarray(b))


def test_packed_set_gives_the_same_samples_labels_and_paths(sets):
    index, shards = sets
    folder, packed = IndexedDataset(index), IndexedDataset(shards)
    assert packed.packed and packed.root is None and len(packed) == len(folder) == 18
    assert packed.classes == folder.classes and packed.class_to_idx == folder.class_to_idx
    by_path = {folder.path(i): i for i in range(len(folder))}
    for j in range(len(packed)):
        i = by_path[packed.path(j)]  # the original relative path (shuffled order)
        (xa, ya), (xb, yb) = folder[i], packed[j]
        assert ya == yb == folder.targets[i] == packed.targets[j]
        assert _same_sample(xa, xb) and packed.raw(j) == folder.raw(i)
    assert isinstance(packed[-1], tuple) and packed.path(-1) == packed.path(len(packed) - 1)
    batch = packed.__getitems__([0, 3, -1])
    assert [y for _, y in batch] == [packed[0][1], packed[3][1], packed[-1][1]]
    with pytest.raises(IndexError):
        packed[len(packed)]


def test_custom_loader_gets_a_binary_file_object_and_transforms_apply(sets):
    _, shards = sets
    seen = []

    def loader(f):
        seen.append(isinstance(f, io.BufferedIOBase) or isinstance(f, io.BytesIO))
        return f.read()

    ds = IndexedDataset(shards, loader=loader, transform=len, target_transform=lambda y: y + 100)
    x, y = ds[2]
    assert seen == [True] and x == len(ds.raw(2)) and y == int(ds.targets[2]) + 100


def test_root_is_refused_and_resolution_errors_are_clear(sets, tmp_path):
    _, shards = sets
    with pytest.raises(UserError, match="root= does not apply"):
        IndexedDataset(shards, root="/somewhere")
    with pytest.raises(UserError):
        IndexedDataset(str(tmp_path))  # an empty folder is no index and no packed set


def test_the_set_is_relocatable_and_pickles_small(sets, tmp_path):
    _, shards = sets
    moved = tmp_path / "elsewhere" / "train"
    shutil.copytree(shards, moved)
    a, b = IndexedDataset(shards), IndexedDataset(str(moved))
    assert [b.raw(i) for i in range(len(b))] == [a.raw(i) for i in range(len(a))]
    assert len(pickle.dumps(b)) < 400
    c = pickle.loads(pickle.dumps(b))
    assert c.raw(5) == a.raw(5)


def test_open_maps_are_bounded(sets):
    _, shards = sets
    ds = IndexedDataset(shards, max_open_shards=2)
    for i in range(len(ds)):
        ds.raw(i)
        assert ds._packed_set.open_maps <= 2
    fds = len(os.listdir("/proc/self/fd"))
    for i in range(len(ds)):
        ds.raw(i)
    assert len(os.listdir("/proc/self/fd")) == fds


def test_a_damaged_shard_raises_or_is_skipped(sets, tmp_path):
    _, shards = sets
    broken = tmp_path / "broken"
    shutil.copytree(shards, broken)
    with open(broken / "data-000001.tar", "r+b") as f:
        f.truncate(1024)
    ds = IndexedDataset(str(broken))
    with pytest.raises(SampleError, match="the shard changed"):
        ds[4]
    assert IndexedDataset(str(broken), on_error="skip")[4] is None
    assert ds[0] is not None  # other shards still read


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_read_the_shards(sets, context):
    index, shards = sets
    folder = IndexedDataset(index, transform=to_array)
    packed = IndexedDataset(shards, transform=to_array)
    images = [j for j in range(len(packed)) if not packed.path(j).endswith((".wav", ".flac"))]
    subset = torch.utils.data.Subset(packed, images)
    got = [(x, int(y)) for x, y in DataLoader(subset, batch_size=None, num_workers=2, multiprocessing_context=context)]
    by_path = {folder.path(i): i for i in range(len(folder))}
    for (x, y), j in zip(got, images):
        want_x, want_y = folder[by_path[packed.path(j)]]
        assert np.array_equal(x, want_x) and y == want_y


def test_an_unfinished_pack_gets_one_message_from_every_command(tmp_path, capsys):
    """A shard folder whose pack was killed before publishing (pack.json and shards, no shard list nor packed
    index): verify, info, probe and IndexedDataset all say it is an unfinished pack and how to finish it."""
    from dsclean.cli import main

    _, index = make_indexed(tmp_path)
    out = tmp_path / "shards"
    pack_shards(index, str(out), PackOptions(samples_per_shard=4))
    for name in ("index.arrow", "shardindex.json"):
        os.unlink(out / name)
    want = (
        f"{out}: an unfinished pack (no shardindex.json or index.arrow yet): run the same dsclean pack "
        "command again to finish it"
    )
    with pytest.raises(UserError) as exc:
        IndexedDataset(str(out))
    assert str(exc.value) == want
    for args in (["verify", str(out)], ["info", str(out)], ["probe", str(out), "--num-workers", "0", "--batches", "1"]):
        assert main(args) == 2, args
        assert capsys.readouterr().err.strip().endswith(f"error: {want}"), args
    pack_shards(index, str(out), PackOptions(samples_per_shard=4))  # as the message says: finished
    assert len(IndexedDataset(str(out))) == 18 and main(["info", str(out)]) == 0
