"""Parquet shards with image bytes (a real Hugging Face ``datasets`` Image feature saved to Parquet, and a
binary column named with --column): every row checked and named by shard and row, bad rows deny-listed."""

from __future__ import annotations

import os
import subprocess
import sys

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from support import synth

from dsclean import denylist
from dsclean.shardsets.detect import detect
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set, verify_shard_set

FAST = dict(jobs=1, backend="threads")


def hf_parquet(folder, files=2, rows=10, bad=((1, 4), (1, 7))) -> None:
    """``files`` Parquet files of a datasets.Dataset with an Image feature; rows in ``bad`` are damaged."""
    os.makedirs(folder, exist_ok=True)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int32")})
    for n in range(files):
        images = []
        for r in range(rows):
            data = synth.jpeg(32, 32, seed=n * 100 + r)
            if (n, r) == bad[0]:
                data = synth.truncate(data, 0.5)
            elif (n, r) in bad:
                data = b"<!DOCTYPE html><html>gone</html>"
            images.append({"bytes": data, "path": f"img{r}.jpg"})
        ds = datasets.Dataset.from_dict({"image": images, "label": list(range(rows))}, features=features)
        ds.to_parquet(os.path.join(folder, f"train-{n:05d}-of-{files:05d}.parquet"), batch_size=3)


def test_hf_image_parquet_rows_checked_and_named(tmp_path):
    folder = tmp_path / "hf"
    hf_parquet(folder)
    assert pq.ParquetFile(folder / "train-00000-of-00002.parquet").num_row_groups > 1  # batches cross row groups
    s = scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), **FAST))
    assert (s.kind, s.shards, s.samples, s.checked) == ("parquet", 2, 20, 20)
    assert s.bad_reasons == {"truncated": 1, "not_media": 1}
    table = pq.read_table(s.results_path)
    bad = sorted((r["shard"], r["row"], r["key"], r["member"]) for r in table.to_pylist() if r["status"] == "bad")
    shard = "train-00001-of-00002.parquet"
    assert bad == [(shard, 4, "4", "row 4:image"), (shard, 7, "7", "row 7:image")]
    dl = denylist.read_denylist(folder / "denylist.jsonl")
    assert sorted((e["shard"], e["row"]) for e in dl.entries) == [(shard, 4), (shard, 7)]
    # the recipe of docs/guides/foreign-shards.md: the deny-list's rows left out of the dataset
    denied = {e["row"] for e in dl.entries if e["shard"] == shard}
    ds = datasets.load_dataset("parquet", data_files=str(folder / shard), split="train")
    kept = ds.select([i for i in range(len(ds)) if i not in denied])  # select: no image decoded
    assert len(kept) == 8 and 4 not in kept["label"] and 7 not in kept["label"]
    assert verify_shard_set([str(folder)], ShardScanOptions(**FAST)).ok


def test_binary_column_named_with_column_and_errors(tmp_path):
    folder = tmp_path / "pq"
    folder.mkdir()
    blobs = [synth.png(16, 16, seed=i) for i in range(5)] + [b""]
    pq.write_table(pa.table({"id": list(range(6)), "png": pa.array(blobs, pa.binary())}), folder / "a.parquet")
    assert detect([str(folder)]).kind == "parquet"
    v = verify_shard_set([str(folder)], ShardScanOptions(column="png", **FAST))
    assert v.checked == 6 and v.bad_reasons == {"empty": 1}
    assert v.per_shard["a.parquet"]["problems"][0]["row"] == 5
    r = subprocess.run(
        [sys.executable, "-m", "dsclean", "verify", str(folder)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "a.parquet" in r.stderr and "--column" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "dsclean", "verify", str(folder), "--column", "id"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "'id' is int64, not bytes" in r.stderr


def test_a_damaged_parquet_file_is_a_broken_shard(tmp_path):
    folder = tmp_path / "hf"
    hf_parquet(folder, files=1, bad=((9, 9), (9, 9)))
    path = folder / "train-00000-of-00001.parquet"
    path.write_bytes(path.read_bytes()[:-100])  # the footer gone
    v = verify_shard_set([str(folder)], ShardScanOptions(**FAST))
    assert v.problems == {"broken_shard": 1} and v.listed[0]["shard"] == path.name


def test_audio_struct_column_as_hf_audio_stores_it(tmp_path):
    """An Audio feature's storage (struct of bytes and path; datasets needs torchcodec to write one, so the
    table is written with pyarrow in that layout): each clip checked by the audio checker."""
    wav = synth.encode_audio(synth.tone(0.2), 16_000, "wav")
    flac = synth.encode_audio(synth.tone(0.2, seed=1), 16_000, "flac")
    clips = [{"bytes": wav, "path": "a.wav"}, {"bytes": wav[:200], "path": "b.wav"}, {"bytes": flac, "path": None}]
    kind = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    pq.write_table(pa.table({"audio": pa.array(clips, kind)}), tmp_path / "clips.parquet")
    v = verify_shard_set([str(tmp_path / "clips.parquet")], ShardScanOptions(**FAST))
    assert v.checked == 3 and v.bad_reasons == {"truncated": 1}
    assert v.per_shard["clips.parquet"]["problems"][0]["row"] == 1
