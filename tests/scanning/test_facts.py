"""The scan's quality facts and flags: recorded from the check's own decode, typed as FACTS.md says,
kept by the cache, switched off by --facts none, never changing a verdict; flag thresholds and
--quarantine-flags through the CLI."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageFilter
from support import synth
from support.files import write

from dsclean.cli import main
from dsclean.hashing import content_hash
from dsclean.quality.columns import FACT_COLUMNS
from dsclean.scanning.check import CheckOptions, check_bytes
from dsclean.scanning.scanner import ScanOptions, scan

FAST = dict(jobs=1, backend="threads")


def _results(report) -> dict[str, dict]:
    return {os.fsdecode(r["path"]): r for r in pq.read_table(str(report / "scan_results.parquet")).to_pylist()}


@pytest.fixture
def media(tmp_path):
    root = tmp_path / "data"
    write(root, "photo.jpg", synth.jpeg(640, 640, seed=1))
    write(root, "photo.png", synth.png(128, 96, seed=2))
    write(root, "photo.webp", synth.encode_image(synth.photo_like(96, 96, seed=3), "WEBP"))
    write(root, "tone.wav", synth.encode_audio(synth.tone(0.5, 16_000, 2), 16_000, "WAV"))
    write(root, "tone.flac", synth.encode_audio(synth.tone(0.5, 16_000, 1), 16_000, "FLAC"))
    write(root, "cut.jpg", synth.truncate(synth.jpeg(320, 240, seed=4), 0.5))
    return root


def test_scan_records_facts_with_the_contract_types_and_the_cache_keeps_them(media, tmp_path):
    state = str(tmp_path / "state")
    scan(str(media), ScanOptions(report_dir=str(tmp_path / "r1"), state_dir=state, **FAST))
    schema = pq.read_schema(str(tmp_path / "r1" / "scan_results.parquet"))
    for name, typ in FACT_COLUMNS.items():
        assert schema.field(name).type == typ, name
    rows = _results(tmp_path / "r1")
    jpg, png, wav = rows["photo.jpg"], rows["photo.png"], rows["tone.wav"]
    for r in (jpg, png, rows["photo.webp"]):
        assert 0 < r["brightness"] < 1 and r["contrast"] > 0.05 and 0 < r["entropy"] <= 8 and r["phash"] > 0
        assert r["peak"] is None and r["flags"] == []
    assert jpg["sharpness"] > 0  # 640 px: the 1/8-scale decode is 80 px, enough for the 64 px thumbnail
    assert jpg["grayscale"] is None and png["grayscale"] is False  # a grey decode cannot tell; PNG: RGB
    for r in (wav, rows["tone.flac"]):
        assert 0.3 < r["peak"] <= 1 and 0.1 < r["rms"] < r["peak"] and r["clipped"] == 0
        assert r["silent_channels"] == 0 and r["phash"] is None and r["flags"] == []
    assert rows["cut.jpg"]["status"] == "bad" and rows["cut.jpg"]["flags"] is None
    # a re-scan answers from the cache: the same facts, flags derived again
    s = scan(str(media), ScanOptions(report_dir=str(tmp_path / "r2"), state_dir=state, **FAST))
    assert s.cached == len(rows)
    assert _results(tmp_path / "r2") == rows


def test_facts_none_leaves_the_columns_null_and_is_its_own_cache(media, tmp_path):
    state = str(tmp_path / "state")
    assert (
        main(
            [
                "scan",
                str(media),
                "--report",
                str(tmp_path / "r"),
                "--state-dir",
                state,
                "--facts",
                "none",
                "-q",
                "--backend",
                "threads",
            ]
        )
        == 0
    )
    rows = _results(tmp_path / "r")
    for r in rows.values():
        assert all(r[name] is None for name in FACT_COLUMNS), r["path"]  # content_hash too: every fact is off
    assert rows["photo.jpg"]["width"] == 640 and rows["tone.wav"]["duration"] > 0  # media facts are the verdict's
    assert rows["cut.jpg"]["status"] == "bad"
    # a later scan with facts, pointed at those results (the re-scan reuse) and that cache: nothing reused
    s = scan(str(media), ScanOptions(report_dir=str(tmp_path / "r2"), state_dir=state, **FAST))
    assert s.cached == 0  # verdicts recorded without facts are not reused by a scan with them
    with_facts = _results(tmp_path / "r2")
    assert with_facts["photo.jpg"]["phash"] is not None
    for name in rows:
        assert with_facts[name]["content_hash"] == content_hash((media / name).read_bytes()), name
    # facts none again: its own cache table answers (verdicts only), the scan with facts' rows untouched
    s = scan(
        str(media),
        ScanOptions(report_dir=str(tmp_path / "r3"), state_dir=state, check=CheckOptions(facts=False), **FAST),
    )
    assert s.cached == len(rows) and _results(tmp_path / "r3") == rows
    # and with facts once more, the last results (the pointer) now being the facts-none ones: the cache of
    # the scan with facts answers, with its hashes; the facts-none results are never reused
    s = scan(str(media), ScanOptions(report_dir=str(tmp_path / "r4"), state_dir=state, **FAST))
    assert s.cached == len(rows) and _results(tmp_path / "r4") == with_facts


def test_facts_none_rescan_reuses_its_own_results(media, tmp_path):
    """The Arrow re-scan path (previous results, same options) keeps the null hashes null."""
    state = str(tmp_path / "state")
    none = ScanOptions(report_dir=str(tmp_path / "r"), state_dir=state, check=CheckOptions(facts=False), **FAST)
    scan(str(media), none)
    first = _results(tmp_path / "r")
    s = scan(str(media), none)
    assert s.cached == len(first) and _results(tmp_path / "r") == first
    assert all(r["content_hash"] is None for r in first.values())


DAMAGED = {
    "cut.jpg": synth.truncate(synth.jpeg(320, 240, seed=5), 0.6),
    "hit.jpg": synth.overwrite(synth.jpeg(320, 240, seed=6), 0.5, 200),
    "cut.png": synth.truncate(synth.png(96, 96, seed=7), 0.7),
    "crc.png": synth.png_break_crc(synth.png(64, 64, seed=8)),
    "cut.gif": synth.truncate(synth.animated_gif(4, 48), 0.7),
    "cut.webp": synth.truncate(synth.encode_image(synth.photo_like(64, 64), "WEBP"), 0.7),
    "cut.tif": synth.truncate(synth.tiff_pages(3, 32), 0.7),
    "cut.wav": synth.truncate(synth.encode_audio(synth.tone(0.5, 16_000, 2), 16_000, "WAV"), 0.5),
    "cut.flac": synth.truncate(synth.encode_audio(synth.tone(1.0, 16_000, 1), 16_000, "FLAC"), 0.5),
    "cut.ogg": synth.truncate(synth.encode_audio(synth.tone(1.0, 16_000, 1), 16_000, "OGG"), 0.5),
    "ok.jpg": synth.jpeg(160, 120, seed=9),
    "ok.png": synth.png(48, 48),
    "mpo.jpg": synth.mpo(2, 96, 64),
    "ok.ogg": synth.encode_audio(synth.tone(0.3, 16_000, 2), 16_000, "OGG"),
    "ok.24.wav": synth.encode_audio(synth.tone(0.3, 16_000, 2), 16_000, "WAV", "PCM_24"),
    "ok.u8.wav": synth.encode_audio(synth.tone(0.3, 16_000, 1), 16_000, "WAV", "PCM_U8"),
    "ok.ulaw.wav": synth.encode_audio(synth.tone(0.3, 16_000, 1), 16_000, "WAV", "ULAW"),
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_facts_never_change_a_verdict(name):
    data = DAMAGED[name]
    on, off = (check_bytes(data, name, CheckOptions(facts=f)) for f in (True, False))
    assert (on.status, on.reason, on.detail) == (off.status, off.reason, off.detail)
    assert on.content_hash == content_hash(data) and off.content_hash is None  # every format, bad or not
    if on.status == "ok":
        assert (on.brightness if on.kind == "image" else on.rms) is not None


def test_levels_of_raw_pcm_match_a_decode():
    tone = synth.tone(0.4, 16_000, 2)
    ref = check_bytes(synth.encode_audio(tone, 16_000, "FLAC"), "a.flac")
    for subtype in ("PCM_16", "PCM_24", "PCM_32", "FLOAT"):
        v = check_bytes(synth.encode_audio(tone, 16_000, "WAV", subtype), f"a.{subtype}.wav")
        assert v.rms == pytest.approx(ref.rms, rel=1e-3) and v.peak == pytest.approx(ref.peak, rel=1e-3), subtype


# ---- flags: every threshold option, on generated media --------------------------------------------


def _grey(level: int, w=96, h=96) -> bytes:
    return synth.encode_image(Image.new("RGB", (w, h), (level, level, level)), "PNG")


def _noise_png(w=96, h=96, blur=0.0) -> bytes:
    img = synth.photo_like(w, h, seed=11)
    return synth.encode_image(img.filter(ImageFilter.GaussianBlur(blur)) if blur else img, "PNG")


def _wav(x: np.ndarray, rate=16_000) -> bytes:
    return synth.encode_audio(x, rate, "WAV")


_T = np.arange(16_000) / 16_000
FLAG_CASES = [  # option, a value that flags the file, a value that does not, the file, its flag
    ("--flag-dark", "0.2", "0.05", "a.png", _grey(20), "dark"),  # mean luma 0.078
    ("--flag-bright", "0.8", "0.95", "a.png", _grey(230), "bright"),  # 0.90
    ("--flag-min-contrast", "0.2", "0.01", "a.png", _noise_png(), "low_information"),  # luma std ~0.1-0.2
    ("--flag-blurry", "0.5", "0.001", "a.png", _noise_png(blur=2.0), "blurry"),
    ("--flag-tiny", "64", "16", "a.png", _noise_png(40, 40), "tiny"),
    ("--flag-odd-aspect", "2", "4", "a.png", _noise_png(300, 100), "odd_aspect"),
    ("--flag-silence", "0.05", "0.001", "a.wav", _wav(0.01 * np.sin(2 * np.pi * 440 * _T)), "silent"),
    (
        "--flag-clipped",
        "0.01",
        "0.9",
        "a.wav",
        _wav(np.clip(2 * np.sin(2 * np.pi * 440 * _T), -1, 1)),
        "clipped",
    ),  # 2/3 of samples
    ("--flag-dc-offset", "0.1", "0.3", "a.wav", _wav(0.2 + 0.3 * np.sin(2 * np.pi * 440 * _T)), "dc_offset"),
    ("--flag-too-short", "1.5", "0.5", "a.wav", _wav(0.3 * np.sin(2 * np.pi * 440 * _T)), "too_short"),  # 1 s
]


@pytest.mark.parametrize("option,flags_at,clear_at,name,data,flag", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_each_flag_threshold_option(tmp_path, option, flags_at, clear_at, name, data, flag):
    root = tmp_path / "data"
    write(root, name, data)
    got = {}
    for value in (flags_at, clear_at):
        report = tmp_path / f"r{value}"
        assert (
            main(
                [
                    "scan",
                    str(root),
                    "--report",
                    str(report),
                    "--state-dir",
                    str(tmp_path / "s"),
                    "-q",
                    "--backend",
                    "threads",
                    option,
                    value,
                ]
            )
            == 0
        )
        got[value] = _results(report)[name]
    assert flag in got[flags_at]["flags"], got[flags_at]
    assert flag not in got[clear_at]["flags"], got[clear_at]
    assert got[flags_at]["status"] == got[clear_at]["status"] == "ok"  # a flag is not a verdict


def test_default_thresholds_flag_plain_cases(tmp_path):
    root = tmp_path / "data"
    write(root, "black.png", _grey(3))
    write(root, "white.png", _grey(250))
    write(root, "photo.png", _noise_png())
    write(root, "silence.wav", _wav(np.zeros(16_000)))
    write(root, "blip.wav", _wav(0.3 * np.sin(2 * np.pi * 440 * _T[:800])))  # 50 ms
    s = scan(str(root), ScanOptions(report_dir=str(tmp_path / "r"), state_dir=str(tmp_path / "s"), **FAST))
    rows = _results(tmp_path / "r")
    assert rows["black.png"]["flags"] == ["dark", "low_information"]
    assert rows["white.png"]["flags"] == ["bright", "low_information"]
    assert rows["photo.png"]["flags"] == []
    assert rows["silence.wav"]["flags"] == ["silent"]
    assert rows["blip.wav"]["flags"] == ["too_short"]
    assert s.flags == {"dark": 1, "bright": 1, "low_information": 2, "silent": 1, "too_short": 1}


# ---- --quarantine-flags ---------------------------------------------------------------------------


def test_quarantine_flags_moves_flagged_files_journaled_and_only_when_asked(tmp_path, capsys):
    root, q = tmp_path / "data", tmp_path / "q"
    write(root, "a/dark.png", _grey(5))
    write(root, "a/photo.png", _noise_png())
    write(root, "b/silence.wav", _wav(np.zeros(16_000)))
    write(root, "b/cut.jpg", synth.truncate(synth.jpeg(160, 120), 0.5))
    state = ["--state-dir", str(tmp_path / "s"), "--backend", "threads"]
    # not asked: flagged files stay
    assert main(["scan", str(root), "--quarantine", str(q), *state]) == 0
    assert (root / "a/dark.png").exists() and (root / "b/silence.wav").exists() and not (root / "b/cut.jpg").exists()
    capsys.readouterr()
    assert main(["scan", str(root), "--quarantine", str(q), "--quarantine-flags", "dark,silent", *state]) == 0
    out = capsys.readouterr().out
    assert "2 flagged files quarantined" in out
    assert not (root / "a/dark.png").exists() and not (root / "b/silence.wav").exists()
    assert (q / "a/dark.png").exists() and (q / "b/silence.wav").exists() and (root / "a/photo.png").exists()
    journal = [json.loads(line) for line in open(q / "manifest.jsonl", encoding="utf-8")]
    moves = {e["src"]: e for e in journal if e["op"] == "move"}
    assert moves["a/dark.png"]["reason"] == "flagged" and "dark" in moves["a/dark.png"]["detail"]
    assert moves["b/silence.wav"]["reason"] == "flagged" and "silent" in moves["b/silence.wav"]["detail"]
    problems = {p["path"]: p for p in map(json.loads, open(q / "problems.jsonl", encoding="utf-8"))}
    assert problems["a/dark.png"]["quarantined_as"] == "a/dark.png" and problems["a/dark.png"]["flags"] == [
        "dark",
        "low_information",
    ]
    # dsclean restore puts them back like any quarantined file
    assert main(["restore", str(q)]) == 0
    assert (root / "a/dark.png").exists() and (root / "b/silence.wav").exists()


def test_quarantine_flags_refuses_unknown_codes_before_anything_moves(tmp_path, capsys):
    root = tmp_path / "data"
    write(root, "dark.png", _grey(5))
    assert (
        main(
            [
                "scan",
                str(root),
                "--quarantine",
                str(tmp_path / "q"),
                "--quarantine-flags",
                "dark,blury,loud",
                "--state-dir",
                str(tmp_path / "s"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "'blury'" in err and "'loud'" in err and "low_information" in err
    assert (root / "dark.png").exists()
    assert (
        main(["scan", str(root), "--quarantine-flags", "dark", "--facts", "none", "--state-dir", str(tmp_path / "s")])
        == 2
    )
    assert "--facts none" in capsys.readouterr().err
    assert main(["scan", str(root), "--flag-tiny", "8", "--facts", "none", "--state-dir", str(tmp_path / "s")]) == 2
    assert "--flag-* thresholds need the facts" in capsys.readouterr().err  # not silently ignored
    assert main(["scan", str(root), "--scheduler", "tcp://127.0.0.1:1", "--state-dir", str(tmp_path / "s")]) == 2
    assert "--scheduler goes with --backend dask" in capsys.readouterr().err  # not a silent local scan
    with pytest.raises(SystemExit) as exc:  # argparse: an empty entry is a usage error
        main(["scan", str(root), "--quarantine-flags", "dark,", "--state-dir", str(tmp_path / "s")])
    assert exc.value.code == 2


def test_flagged_files_dry_run_listing_identity_check_and_later_status(tmp_path, monkeypatch, capsys):
    """A dry run lists what --quarantine-flags would move; a move from a cached verdict still compares
    the file's inode/device; later scans list a file moved for a flag as ok (its integrity was fine)."""
    from dsclean.scanning.quarantine import moves as Q

    root, q = tmp_path / "data", tmp_path / "q"
    write(root, "a/dark.png", _grey(5))
    write(root, "a/photo.png", _noise_png())
    state = ["--state-dir", str(tmp_path / "s"), "--backend", "threads"]
    report = tmp_path / "dry"
    assert (
        main(
            [
                "scan",
                str(root),
                "--quarantine",
                str(q),
                "--quarantine-flags",
                "dark",
                "--dry-run",
                "--report",
                str(report),
                *state,
            ]
        )
        == 0
    )
    assert (root / "a/dark.png").exists()
    listed = {p["path"]: p for p in map(json.loads, open(report / "problems.jsonl", encoding="utf-8"))}
    assert listed["a/dark.png"]["would_quarantine"] == "flagged" and listed["a/dark.png"]["flag"] == "dark"
    assert "a/photo.png" not in listed
    seen = []
    real_move = Q.Quarantine.move
    monkeypatch.setattr(
        Q.Quarantine,
        "move",
        lambda self, rel, reason=None, **kw: (seen.append((rel, kw.get("expect"))), real_move(self, rel, reason, **kw))[
            1
        ],
    )
    capsys.readouterr()
    assert main(["scan", str(root), "--quarantine", str(q), "--quarantine-flags", "dark", *state]) == 0
    assert "cache" in capsys.readouterr().out  # every verdict from the scan cache: nothing re-checked
    assert [rel for rel, _ in seen] == ["a/dark.png"]
    size, mtime, ino, dev = seen[0][1]
    assert ino is not None and dev is not None  # the verdict came from the cache; the identity is still checked
    assert not (root / "a/dark.png").exists()
    assert main(["scan", str(root), "--quarantine", str(q), *state]) == 0
    again = {p["path"]: p for p in map(json.loads, open(q / "problems.jsonl", encoding="utf-8"))}
    assert again["a/dark.png"]["reason"] == "flagged" and again["a/dark.png"]["status"] == "ok"


