"""The set's norm inferred from the scan's facts, --expect on a whole scan, and what the index does (issue 27)."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest
from support.consistency_media import cmyk_jpeg, oriented_jpeg, photo, png, sound, write

from dsclean import reasons as R
from dsclean.cli import main
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.scanner import ScanOptions, format_summary, scan


def _scan(root, tmp_path, **kw):
    check = kw.pop("check", CheckOptions())
    return scan(str(root), ScanOptions(jobs=1, backend="threads", check=check, state_dir=str(tmp_path / "state"), **kw))


def _verdicts(summary) -> dict[str, tuple[str, str | None]]:
    t = pq.read_table(summary.results_path, columns=["path", "status", "reason"]).to_pylist()
    return {os.fsdecode(r["path"]): (r["status"], r["reason"]) for r in t}


def _images(root, folder: str, n: int, odd: int, odd_mode: str) -> None:
    for i in range(n):
        im = photo(16, 16, seed=i)
        write(root, f"{folder}/{i:03}.png", png(im.convert(odd_mode) if i < odd else im))


@pytest.mark.parametrize("odd_mode,reason", [("RGBA", R.ALPHA), ("L", R.GRAYSCALE), ("P", R.MODE_MISMATCH)])
def test_one_in_150_is_flagged_fifty_are_not(tmp_path, odd_mode, reason):
    root = tmp_path / "ds"
    _images(root, "few", 150, 1, odd_mode)
    _images(root, "many", 150, 50, odd_mode)
    s = _scan(root, tmp_path)
    got = _verdicts(s)
    assert got["few/000.png"] == (R.WARN, reason)
    assert all(v == (R.OK, None) for p, v in got.items() if p != "few/000.png")
    assert s.norm_flagged == {reason: 1} and s.warn_reasons == {reason: 1}
    assert s.counts["image"][R.WARN] == 1 and s.counts["image"][R.OK] == 299
    assert s.distributions["mode"]["RGB"] == 249 and s.distributions["mode"][odd_mode] == 51
    problems = [json.loads(line) for line in open(s.problems_path)]
    assert [(p["path"], p["reason"]) for p in problems] == [("few/000.png", reason)]
    text = format_summary(s)
    assert "mode:" in text and f"{reason} 1" in text


def test_minority_zero_turns_it_off_and_a_rescan_takes_old_ones_back(tmp_path):
    root = tmp_path / "ds"
    _images(root, "c", 150, 1, "RGBA")
    assert _scan(root, tmp_path).norm_flagged == {R.ALPHA: 1}
    again = _scan(root, tmp_path)  # rows reused from the cache: still one, not two
    assert again.norm_flagged == {R.ALPHA: 1} and again.warn_reasons == {R.ALPHA: 1}
    off = _scan(root, tmp_path, minority=0)
    assert off.norm_flagged == {} and off.warn_reasons == {} and off.counts["image"].get(R.WARN, 0) == 0
    assert all(v == (R.OK, None) for v in _verdicts(off).values())
    assert not [line for line in open(off.problems_path) if line.strip()]


def test_20_cmyk_files_are_warned_without_asking(tmp_path):
    root = tmp_path / "ds"
    for i in range(20):
        write(root, f"n01/{i}.JPEG", cmyk_jpeg())
    for i in range(30):
        write(root, f"n01/rgb{i}.JPEG", oriented_jpeg(1))
    s = _scan(root, tmp_path)
    assert s.warn_reasons == {R.CMYK: 20}


def test_audio_rates_channels_and_a_short_clip(tmp_path):
    root = tmp_path / "ds"
    for i in range(149):
        sound(str(root / f"speech/{i}.wav"), 16000, 1, 1.0)
    sound(str(root / "speech/odd_rate.flac"), 44100, 1, 1.0)
    for i in range(149):
        sound(str(root / f"music/{i}.flac"), 16000, 1, 1.0)
    sound(str(root / "music/stereo.wav"), 16000, 2, 1.0)
    sound(str(root / "music/blip.wav"), 16000, 1, 0.05)
    s = _scan(root, tmp_path)
    got = _verdicts(s)
    assert got["speech/odd_rate.flac"] == (R.WARN, R.SAMPLE_RATE_MISMATCH)
    assert got["music/stereo.wav"] == (R.WARN, R.CHANNEL_MISMATCH)
    assert got["music/blip.wav"] == (R.WARN, R.TOO_SHORT)
    assert sum(v[0] == R.WARN for v in got.values()) == 3
    assert s.distributions["sample_rate"] == {"16000": 300, "44100": 1}


def test_audio_expect_keys(tmp_path):
    root = tmp_path / "ds"
    sound(str(root / "a/rate.wav"), 8000, 1, 2.0)
    sound(str(root / "a/stereo.wav"), 16000, 2, 2.0)
    sound(str(root / "a/short.flac"), 16000, 1, 0.5)
    sound(str(root / "a/fine.wav"), 16000, 1, 2.0)
    s = _scan(root, tmp_path, check=CheckOptions(expect="channels=1,min-duration=1.0,sample-rate=16000"))
    assert _verdicts(s) == {
        "a/rate.wav": (R.WARN, R.SAMPLE_RATE_MISMATCH),
        "a/stereo.wav": (R.WARN, R.CHANNEL_MISMATCH),
        "a/short.flac": (R.WARN, R.TOO_SHORT),
        "a/fine.wav": (R.OK, None),
    }


def test_strict_expect_quarantines_through_the_cli(tmp_path, capsys):
    root, q = tmp_path / "ds", tmp_path / "q"
    write(root, "c/small.png", png(photo(16, 16)))
    write(root, "c/big.png", png(photo(300, 300)))
    state = ["--state-dir", str(tmp_path / "state")]
    assert main(["scan", str(root), *state, "--expect", "min-side=224", "--dry-run", "-q"]) == 0
    assert os.path.exists(root / "c/small.png")
    assert (
        main(["scan", str(root), *state, "--expect", "min-side=224", "--strict-expect", "--quarantine", str(q), "-q"])
        == 0
    )
    assert not os.path.exists(root / "c/small.png") and os.path.exists(root / "c/big.png")
    assert any(name == "small.png" for _, _, files in os.walk(q) for name in files)


@pytest.mark.parametrize(
    "spec,words",
    [
        ("foo=1", "unknown key 'foo'"),
        ("min-side=abc", "whole number"),
        ("max-aspect=0.5", "at least 1"),
        ("mode", "give a value"),
        ("channels=-1", "above 0"),
    ],
)
def test_bad_expect_is_a_clear_error(tmp_path, capsys, spec, words):
    write(tmp_path / "ds", "a.png", png(photo()))
    assert main(["scan", str(tmp_path / "ds"), "--state-dir", str(tmp_path / "s"), "--expect", spec]) == 2
    assert words in capsys.readouterr().err


def test_strict_expect_needs_expect(tmp_path, capsys):
    write(tmp_path / "ds", "a.png", png(photo()))
    assert main(["scan", str(tmp_path / "ds"), "--state-dir", str(tmp_path / "s"), "--strict-expect"]) == 2
    assert "--strict-expect needs --expect" in capsys.readouterr().err


def test_exif_apply_reaches_the_index_and_the_dataset(tmp_path):
    from dsclean.data.dataset import IndexedDataset

    root = tmp_path / "ds"
    write(root, "c/r.jpg", oriented_jpeg(6, 40, 20))
    state = ["--state-dir", str(tmp_path / "state")]
    for exif, size in (("ignore", (40, 20)), ("apply", (20, 40))):
        assert main(["scan", str(root), *state, "--exif", exif, "-q"]) == 0
        out = str(tmp_path / f"{exif}.arrow")
        assert main(["index", str(root), "-o", out, *state, "-q"]) == 0
        ds = IndexedDataset(out)
        assert ds.meta["exif"] == exif
        img, _ = ds[0]
        assert img.size == size


def test_index_exclude_warn(tmp_path):
    from dsclean.data.dataset import IndexedDataset

    root = tmp_path / "ds"
    write(root, "c/cmyk.jpg", cmyk_jpeg())
    write(root, "c/rgb.jpg", oriented_jpeg(1))
    state = ["--state-dir", str(tmp_path / "state")]
    assert main(["scan", str(root), *state, "-q"]) == 0
    assert main(["index", str(root), "-o", str(tmp_path / "all.arrow"), *state, "-q"]) == 0
    assert len(IndexedDataset(str(tmp_path / "all.arrow"))) == 2  # warnings of issue 27 ship by default
    assert main(["index", str(root), "-o", str(tmp_path / "rgb.arrow"), *state, "-q", "--exclude-warn", "cmyk"]) == 0
    assert len(IndexedDataset(str(tmp_path / "rgb.arrow"))) == 1
    assert main(["index", str(root), "-o", str(tmp_path / "x.arrow"), *state, "--exclude-warn", "nope"]) == 2


def test_status_and_report_show_the_distributions(tmp_path, capsys):
    root = tmp_path / "ds"
    _images(root, "c", 150, 1, "L")
    state = ["--state-dir", str(tmp_path / "state")]
    assert main(["scan", str(root), *state, "-q"]) == 0
    capsys.readouterr()
    assert main(["status", str(root), *state]) == 0
    out = capsys.readouterr().out
    assert "warnings: grayscale 1" in out and "mode:" in out and "outside the set's norm (warn): grayscale 1" in out
    html = str(tmp_path / "r.html")
    assert main(["report", str(root), *state, "-o", html, "--no-thumbnails"]) == 0
    page = open(html, encoding="utf-8").read()
    assert 'id="consistency"' in page and "Image modes" in page and "grayscale 1" in page
    assert page.count('<svg class="chart"') >= 3


def test_the_pass_counts_pairs_as_arrow_group_by_does():
    """The first pass counts (group, value) pairs without Acero (numpy over dictionary codes): the same pairs and
    counts as Arrow's group-by, for strings, integers and booleans."""
    import numpy as np
    import pyarrow as pa

    from dsclean.scanning.norm import _pair_counts

    rng = np.random.default_rng(3)
    groups = pa.array([b"cats", b"dogs", b""], pa.binary()).take(pa.array(rng.integers(0, 3, 5000)))
    for values in (
        pa.array(["RGB", "L", "RGBA", "CMYK"]).take(pa.array(rng.integers(0, 4, 5000))),
        pa.array(rng.choice([8000, 16000, 44100], 5000), pa.int32()),
        pa.array(rng.random(5000) < 0.02),
    ):
        mine = dict(_pair_counts(groups, values))
        arrow = pa.table({"g": groups, "v": values}).group_by(["g", "v"]).aggregate([([], "count_all")]).to_pylist()
        assert mine == {(r["g"], r["v"]): r["count_all"] for r in arrow}
        assert sum(mine.values()) == 5000 and len(mine) > 3
    assert dict(_pair_counts(pa.array([], pa.binary()), pa.array([], pa.string()))) == {}
