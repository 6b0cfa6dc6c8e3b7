"""Keys are untrusted: from a listing or a manifest, a key that is no safe path below the prefix ('..',
absolute, empty parts, NUL, control characters, over 1,024 bytes) is counted and reported, never read and
never joined into a path; a manifest's rows and row groups are bounded before they size memory."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import synth
from support.s3server import FaultProxy

from dsclean.errors import UserError
from dsclean.scanning.results import read_results
from dsclean.storage import manifest
from dsclean.storage.fs import Store
from dsclean.storage.manifest import ManifestStats, iter_manifest
from dsclean.storage.scan import BucketScanOptions, scan_bucket

UNSAFE = ["../outside.png", "sub/../../outside.png", "sub//x.png", "./ok.png", "a\tb.png", "sub/x.png\x1b"]


def _paths(summary):
    return sorted(os.fsdecode(p) for p in read_results(summary.results_path).column("path").to_pylist())


@pytest.fixture
def local_set(tmp_path):
    """A ``file://`` root holding ok.png and sub/x.png, and a readable image just outside it."""
    root = tmp_path / "set"
    (root / "sub").mkdir(parents=True)
    (root / "ok.png").write_bytes(synth.png(8, 8, seed=1))
    (root / "sub" / "x.png").write_bytes(synth.png(8, 8, seed=2))
    (tmp_path / "outside.png").write_bytes(synth.png(8, 8, seed=3))
    return root


def test_unsafe_text_manifest_keys_are_counted_and_never_read(local_set, tmp_path):
    m = tmp_path / "keys.txt"
    lines = ["ok.png", *UNSAFE, f"{local_set}/../outside.png", "a\x00.png"]
    m.write_text("\n".join(lines) + "\n", encoding="utf-8")
    opts = BucketScanOptions(jobs=1, manifest=str(m), report_dir=str(tmp_path / "r"))
    summary = scan_bucket(f"file://{local_set}", opts)
    assert _paths(summary) == ["ok.png"]  # the image outside the root was never read
    note = next(n for n in summary.notes if "no safe path below the prefix" in n)
    assert note.startswith("8 keys") and "'../outside.png'" in note
    disc = json.load(open(tmp_path / "r" / "scan_summary.json"))["discovery"]
    assert disc["unsafe_keys"] == 8


def test_unsafe_parquet_and_csv_manifest_keys_are_counted(local_set, tmp_path):
    store = Store(f"file://{local_set}")
    par = tmp_path / "m.parquet"
    pq.write_table(pa.table({"key": ["ok.png", *UNSAFE]}), par)
    stats = ManifestStats()
    assert [o.rel for o in iter_manifest(str(par), store, stats=stats)] == ["ok.png"]
    assert stats.unsafe == len(UNSAFE)
    csv_path = tmp_path / "m.csv"
    csv_path.write_text("key\nok.png\n%2E%2E/outside.png\nsub%2F%2Fx.png\n")  # URL-encoded '..' and '//'
    stats = ManifestStats()
    assert [o.rel for o in iter_manifest(str(csv_path), store, stats=stats)] == ["ok.png"]
    assert stats.unsafe == 2


def test_an_over_long_key_is_unsafe(local_set, tmp_path):
    m = tmp_path / "keys.txt"
    m.write_text("ok.png\n" + "d/" * 400 + "é" * 120 + ".png\n", encoding="utf-8")  # 1,044 bytes, 924 characters
    stats = ManifestStats()
    assert [o.rel for o in iter_manifest(str(m), Store(f"file://{local_set}"), stats=stats)] == ["ok.png"]
    assert stats.unsafe == 1


def test_a_parquet_row_group_over_the_cap_is_refused_naming_the_file(local_set, tmp_path, monkeypatch):
    keys = [f"d/{i:06d}.png" for i in range(2000)]
    big, small = tmp_path / "one-group.parquet", tmp_path / "small-groups.parquet"
    pq.write_table(pa.table({"key": keys}), big)
    pq.write_table(pa.table({"key": keys}), small, row_group_size=100)
    monkeypatch.setattr(manifest, "MAX_ROW_GROUP_BYTES", 8000)  # 2,000 keys of 12 bytes: over; 100: under
    store = Store(f"file://{local_set}")
    with pytest.raises(UserError, match=r"one-group\.parquet: row group 0 holds .* smaller row groups"):
        next(iter_manifest(str(big), store, stats=ManifestStats()))
    assert sum(1 for _ in iter_manifest(str(small), store, stats=ManifestStats())) == 2000


def test_a_csv_row_of_absurd_length_is_an_error_naming_the_file_and_line(local_set, tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "MAX_CSV_ROW", 4096)
    store = Store(f"file://{local_set}")
    one_line = tmp_path / "long.csv"
    one_line.write_text("key,size\nok.png,1\n" + "x," * 5000 + "\n")  # 10,000 characters, 5,000 fields
    got = iter_manifest(str(one_line), store, stats=ManifestStats())
    assert next(got).rel == "ok.png"  # the rows before it are read
    with pytest.raises(UserError, match=r"long\.csv: line 3: a CSV row longer than 4,096"):
        next(got)
    many_lines = tmp_path / "quoted.csv"  # short lines, but one row: newlines inside quoted fields
    many_lines.write_text('key,note\nok.png,"' + "a\n" * 3000 + '"\n')
    with pytest.raises(UserError, match=r"quoted\.csv: line \d+: a CSV row longer"):
        list(iter_manifest(str(many_lines), store, stats=ManifestStats()))


