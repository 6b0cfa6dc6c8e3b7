"""Issue 10 (4): IndexedDataset as a drop-in for torchvision's ImageFolder, and from_folder."""

from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from support import synth
from support.files import write
from support.transforms import to_array
from torch.utils.data import DataLoader

from dsclean import IndexedDataset, collate_skip_none, locations
from dsclean.data.dataset import Samples, Targets
from dsclean.errors import UserError
from dsclean.index.build import build_index
from dsclean.index.folder import index_folder


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "data"
    for i, rel in enumerate(["cats/0.png", "cats/1.png", "cats/sub/2.png", "dogs/3.png", "dogs/4.png"]):
        write(r, rel, synth.png(4, 4, seed=i))
    return str(r)


@pytest.fixture
def index(root, tmp_path):
    out = str(tmp_path / "i.arrow")
    build_index(root, out)
    return out


def test_torchvision_argument_order(index):
    ds = IndexedDataset(index, to_array)  # ImageFolder(root, transform)
    assert isinstance(ds[0][0], np.ndarray)
    ds = IndexedDataset(index, None, lambda y: y + 10, lambda p: os.path.basename(p))  # target_transform, loader
    assert ds[3] == ("3.png", 11)


def test_imagefolder_attributes(index, root):
    ds = IndexedDataset(index)
    assert ds.classes == ["cats", "dogs"] and ds.class_to_idx == {"cats": 0, "dogs": 1}
    assert ".png" in ds.extensions and ".jpg" in ds.extensions
    expected = [
        (os.path.join(root, p), label)
        for p, label in [
            ("cats/0.png", 0),
            ("cats/1.png", 0),
            ("cats/sub/2.png", 0),
            ("dogs/3.png", 1),
            ("dogs/4.png", 1),
        ]
    ]
    for name in ("samples", "imgs"):
        seq = getattr(ds, name)
        assert isinstance(seq, Samples) and not isinstance(seq, list)
        assert len(seq) == 5 and list(seq) == expected and seq[-1] == expected[-1] and seq[1:3] == expected[1:3]
        assert vars(seq) == {"_ds": ds}  # nothing materialised: items are made when asked for
        with pytest.raises(TypeError):
            seq[0] = ("x", 0)
    with pytest.raises(AttributeError):
        ds.samples = []


def test_targets_behave_like_a_list_of_int64(index):
    ds = IndexedDataset(index)
    t = ds.targets
    assert isinstance(t, np.ndarray) and isinstance(t, Targets)
    assert ds._mapped().labels.dtype == np.int8 and t.dtype == np.int64  # narrow on disk, int64 for torch
    assert torch.tensor(t).dtype == torch.int64
    weights = torch.tensor([0.5, 2.0])
    assert weights[torch.tensor(t)].tolist() == [0.5] * 3 + [2.0] * 2  # indexing needs int64 (int8 is refused)
    assert torch.nn.functional.cross_entropy(torch.zeros(5, 2), torch.as_tensor(t)).item() > 0
    assert len(t) == 5 and t[0] == 0 and type(t[0]) is int and type(t[-1]) is int
    assert list(t) == [0, 0, 0, 1, 1] and all(type(x) is int for x in t)
    assert np.bincount(t).tolist() == [3, 2]
    assert collections.Counter(t) == {0: 3, 1: 2} and t.count(1) == 2 and t.index(1) == 3
    assert torch.tensor(t).tolist() == [0, 0, 0, 1, 1]  # torch.tensor(dataset.targets), as training code does
    assert bool(t) and type(t + 1) is np.ndarray and (t == 1).sum() == 2


def test_first_argument_resolution(root, tmp_path, index):
    with pytest.raises(UserError, match=r"not a dsclean index.*IndexedDataset.from_folder"):
        IndexedDataset(root)
    with pytest.raises(UserError, match="index not found"):
        IndexedDataset(str(tmp_path / "missing.arrow"))
    npy = str(tmp_path / "i.npy")
    build_index(root, npy)
    assert len(IndexedDataset(npy)) == len(IndexedDataset(__import__("pathlib").Path(index))) == 5


