"""The shards are plain WebDataset tars: the real webdataset and wids libraries, tarfile and GNU tar read them."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile

import pytest

from dsclean import IndexedDataset
from dsclean.pack.packer import PackOptions, pack_shards

webdataset = pytest.importorskip("webdataset")
wids = pytest.importorskip("wids")


@pytest.fixture(scope="module")
def packed(media_index, tmp_path_factory):
    _, index = media_index
    out = tmp_path_factory.mktemp("interop") / "shards"
    s = pack_shards(index, str(out), PackOptions(samples_per_shard=5, shuffle=11))
    return out, s.shards


def _media(sample: dict) -> bytes:
    (ext,) = [k for k in sample if not k.startswith("__") and k not in ("cls", "json")]
    return sample[ext]


def test_webdataset_streams_the_same_bytes_and_labels_in_the_same_order(packed):
    out, n = packed
    urls = str(out / f"data-{{000000..{n - 1:06d}}}.tar")
    got = [(_media(s), int(s["cls"]), s["__key__"]) for s in webdataset.WebDataset(urls, shardshuffle=False)]
    ds = IndexedDataset(str(out))
    assert [(b, y) for b, y, _ in got] == [(ds.raw(i), int(ds.targets[i])) for i in range(len(ds))]
    assert len({k for _, _, k in got}) == len(ds)  # webdataset groups by key: one sample each


def test_webdataset_decodes_them_with_its_own_decoders(packed):
    out, n = packed
    urls = str(out / f"data-{{000000..{n - 1:06d}}}.tar")
    pipeline = webdataset.WebDataset(urls, shardshuffle=False).decode("pil")
    ds = IndexedDataset(str(out))
    for i, sample in enumerate(pipeline):
        meta = sample["json"]
        assert meta["path"] == ds.path(i) or "path_b64" in meta
        if "jpg" in sample or "png" in sample:
            img = sample.get("jpg") or sample.get("png")
            assert img.convert("RGB").size == ds[i][0].size


def test_wids_opens_the_shard_list(packed, tmp_path):
    out, n = packed
    ds = IndexedDataset(str(out))
    w = wids.ShardListDataset(str(out / "shardindex.json"), cache_dir=str(tmp_path / "wids-cache"), transformations=[])
    assert len(w) == len(ds)
    for i in (0, 3, len(ds) - 1):
        sample = w[i]
        (ext,) = [k for k in sample if k.startswith(".") and k not in (".cls", ".json")]
        assert sample[ext].read() == ds.raw(i)  # wids hands out file objects over its own mmap
        assert int(sample[".cls"].read()) == ds.targets[i]


def test_tarfile_and_gnu_tar_list_them(packed):
    out, n = packed
    shardlist = json.loads((out / "shardindex.json").read_text())["shardlist"]
    for entry in shardlist:
        with tarfile.open(out / entry["url"]) as t:
            names = t.getnames()
        assert len(names) == 3 * entry["nsamples"]
        if shutil.which("tar"):
            listed = subprocess.run(["tar", "-tf", str(out / entry["url"])], capture_output=True, text=True, check=True)
            assert listed.stdout.split() == names and not listed.stderr
