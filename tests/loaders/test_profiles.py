"""Issue 27, section 2: loader profiles. Every file is generated here and opened through the real libraries."""

from __future__ import annotations

import importlib.util
import io
import os

import numpy as np
import pytest
from support.fixtures.cli import run_cli
from support.loadermedia import jpeg, jpeg_with_orientation, picture, png16, pyav_audio

from dsclean import reasons as R
from dsclean.data.loaders import pil_loader
from dsclean.loaders import compare, profiles
from dsclean.scanning.check import CheckOptions, check_bytes

cv2 = pytest.importorskip("cv2")
av = pytest.importorskip("av")

OPENCV = CheckOptions(loaders=("opencv",))
PYAV = CheckOptions(loaders=("pyav",))


@pytest.mark.parametrize(
    "name,data",
    [
        ("plain.jpg", lambda: jpeg(picture())),
        ("progressive.jpg", lambda: jpeg(picture(), progressive=True)),
        ("cmyk.jpg", lambda: jpeg(picture().convert("CMYK"))),
        ("grey.jpg", lambda: jpeg(picture().convert("L"))),
        ("rgb.png", lambda: (lambda b: (picture().save(b, "PNG"), b.getvalue())[1])(io.BytesIO())),
    ],
)
def test_opencv_agrees_with_pillow_on_ordinary_images(name, data):
    """No false alarm: the same pixels from cv2.imdecode (BGR turned RGB) and Image.open().convert('RGB')."""
    v = check_bytes(data(), name, OPENCV)
    # a CMYK JPEG carries issue 27's colour warning whatever the loader; what matters here is no loader verdict
    want = (R.WARN, R.CMYK) if name == "cmyk.jpg" else (R.OK, None)
    assert (v.status, v.reason) == want, v.detail
    assert "--loader opencv" not in v.detail, v.detail  # a loader finding names its profile


def test_a_cmyk_jpeg_decodes_alike_through_both_libjpeg_front_ends():
    data = jpeg(picture().convert("CMYK"))
    ref = np.asarray(pil_loader(io.BytesIO(data)))
    cv = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
    assert compare.image_difference(ref, np.ascontiguousarray(cv)) is None  # Adobe-inverted CMYK read alike


def test_exif_orientation_turns_opencv_and_not_pillow():
    """cv2.imdecode(IMREAD_COLOR) applies EXIF orientation 6 (a quarter turn); Image.open().convert does not."""
    v = check_bytes(jpeg_with_orientation(picture(64, 48), 6), "turned.jpg", OPENCV)
    assert (v.status, v.reason) == (R.WARN, R.LOADER_DIFFERS), v.detail
    assert "--loader opencv: shape 48x64x3, the reference decode's is 64x48x3 (pillow)" in v.detail
    plain = check_bytes(jpeg_with_orientation(picture(64, 48), 1), "upright.jpg", OPENCV)
    assert plain.status == R.OK, plain.detail


def test_a_16_bit_png_differs_exactly_when_pillows_conversion_saturates():
    """cv2 scales 16 bits to 8; dsclean's default loader (convert('RGB')) saturated them to white until it was
    fixed (issue 27 section 3): the profile reports the difference exactly as long as it exists."""
    data = png16()
    saturated = float(np.asarray(pil_loader(io.BytesIO(data))).mean()) > 250
    v = check_bytes(data, "deep.png", OPENCV)
    if saturated:
        assert (v.status, v.reason) == (R.WARN, R.LOADER_DIFFERS) and "levels on average" in v.detail, v.detail
    else:
        assert v.reason != R.LOADER_DIFFERS, v.detail