def test_from_folder_indexes_into_the_state_folder_and_reuses(root, tmp_path):
    before = sorted(os.walk(root))
    write(root, "dogs/broken.png", synth.truncate(synth.png(16, 16), 0.5))
    ds = IndexedDataset.from_folder(root, to_array)
    assert len(ds) == 5 and "dogs/broken.png" not in [ds.path(i) for i in range(len(ds))]  # checked, left out
    assert ds.index.startswith(locations.root_state_dir(root) + os.sep)
    os.remove(os.path.join(root, "dogs/broken.png"))
    assert sorted(os.walk(root)) == before  # nothing written into the dataset
    path, built = index_folder(root)
    assert built  # the tree changed (broken.png is gone)
    assert index_folder(root) == (path, False)  # unchanged: reused
    write(root, "birds/5.png", synth.png(4, 4, seed=5))  # a new class
    assert index_folder(root)[1] is True
    ds = IndexedDataset.from_folder(root)
    assert ds.classes == ["birds", "cats", "dogs"] and len(ds) == 6


def test_from_folder_imagefolder_rule_follows_links_by_the_callers_choice(tmp_path):
    root = tmp_path / "farm"
    write(tmp_path, "store/x.png", synth.png(4, 4))
    root.mkdir()
    os.symlink(tmp_path / "store", root / "cls")
    ds = IndexedDataset.from_folder(str(root), files="imagefolder")
    assert ds.follow_symlinks == "all" and ds[0][1] == 0
    assert IndexedDataset(ds.index).follow_symlinks == "inside"  # the same index, opened plainly: not switched


def test_under_ddp_one_process_builds_and_the_others_wait(root, tmp_path):
    for i in range(150):  # enough files that the build takes a moment
        write(root, f"many/{i}.png", synth.png(16, 16, seed=100 + i))
    code = textwrap.dedent(f"""
        from dsclean.index.folder import index_folder
        path, built = index_folder({root!r}, jobs=1)
        print(path, built)
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    lines = [o.split() for o, _ in outs]
    assert len({path for path, _ in lines}) == 1
    assert sorted(built for _, built in lines) == ["False", "False", "True"]
    waited = [e for _, e in outs if "waiting for another process" in e]
    assert all("indexing" in e for e in waited)


class _Flaky(torch.utils.data.Dataset):
    """Samples 0..7 where the ones in ``bad`` fail (None, as IndexedDataset(on_error="skip") returns)."""

    def __init__(self, bad):
        self.bad = set(bad)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return None if i in self.bad else (torch.full((2, 3), float(i)), i)


@pytest.mark.parametrize("workers", [0, 2])
def test_all_bad_batch_survives_a_plain_loop(workers):
    # batches of 2: [0 1] all bad (before any good batch), [2 3] good, [4 5] all bad (after one), [6 7] half
    loader = DataLoader(_Flaky({0, 1, 4, 5, 7}), batch_size=2, num_workers=workers, collate_fn=collate_skip_none)
    seen = []
    for x, y in loader:  # never None, always a pair
        assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and len(x) == len(y)
        seen.append((tuple(x.shape), y.tolist()))
    assert [labels for _, labels in seen] == [[], [2, 3], [], [6]]
    assert seen[1][0] == (2, 2, 3) and seen[3][0] == (1, 2, 3)
    if workers == 0:  # one process: the empty batch after a good one has its structure
        assert seen[2][0] == (0, 2, 3)


def test_skipped_dataset_and_empty_batches_with_real_files(index, root):
    for rel in ("cats/0.png", "cats/1.png"):
        with open(os.path.join(root, rel), "r+b") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)  # same size, broken content
    ds = IndexedDataset(index, to_array, on_error="skip")
    batches = [(x.shape[0], y.tolist()) for x, y in DataLoader(ds, batch_size=2, collate_fn=collate_skip_none)]
    assert batches == [(0, []), (2, [0, 1]), (1, [1])]
    assert pickle.loads(pickle.dumps(ds)).follow_symlinks == "inside"
