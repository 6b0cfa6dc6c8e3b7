"""Issue 27, section 1: a decoder's limit on a structurally whole file is `unsupported` (a warning), after the
next decoder dsclean has for the format tried it; damage stays bad whatever any decoder says."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.loadermedia import cjpeg, ffmpeg_lossless_jpeg, picture, pyav_audio, tiff_float16

from dsclean import reasons as R
from dsclean.scanning.check import CHECKER_VERSION, check_bytes

av = pytest.importorskip("av")
pytest.importorskip("tifffile")


def test_a_tiff_pillow_cannot_identify_is_unsupported_and_read_by_tifffile():
    v = check_bytes(tiff_float16(), "f16.tif")
    assert (v.status, v.reason) == (R.WARN, R.UNSUPPORTED), v.detail
    assert "Pillow refused" in v.detail and "tifffile read it (1 page(s), 64x48)" in v.detail
    assert (v.width, v.height) == (64, 48)
    assert "object at 0x" not in v.detail  # the detail is the same for the same bytes (cache, merge, diff)


def test_a_cut_tiff_stays_bad_whatever_a_decoder_says():
    v = check_bytes(tiff_float16()[:-100], "f16.tif")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED), v.detail


@pytest.mark.parametrize("codec,rate", [("ac3", 48000), ("adpcm_g722", 16000), ("adpcm_yamaha", 22050)])
def test_a_wav_codec_libsndfile_lacks_is_read_by_pyav(codec, rate):
    v = check_bytes(pyav_audio("wav", codec, rate, sample_format="fltp" if codec == "ac3" else "s16"), f"{codec}.wav")
    assert (v.status, v.reason) == (R.WARN, R.UNSUPPORTED), v.detail
    assert "decoders: libsndfile refused, PyAV read it" in v.detail
    assert v.sample_rate == rate and v.channels == 1 and v.frames >= rate * 0.9  # the facts come from PyAV


def test_a_cut_wav_of_such_a_codec_stays_bad():
    data = pyav_audio("wav", "adpcm_g722", 16000)
    v = check_bytes(data[: len(data) // 2], "g722.wav")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED), v.detail


def test_an_arithmetic_coded_jpeg_is_read_by_the_first_decoder():
    data = cjpeg(picture(), "-arithmetic")
    if data is None:
        pytest.skip("cjpeg (libjpeg-turbo-progs) is not installed")
    assert b"\xff\xc9" in data  # SOF9: arithmetic coding
    v = check_bytes(data, "arith.jpg")
    assert (v.status, v.reason) == (R.OK, None), v.detail
    cut = check_bytes(data[: len(data) * 2 // 3], "arith.jpg")
    assert cut.status == R.BAD and cut.reason in (R.TRUNCATED, R.CORRUPT)


def test_the_rule_change_bumped_the_checker_version():
    assert CHECKER_VERSION >= 4  # verdicts cached under version 3 called these files bad


def test_scan_never_moves_an_unsupported_file(tmp_path):
    root, quarantine = tmp_path / "data", tmp_path / "q"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f16.tif").write_bytes(tiff_float16())
    (root / "a" / "g722.wav").write_bytes(pyav_audio("wav", "adpcm_g722", 16000))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsclean",
            "scan",
            str(root),
            "--quarantine",
            str(quarantine),
            "--jobs",
            "1",
            "--quiet",
            "--check",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr  # no bad file
    assert sorted(os.listdir(root / "a")) == ["f16.tif", "g722.wav"]


def test_a_jpeg_variant_no_decoder_here_implements_is_unsupported_not_corrupt():
    """FFmpeg's lossless RGB JPEG (SOF3, 9-bit precision): simplejpeg and Pillow both refuse the variant."""
    data = ffmpeg_lossless_jpeg("bgr24")
    assert data[:2] == b"\xff\xd8" and b"\xff\xc3" in data
    v = check_bytes(data, "lossless.jpg")
    assert (v.status, v.reason) == (R.WARN, R.UNSUPPORTED), v.detail
    assert "simplejpeg refused (Unsupported" in v.detail and "Pillow refused: UnidentifiedImageError" in v.detail
    assert "decoders: Pillow only, which cannot read it" in v.detail
    cut = check_bytes(data[: len(data) // 2], "lossless.jpg")
    assert cut.status == R.BAD, cut.detail  # no end-of-image marker: not whole, whatever the decoders say


def test_a_lossless_jpeg_of_8_bit_samples_is_read():
    v = check_bytes(ffmpeg_lossless_jpeg("yuvj444p"), "lossless.jpg")
    assert (v.status, v.reason) == (R.OK, None), v.detail