def test_reference_profiles_decode_again_only_for_another_profile(monkeypatch):
    """--loader pillow alone adds no decode (the check is its judgement); with opencv, pillow decodes for reference."""
    import dataclasses

    from dsclean.cli.scan import check_loaders_of

    assert check_loaders_of(("pillow",)) == () and check_loaders_of(("opencv", "pillow")) == ("opencv",)
    calls = []
    real = profiles.PROFILES["pillow"]
    monkeypatch.setitem(
        profiles.PROFILES, "pillow", dataclasses.replace(real, load=lambda source: calls.append(1) or real.load(source))
    )
    data = jpeg(picture())
    assert check_bytes(data, "x.jpg", CheckOptions(loaders=("pillow",))).status == R.OK and calls == []
    assert check_bytes(data, "x.jpg", CheckOptions(loaders=("pyav",))).status == R.OK and calls == []  # audio only
    assert check_bytes(data, "x.jpg", OPENCV).status == R.OK and calls == [1]


@pytest.mark.parametrize(
    "container,codec,rate,fmt",
    [
        ("flac", "flac", 44100, "s16"),
        ("mp3", "mp3", 44100, "fltp"),
        ("ogg", "libopus", 48000, "flt"),
        ("wav", "pcm_s16le", 16000, "s16"),
    ],
)
def test_pyav_agrees_with_soundfile_on_ordinary_audio(container, codec, rate, fmt):
    v = check_bytes(pyav_audio(container, codec, rate, sample_format=fmt), f"t.{container}", PYAV)
    assert (v.status, v.reason) == (R.OK, None), v.detail


def test_audio_only_pyav_can_open_is_unsupported_and_the_pyav_profile_reads_it():
    """A WAV holding G.722: soundfile (the default audio loader) cannot open it, FFmpeg can."""
    data = pyav_audio("wav", "adpcm_g722", 16000)
    v = check_bytes(data, "g722.wav", PYAV)
    assert (v.status, v.reason) == (R.WARN, R.UNSUPPORTED), v.detail
    assert "loaders: pyav read it; soundfile" in v.detail
    samples, rate = profiles.load_pyav(data)
    assert rate == 16000 and samples.shape[0] == 1 and samples.shape[1] >= 15000


def test_audio_tolerance_sees_another_rate_or_length():
    a = np.zeros((1, 16000), np.float32)
    assert compare.audio_difference((a, 16000), (a, 16000), "flac") is None
    assert "sample rate" in compare.audio_difference((a, 16000), (a, 8000), "flac")
    assert "frames" in compare.audio_difference((a, 16000), (a[:, :15000], 16000), "flac")
    assert compare.audio_difference((a, 16000), (a[:, :15000], 16000), "mp3") is None  # 1000 <= 2304: delay
    assert "samples differ" in compare.audio_difference((a, 16000), (a + 0.1, 16000), "wav")


