"""One read per file: check_bytes and check_file agree; content_hash; the checker version in the cache key."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pyarrow as pa
import pytest
from support import audiogen as ag
from support import synth
from support.files import write
from support.treegen import make_tree

import dsclean
from dsclean import reasons as R
from dsclean.hashing import content_hash, content_hash_file
from dsclean.scanning import cache, check
from dsclean.scanning.check import CheckOptions, check_bytes, check_file
from dsclean.scanning.scanner import ScanOptions, scan


def damage_classes(tmp_path) -> dict[str, bytes]:
    """One file per outcome the checkers produce (every reason, ok and warn), in every format family."""
    jpeg, png = synth.jpeg(64, 48), synth.png(32, 32)
    flac = ag.write(tmp_path / "s.flac", "flac", 2).read_bytes()
    wav = ag.write(tmp_path / "s.wav", "wav", 1).read_bytes()
    x = ag.signal(1).astype(np.float32)
    x[10, 0] = np.nan
    nan_wav = ag.write(tmp_path / "n.wav", "wav", 1, "FLOAT", data=x).read_bytes()
    return {
        "ok.jpg": jpeg,
        "truncated.jpg": synth.truncate(jpeg, 0.6),
        "corrupt.jpg": synth.overwrite(synth.jpeg(256, 192), at=0.5, length=24, seed=1),
        "not_media.jpg": synth.HTML_PAGE,
        "empty.png": b"",
        "signature.png": b"\x89PN",
        "bomb.png": synth.png_bomb(20_000, 20_000),
        "crc.png": synth.png_break_crc(png),
        "mismatch.jpg": png,
        "ok.gif": synth.animated_gif(),
        "tail.gif": synth.animated_gif() + b"junk",
        "cut.tif": synth.truncate(synth.tiff_pages(2), 0.5),
        "rle.bmp": synth.bmp_rle(10, 3, b"\x0c\x07\x00\x01"),
        "mpo.jpg": synth.mpo(2)[:-300],
        "ok.wav": wav,
        "cut.wav": wav[: len(wav) // 2],
        "nan.wav": nan_wav,
        "ok.flac": flac,
        "cut.flac": flac[: len(flac) * 3 // 4],
        "id3.flac": b"ID3\x04\x00\x00\x00\x00\x00\x0a" + b"\0" * 10 + flac,
        "ok.ogg": ag.write(tmp_path / "s.ogg", "ogg", 2).read_bytes(),
        "ok.mp3": ag.write(tmp_path / "s.mp3", "mp3", 2).read_bytes(),
        "pad.mp3": ag.write(tmp_path / "t.mp3", "mp3", 2).read_bytes() + b"\0" * 64,
    }


def test_check_bytes_and_check_file_give_identical_verdicts(tmp_path):
    files = damage_classes(tmp_path)
    root = tmp_path / "files"
    outcomes = set()
    for name, data in files.items():
        write(root, name, data)
        from_file = check_file(str(root), name)
        from_bytes = check_bytes(data, name)
        assert from_file.mtime_ns and from_bytes.mtime_ns is None
        assert dataclasses.replace(from_file, mtime_ns=None) == from_bytes, name
        assert from_bytes.content_hash == content_hash(data) == content_hash_file(root / name)
        outcomes.add((from_bytes.status, from_bytes.reason))
    reasons = {r for _, r in outcomes}
    assert {
        R.TRUNCATED,
        R.CORRUPT,
        R.NOT_MEDIA,
        R.EMPTY,
        R.DECOMPRESSION_BOMB,
        R.EXTENSION_MISMATCH,
        R.INVALID_SAMPLES,
        R.NONCONFORMING,
        None,
    } <= reasons


def test_large_files_are_mapped_with_the_same_verdicts(tmp_path, monkeypatch):
    files = {k: v for k, v in damage_classes(tmp_path).items() if v}
    root = tmp_path / "files"
    for name, data in files.items():
        write(root, name, data)
    read = {name: check_file(str(root), name) for name in files}
    monkeypatch.setattr(check, "MAP_THRESHOLD", 0)  # every file mapped
    for name in files:
        assert check_file(str(root), name) == read[name], name


def test_files_not_read_have_no_hash(tmp_path):
    assert check_file(str(tmp_path), "gone.jpg").content_hash is None
    os.mkfifo(tmp_path / "pipe.wav")  # must neither block nor be read
    v = check_file(str(tmp_path), "pipe.wav")
    assert (v.status, v.reason, v.content_hash) == (R.WARN, R.NOT_REGULAR, None) and "a FIFO" in v.detail
    os.mkdir(tmp_path / "dir.jpg")
    assert check_file(str(tmp_path), "dir.jpg").reason == R.NOT_REGULAR


def test_a_file_that_changed_keeps_no_hash(tmp_path, monkeypatch):
    from dsclean.scanning import check_image

    write(tmp_path, "a.jpg", synth.jpeg(16, 16))
    real = check_image.CHECKERS["jpeg"]

    def touch_while_checking(data, v, opts):
        real(data, v, opts)
        os.utime(tmp_path / "a.jpg", ns=(1, 1))

    monkeypatch.setitem(check_image.CHECKERS, "jpeg", touch_while_checking)
    monkeypatch.setattr(check, "_CHECKERS", {})
    v = check_file(str(tmp_path), "a.jpg")
    assert (v.reason, v.content_hash) == (R.CHANGED, None)


def test_results_carry_the_content_hash(tmp_path):
    root = tmp_path / "data"
    make_tree(root)
    scan(str(root), ScanOptions(report_dir=str(tmp_path / "r"), jobs=1, dry_run=True, progress=False))
    table = dsclean.read_results(str(tmp_path / "r"))
    assert table.schema.field("content_hash").type == pa.binary(16)
    for row in table.to_pylist():
        path = root / os.fsdecode(row["path"])
        assert row["content_hash"] == content_hash_file(path), row["path"]
    for line in (tmp_path / "r" / "problems.jsonl").read_text().splitlines():
        problem = json.loads(line)
        assert problem["content_hash"] == content_hash_file(root / problem["path"]).hex()
    assert {v.content_hash for v in dsclean.iter_verdicts(str(tmp_path / "r"))} == set(
        table["content_hash"].to_pylist()
    )


def test_a_new_checker_version_never_reuses_old_verdicts(tmp_path, monkeypatch):
    root = tmp_path / "data"
    make_tree(root)
    opts = ScanOptions(report_dir=str(tmp_path / "r"), jobs=1, dry_run=True, progress=False)
    scan(str(root), opts)
    assert scan(str(root), opts).cached == 12
    key = cache.options_key(CheckOptions())
    monkeypatch.setattr(cache, "CHECKER_VERSION", check.CHECKER_VERSION + 1)  # a rule changed
    assert cache.options_key(CheckOptions()) != key
    assert scan(str(root), opts).cached == 0
    assert scan(str(root), opts).cached == 12
    from dsclean.scanning.results import read_results_meta

    assert read_results_meta(str(tmp_path / "r"))["options"] == cache.options_key(CheckOptions())


@pytest.mark.parametrize("name", ["a.jpg", "a.wav"])
def test_check_bytes_accepts_any_bytes_like(name, tmp_path):
    data = synth.jpeg(16, 16) if name.endswith("jpg") else ag.write(tmp_path / "s.wav", "wav", 1).read_bytes()
    assert check_bytes(memoryview(data), name) == check_bytes(data, name)