@pytest.mark.parametrize("size", [(48, 36), (96, 72), (200, 150), (512, 384)])
def test_jpeg_facts_keep_the_thumbnails_pixels_whatever_the_size(tmp_path, size):
    """A small JPEG's facts come from a decode that keeps 64 px each way (not 1/8 of 48 px = 6 px): they agree
    with the same pixels stored as PNG, and with the facts dups computes itself (Pillow's draft), so a JPEG/PNG
    pair of one picture is a near duplicate and a textured small JPEG is not 'low information'."""
    from dsclean.quality.image import image_facts_from_path
    from dsclean.quality.phash import hamming

    im = synth.photo_like(*size, seed=3)
    jpg, png = tmp_path / "a.jpg", tmp_path / "a.png"
    im.save(jpg, quality=90)
    im.save(png)
    on_jpeg = check_bytes(jpg.read_bytes(), "a.jpg", CheckOptions(facts=True))
    on_png = check_bytes(png.read_bytes(), "a.png", CheckOptions(facts=True))
    own = image_facts_from_path(str(jpg))  # what dups computes for a file without scan facts
    assert on_jpeg.status == on_png.status == "ok"
    assert hamming(on_jpeg.phash, on_png.phash) <= 6, (on_jpeg.phash, on_png.phash)
    assert hamming(on_jpeg.phash, own.phash) <= 4
    assert on_jpeg.contrast == pytest.approx(on_png.contrast, rel=0.25)
    assert on_jpeg.contrast == pytest.approx(own.contrast, rel=0.1)