def test_a_loader_that_raises_is_loader_fails_and_the_index_leaves_the_file_out(tmp_path):
    """OpenCV's own pixel limit (OPENCV_IO_MAX_IMAGE_PIXELS) makes cv2.imdecode raise on a whole image."""
    root = tmp_path / "data"
    (root / "a").mkdir(parents=True)
    (root / "a" / "big.jpg").write_bytes(jpeg(picture(64, 48)))
    (root / "a" / "small.jpg").write_bytes(jpeg(picture(16, 16)))
    env = {"OPENCV_IO_MAX_IMAGE_PIXELS": "1000"}  # 64x48 = 3072 pixels: over; 16x16: under
    proc = run_cli("scan", root, "--loader", "opencv", "--jobs", "1", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert '"loader_fails": 1' in proc.stdout
    out = tmp_path / "cv.arrow"
    proc = run_cli("index", root, "-o", out, "--loader", "opencv", "--jobs", "1", env=env)
    assert proc.returncode == 0, proc.stderr
    from dsclean import IndexedDataset

    ds = IndexedDataset(out, loader_profile="opencv")
    assert [os.path.basename(p) for p, _ in ds.samples] == ["small.jpg"]
    assert ds.meta["loaders"] == ["opencv"]


def test_index_for_other_loaders_than_the_scan_checks_again(tmp_path):
    root = tmp_path / "data"
    (root / "a").mkdir(parents=True)
    (root / "a" / "turned.jpg").write_bytes(jpeg_with_orientation(picture(64, 48), 6))
    assert run_cli("scan", root, "--jobs", "1", "--quiet").returncode == 0
    proc = run_cli("index", root, "-o", tmp_path / "cv.arrow", "--loader", "opencv", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    assert "were made for the loaders pillow/soundfile (the default), not pillow/soundfile, opencv" in proc.stderr


@pytest.mark.parametrize(
    "name,extra",
    [
        ("torchvision", "torchvision"),
        ("torchvision-exif", "torchvision"),
        ("torchaudio", "torchaudio"),
        ("opencv", "opencv"),
        ("pyav", "av"),
    ],
)
def test_a_profile_whose_library_is_missing_is_a_clear_error(tmp_path, name, extra):
    module = profiles.PROFILES[name].module
    root = tmp_path / "data"
    root.mkdir()
    (root / "x.jpg").write_bytes(jpeg(picture()))
    env = {}
    if importlib.util.find_spec(module) is not None:  # installed: hide it (a folder shadowing it that fails to import)
        fake = tmp_path / "hide"
        fake.mkdir()
        (fake / f"{module}.py").write_text("raise ImportError('hidden by the test')\n")
        env["PYTHONPATH"] = os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])
    for command in (("scan", root, "--dry-run"), ("index", root, "-o", tmp_path / "i.arrow")):
        proc = run_cli(*command, "--loader", name, env=env)
        assert proc.returncode == 2, proc.stderr
        assert f"pip install 'dsclean[{extra}]'" in proc.stderr and f"--loader {name}" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "i.arrow").exists()


def test_an_unknown_profile_is_a_clear_error(tmp_path):
    proc = run_cli("scan", tmp_path, "--loader", "nope")
    assert proc.returncode == 2 and "unknown loader profile 'nope'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture
def indexes(tmp_path):
    root = tmp_path / "data"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.jpg").write_bytes(jpeg(picture()))
    (root / "a" / "t.flac").write_bytes(pyav_audio("flac", "flac", 16000))
    from dsclean.index.build import build_index

    build_index(str(root), str(tmp_path / "pil.arrow"))
    build_index(str(root), str(tmp_path / "cv.arrow"), loaders=["opencv"])
    return tmp_path / "pil.arrow", tmp_path / "cv.arrow"


def test_indexed_dataset_refuses_an_index_built_for_another_loader(indexes):
    from dsclean import IndexedDataset
    from dsclean.errors import UserError

    pil, cv = indexes
    with pytest.raises(UserError, match=r"built for the loader opencv .*not 'pillow'"):
        IndexedDataset(cv)
    with pytest.raises(UserError, match=r"built for the loader pillow .*not 'opencv'"):
        IndexedDataset(pil, loader_profile="opencv")
    with pytest.raises(UserError, match=r"custom loader= was given: pass loader_profile='opencv'"):
        IndexedDataset(cv, loader=lambda p: p)
    assert len(IndexedDataset(cv, loader=lambda p: p, allow_loader_mismatch=True)) == 2
    assert len(IndexedDataset(pil, loader=lambda p: p)) == 2  # a custom loader on a default index: as before
    assert IndexedDataset(pil).meta["loaders"] == ["pillow"]


def test_the_profile_is_the_datasets_loader_in_real_workers(indexes):
    import torch

    from dsclean import IndexedDataset

    _, cv = indexes
    ds = IndexedDataset(cv, loader_profile="opencv")
    kinds = {os.path.basename(ds.path(i)): ds[i][0] for i in range(len(ds))}
    assert isinstance(kinds["x.jpg"], np.ndarray) and kinds["x.jpg"].shape == (48, 64, 3)  # BGR, as cv2 gives it
    assert isinstance(kinds["t.flac"], tuple)  # the other kind: dsclean's default audio loader
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, collate_fn=lambda x: x)
    got = [type(sample).__name__ for sample, _ in loader]
    assert sorted(got) == ["ndarray", "tuple"]
