"""litdata chunk sets written by the real litdata.optimize: every image field checked, rows numbered as
litdata.StreamingDataset numbers them, hostile chunk tables refused."""

from __future__ import annotations

import json
import os
import struct
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # tests/support
from support import synth  # noqa: E402

from dsclean import denylist  # noqa: E402
from dsclean.shardsets.detect import detect  # noqa: E402
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set, verify_shard_set  # noqa: E402

litdata = pytest.importorskip("litdata")
FAST = dict(jobs=1, backend="threads")
BAD = {4: "truncated", 13: "not_media"}


def sample(i: int) -> dict:
    from PIL import Image

    data = synth.jpeg(96, 96, seed=i)
    if BAD.get(i) == "truncated":
        data = synth.truncate(data, 0.8)  # the header whole (Image.open reads it), the scan cut
    raw = b"<html>not an image</html>" if BAD.get(i) == "not_media" else synth.png(8, 8, seed=i)
    path = os.path.join(os.environ["LITDATA_TEST_SRC"], f"{i}.jpg")
    with open(path, "wb") as f:
        f.write(data)
    # a lazily opened JPEG: litdata's jpeg serializer stores the file's bytes as they are
    return {"image": Image.open(path), "raw": raw, "label": i}


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_set(tmp_path, monkeypatch):
    # litdata's workers unpickle `sample` by its module's name (tests.with_torchvision.test_litdata under pytest's
    # importlib mode): the repository root must be importable there, as it is not by default
    monkeypatch.syspath_prepend(REPO)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    src = tmp_path / "src"
    src.mkdir()
    monkeypatch.setenv("LITDATA_TEST_SRC", str(src))
    out = tmp_path / "ld"
    litdata.optimize(fn=sample, inputs=list(range(20)), output_dir=str(out), chunk_bytes="20KB", num_workers=1)
    return out


def test_litdata_fields_checked_rows_as_streaming_dataset_numbers_them(tmp_path, monkeypatch):
    out = write_set(tmp_path, monkeypatch)
    index = json.loads((out / "index.json").read_text())
    assert len(index["chunks"]) > 1 and index["config"]["data_format"] == ["jpeg", "bytes", "int"]
    assert detect([str(out)]).kind == "litdata"
    s = scan_shard_set([str(out)], ShardScanOptions(report_dir=str(tmp_path / "r"), **FAST))
    # every jpeg field, and the bytes fields that hold media (the HTML one does not sniff as media: not checked)
    assert s.samples == 20 and s.checked == 39 and s.bad_reasons == {"truncated": 1}
    rows = {e["row"] for e in denylist.read_denylist(out / "denylist.jsonl").entries}
    ds = litdata.StreamingDataset(input_dir=str(out))
    assert len(rows) == 1
    with pytest.raises(RuntimeError, match="truncated"):  # the denied row is the one litdata fails to decode
        ds[next(iter(rows))]
    s = scan_shard_set([str(out)], ShardScanOptions(report_dir=str(tmp_path / "r"), column="raw", **FAST))
    assert s.checked == 20 and s.bad_reasons == {"not_media": 1}
    rows = {e["row"] for e in denylist.read_denylist(out / "denylist.jsonl").entries}
    assert len(rows) == 2
    import torch.utils.data

    kept = torch.utils.data.Subset(ds, [i for i in range(len(ds)) if i not in rows])
    assert sorted(kept[i]["label"] for i in range(len(kept))) == [i for i in range(20) if i not in BAD]


def test_hostile_chunk_tables(tmp_path, monkeypatch):
    out = write_set(tmp_path, monkeypatch)
    index = json.loads((out / "index.json").read_text())
    first = out / index["chunks"][0]["filename"]
    data = bytearray(first.read_bytes())
    data[4:8] = struct.pack("<I", 0xFFFFFFF0)  # the first offset points far past the file
    first.write_bytes(bytes(data))
    index["chunks"][1]["filename"] = "../index.json"
    index["chunks"][2]["chunk_size"] = 10**9
    (out / "index.json").write_text(json.dumps(index))
    v = verify_shard_set([str(out)], ShardScanOptions(**FAST))
    assert not v.ok and v.problems == {"broken_shard": 3}
    details = " | ".join(p["detail"] for p in v.listed)
    assert "offset table does not cut" in details and "not a plain file name" in details
    assert "index.json says 1000000000" in details


def test_litdata_chunks_in_a_bucket_read_a_chunk_at_a_time(tmp_path, monkeypatch, request):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    bucket, fs, endpoint = (request.getfixturevalue(n) for n in ("bucket", "s3fs_direct", "s3_endpoint"))
    out = write_set(tmp_path, monkeypatch)
    for name in sorted(os.listdir(out)):
        fs.put_file(str(out / name), f"{bucket}/ld/{name}")
    url = f"s3://{bucket}/ld"
    opts = dict(storage_options={"endpoint_url": endpoint}, **FAST)
    assert detect([url], None, {"endpoint_url": endpoint}).kind == "litdata"
    remote = scan_shard_set([url], ShardScanOptions(report_dir=str(tmp_path / "b"), **opts))
    here = scan_shard_set([str(out)], ShardScanOptions(report_dir=str(tmp_path / "l"), dry_run=True, **FAST))
    import pyarrow.parquet as pq

    assert (remote.samples, remote.checked, remote.bad_reasons) == (20, 39, {"truncated": 1})
    assert pq.read_table(remote.results_path).sort_by("path").to_pylist() == (
        pq.read_table(here.results_path).sort_by("path").to_pylist()
    )
    assert not fs.exists(f"{bucket}/ld/denylist.jsonl")  # the deny-list stays beside the results, locally
    assert len(denylist.read_denylist(remote.denylist_path).entries) == 1
