"""--manifest FILE replaces the listing: text, CSV with a key column, Parquet (S3 Inventory)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import synth

from dsclean.cli import main
from dsclean.errors import UserError
from dsclean.scanning.results import read_results
from dsclean.storage.scan import BucketScanOptions, scan_bucket


@pytest.fixture
def objects(bucket, s3fs_direct):
    s3fs_direct.pipe_file(f"{bucket}/set/a.png", synth.png(16, 16, seed=1))
    s3fs_direct.pipe_file(f"{bucket}/set/b.png", synth.truncate(synth.png(16, 16, seed=2), 0.5))
    s3fs_direct.pipe_file(f"{bucket}/set/not-listed.png", synth.png(16, 16, seed=3))
    return bucket


def _scan(bucket, endpoint, manifest, tmp_path):
    opts = BucketScanOptions(
        storage_options={"endpoint_url": endpoint}, jobs=1, manifest=str(manifest), report_dir=str(tmp_path / "r")
    )
    summary = scan_bucket(f"s3://{bucket}/set", opts)
    table = read_results(summary.results_path).to_pydict()
    return summary, dict(zip((os.fsdecode(p) for p in table["path"]), table["status"]))


def test_text_manifest_checks_only_its_keys(objects, s3_endpoint, tmp_path):
    m = tmp_path / "keys.txt"
    m.write_text(f"set/a.png\nset/b.png\n\nother/x.png\ns3://{objects}/set/a.png\n")
    summary, got = _scan(objects, s3_endpoint, m, tmp_path)
    assert summary.files == 3 and sorted(got) == ["a.png", "b.png"]  # a full URL under the prefix counts too
    assert "not-listed.png" not in got
    assert got["b.png"] == "bad"
    assert any("1 manifest keys are not under the scanned prefix" in n for n in summary.notes)
    assert any("1 manifest rows hold no usable key" in n for n in summary.notes)


def test_csv_manifest_with_key_and_size_columns(objects, s3_endpoint, tmp_path):
    m = tmp_path / "inv.csv"
    m.write_text("bucket,key,size\nb,set/b.png,999\nb,set%2Fa.png,\n")
    _, got = _scan(objects, s3_endpoint, m, tmp_path)
    assert got == {"b.png": "bad", "a.png": "ok"}  # the URL-encoded key (S3 Inventory's) decoded


def test_parquet_manifest_read_in_batches(objects, s3_endpoint, tmp_path, monkeypatch):
    from dsclean.storage import manifest

    monkeypatch.setattr(manifest, "BATCH_ROWS", 1)  # a batch a row: every batch boundary crossed
    m = tmp_path / "inv.parquet"
    pq.write_table(pa.table({"bucket": ["x", "x"], "key": ["set/a.png", "set/b.png"], "size": [None, None]}), m)
    _, got = _scan(objects, s3_endpoint, m, tmp_path)
    assert got == {"a.png": "ok", "b.png": "bad"}


def test_manifest_without_a_key_column_is_a_clear_error(objects, s3_endpoint, tmp_path):
    m = tmp_path / "bad.csv"
    m.write_text("name,size\nset/a.png,1\n")
    with pytest.raises(UserError, match="bad.csv.*'key' column"):
        _scan(objects, s3_endpoint, m, tmp_path)


def test_manifest_naming_a_missing_object_gives_vanished(objects, s3_endpoint, tmp_path, capsys):
    m = tmp_path / "keys.txt"
    m.write_text("set/gone.png\n")
    code = main(
        ["scan", f"s3://{objects}/set", "--manifest", str(m), "--storage-option", f"endpoint_url={s3_endpoint}"]
        + ["-j", "1", "--report", str(tmp_path / "r"), "--check", "-q"]
    )
    assert code == 1
    _, got = _scan(objects, s3_endpoint, m, tmp_path)
    assert got == {"gone.png": "bad"}
    from dsclean.scanning.results import read_problems

    (p,) = read_problems(str(tmp_path / "r"))
    assert p["reason"] == "vanished" and "gone.png" in p["detail"]


def test_a_directory_as_manifest_is_refused(objects, s3_endpoint, tmp_path):
    with pytest.raises(UserError, match="manifest"):
        _scan(objects, s3_endpoint, tmp_path, tmp_path)


def test_an_overlong_line_is_a_bad_row_and_the_next_lines_are_read(objects, s3_endpoint, tmp_path):
    m = tmp_path / "keys.txt"
    m.write_text("set/a.png\n" + "x" * 200_000 + "\nset/b.png\n")
    summary, got = _scan(objects, s3_endpoint, m, tmp_path)
    assert got == {"a.png": "ok", "b.png": "bad"}  # the lines after it still read
    assert any("1 manifest rows hold no usable key" in n for n in summary.notes)