def test_a_hostile_listing(bucket, s3fs_direct, s3_endpoint, tmp_path):
    """Folder markers, a key and its trailing-slash twin, a 0-byte object, keys with '..', '.', '//' or a
    control character, a 1,024-byte key: each is checked, skipped or counted, and nothing is lost."""
    put = {
        "ds/ok.png": synth.png(8, 8, seed=1),
        "ds/ok.png/": b"",  # a "folder" marker named like the object beside it
        "ds/folder/": b"",
        "ds/folder/in.png": synth.png(8, 8, seed=2),
        "ds/empty.png": b"",  # 0 bytes: bad, moved
        "ds/../up.png": synth.png(8, 8, seed=3),
        "ds/./dot.png": synth.png(8, 8, seed=4),
        "ds/a//b.png": synth.png(8, 8, seed=5),
        "ds/t\tab.png": synth.png(8, 8, seed=6),
        "ds/" + "k" * 1017 + ".png": b"not a png",  # 1,024 bytes: bad, but its quarantine key would be longer
    }
    for key, body in put.items():
        s3fs_direct.call_s3("put_object", Bucket=bucket, Key=key, Body=body)
    opts = BucketScanOptions(
        storage_options={"endpoint_url": s3_endpoint},
        jobs=1,
        quarantine=f"s3://{bucket}/quarantined",
        state_dir=str(tmp_path / "state"),
        report_dir=str(tmp_path / "r"),
    )
    summary = scan_bucket(f"s3://{bucket}/ds", opts)
    assert _paths(summary) == sorted(["ok.png", "folder/in.png", "empty.png", "k" * 1017 + ".png"])
    assert summary.quarantined == 1 and summary.move_failures == 1
    assert any("over S3's 1,024 bytes" in e for e in summary.move_errors)
    assert any(n.startswith("4 keys are no safe path") for n in summary.notes)
    page = s3fs_direct.call_s3("list_objects_v2", Bucket=bucket, Prefix="")
    after = {c["Key"] for c in page["Contents"]}
    assert after == (set(put) - {"ds/empty.png"}) | {"quarantined/empty.png"}  # nothing lost, one moved


def _listing_scan(bucket, proxy_url, tmp_path):
    opts = BucketScanOptions(storage_options={"endpoint_url": proxy_url}, jobs=1, report_dir=str(tmp_path / "r"))
    return scan_bucket(f"s3://{bucket}/ds", opts)


def test_a_listed_key_outside_the_prefix_asked_for_is_counted_not_read(bucket, s3fs_direct, s3_endpoint, tmp_path):
    for key in ("ds/a.png", "dt/c.png"):  # dt/: a sibling prefix the server should not have listed
        s3fs_direct.pipe_file(f"{bucket}/{key}", synth.png(8, 8, seed=len(key)))
    widen = lambda target: target.replace("prefix=ds%2F", "prefix=d")  # noqa: E731 - a server that lists too much
    with FaultProxy(s3_endpoint, rewrite_listing=widen) as proxy:
        summary = _listing_scan(bucket, proxy.url, tmp_path)
        assert not any(path.endswith("/c.png") for path in proxy.gets)  # never read as ds/c.png
    assert _paths(summary) == ["a.png"]
    assert any(n.startswith("1 keys are no safe path") and "dt/c.png" in n for n in summary.notes)


def test_a_listing_that_goes_back_is_an_error_not_a_loop(bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch):
    from dsclean.storage import listing

    monkeypatch.setattr(listing, "PAGE_KEYS", 2)
    for i in range(5):
        s3fs_direct.pipe_file(f"{bucket}/ds/{i}.png", synth.png(8, 8, seed=i))

    def drop_token(target):  # a server that forgets the continuation token: page 1 again, forever
        return "&".join(p for p in target.split("&") if not p.startswith("continuation-token="))

    with FaultProxy(s3_endpoint, rewrite_listing=drop_token) as proxy:
        with pytest.raises(UserError, match=r"listing s3://.*/ds went back .*--manifest"):
            _listing_scan(bucket, proxy.url, tmp_path)


def test_a_manifest_naming_a_bad_key_twice_moves_it_once_without_a_failure(bucket, s3fs_direct, s3_endpoint, tmp_path):
    s3fs_direct.pipe_file(f"{bucket}/ds/bad.png", synth.truncate(synth.png(16, 16, seed=1), 0.5))
    m = tmp_path / "keys.txt"
    m.write_text("ds/bad.png\nds/bad.png\n")
    opts = BucketScanOptions(
        storage_options={"endpoint_url": s3_endpoint},
        jobs=1,
        manifest=str(m),
        quarantine=f"s3://{bucket}/q",
        state_dir=str(tmp_path / "state"),
    )
    summary = scan_bucket(f"s3://{bucket}/ds", opts)
    assert summary.quarantined == 1 and summary.move_failures == 0
    s3fs_direct.invalidate_cache()
    assert s3fs_direct.find(f"{bucket}/q") == [f"{bucket}/q/bad.png"] and not s3fs_direct.exists(f"{bucket}/ds/bad.png")


def test_a_fifo_named_by_a_manifest_is_refused_not_opened(local_set, tmp_path):
    """A ``file://`` manifest naming a FIFO: a plain open would wait for a writer forever; it is refused at
    once (warn/not_regular, as the local scan says it), and the scan ends."""
    from support.fixtures.cli import run_cli

    os.mkfifo(local_set / "pipe.png")
    m = tmp_path / "keys.txt"
    m.write_text("ok.png\npipe.png\n")
    report = tmp_path / "r"
    proc = run_cli("scan", f"file://{local_set}", "--manifest", m, "-j", "1", "--report", report, "-q", timeout=60)
    assert proc.returncode == 0, proc.stderr
    table = read_results(str(report / "scan_results.parquet")).to_pydict()
    got = dict(zip((os.fsdecode(p) for p in table["path"]), zip(table["status"], table["reason"])))
    assert got == {"ok.png": ("ok", None), "pipe.png": ("warn", "not_regular")}
