"""dsclean explain on the messages the libraries really raise (each produced here by calling the library)."""

from __future__ import annotations

import glob
import io
import os
import subprocess
import sys
import tarfile
import traceback

import pytest
from support import synth
from support.files import write
from torch.utils.data import DataLoader, Dataset

from dsclean.diagnose.explain import EXCEPTION, LIBRARY_MESSAGES, explain, format_explanation


def _raised(fn) -> str:
    try:
        fn()
    except Exception:
        return traceback.format_exc()
    raise AssertionError("the library did not raise")


def _pillow_truncated(tmp_path) -> str:
    from PIL import Image

    path = write(tmp_path, "cut.jpg", synth.truncate(synth.jpeg(64, 64), 0.5))
    return _raised(lambda: Image.open(path).convert("RGB"))


def _pillow_unidentified(tmp_path) -> str:
    from PIL import Image

    path = write(tmp_path, "page.jpg", b"<html><title>403</title></html>")
    return _raised(lambda: Image.open(path))


def _pillow_bomb(tmp_path) -> str:
    from PIL import Image

    path = write(tmp_path, "big.png", synth.png(64, 64))
    old, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, 1000  # 4,096 pixels: over twice the limit
    try:
        return _raised(lambda: Image.open(path))
    finally:
        Image.MAX_IMAGE_PIXELS = old


def _soundfile_garbage(tmp_path) -> str:
    import soundfile

    path = write(tmp_path, "noise.flac", bytes(range(256)) * 4)
    return _raised(lambda: soundfile.read(path))


def _soundfile_malformed_wav(tmp_path) -> str:
    import soundfile

    path = write(tmp_path, "bad.wav", b"RIFF\x10\x00\x00\x00WAVEfmt garbage here" * 3)
    return _raised(lambda: soundfile.read(path))


def _webdataset_missing_key(tmp_path) -> str:
    import webdataset as wds

    shard = tmp_path / "data-000000.tar"
    with tarfile.open(shard, "w") as tar:  # a PNG stored as .png; the recipe reads .jpg
        for name, data in (("s0.png", synth.png(8, 8)), ("s0.cls", b"3")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ds = wds.WebDataset(str(shard), shardshuffle=False).decode("pil").to_tuple("jpg", "cls")
    return _raised(lambda: list(ds))


CASES = {
    "truncated_image": (_pillow_truncated, "a file is cut short"),
    "unidentified_image": (_pillow_unidentified, "a file is not an image Pillow can read"),
    "decompression_bomb": (_pillow_bomb, "an image has more pixels than Pillow's limit"),
    "audio_decode": (_soundfile_garbage, "libsndfile cannot read an audio file"),
    "webdataset_key": (_webdataset_missing_key, "a webdataset sample lacks a key"),
}


@pytest.mark.parametrize("library", sorted(CASES))
def test_a_library_message_alone_names_the_fix(tmp_path, library):
    make, title = CASES[library]
    text = make(tmp_path)
    exp = explain(text)
    assert exp.recognized and exp.kind == EXCEPTION and exp.library == library, text
    assert exp.title.startswith(title)
    fix = next(e.fix for e in LIBRARY_MESSAGES if e.kind == library)
    assert exp.fixes[0] == fix
    assert "exception in Dataset code" not in format_explanation(exp)


def test_a_malformed_wav_and_the_last_line_alone():
    """libsndfile's other wordings; and just the exception's last line, as a user pastes it."""
    text = _soundfile_malformed_wav(__import__("pathlib").Path(__import__("tempfile").mkdtemp()))
    assert explain(text).library == "audio_decode"
    assert explain(text.strip().split("\n")[-1]).library == "audio_decode"
    assert explain("OSError: image file is truncated (3 bytes not processed)").fixes[0].startswith("run dsclean scan")


class _Folder(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        return len(Image.open(self.paths[i]).convert("RGB").tobytes())


def test_a_truncated_image_inside_a_real_dataloader_worker_traceback(tmp_path):
    good = write(tmp_path, "a.jpg", synth.jpeg(16, 16))
    cut = write(tmp_path, "b.jpg", synth.truncate(synth.jpeg(64, 64), 0.5))
    loader = DataLoader(_Folder([str(good), str(cut)]), num_workers=1, batch_size=1)
    text = _raised(lambda: list(loader))
    assert "Caught OSError in DataLoader worker process 0" in text
    exp = explain(text)
    assert exp.kind == EXCEPTION and exp.library == "truncated_image" and exp.worker == 0
    assert exp.title == "a file is cut short (Pillow: image file is truncated)"
    assert exp.fixes[0].startswith("run dsclean scan ROOT --quarantine DIR")
    assert any("--all" in f for f in exp.fixes)  # the worker-exception fixes follow


def _mismatched_torchvision(tmp_path) -> str | None:
    """A torchvision wheel built for another torch (a CUDA build beside this CPU torch), unpacked into tmp_path."""
    wheels = sorted(glob.glob("/opt/pypi-more/files/torchvision-*-cp311-*.whl"))
    if not wheels or sys.version_info[:2] != (3, 11):
        return None
    import zipfile

    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(tmp_path / "site")
    return str(tmp_path / "site")


def test_a_torchvision_built_for_another_torch(tmp_path):
    site = _mismatched_torchvision(tmp_path)
    if site is None:
        pytest.skip("no torchvision wheel of another torch on this machine")
    out = subprocess.run(
        [sys.executable, "-c", "import torchvision"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": site},
    )
    assert out.returncode != 0 and "operator torchvision::nms does not exist" in out.stderr
    exp = explain(out.stderr)
    assert exp.library == "torchvision_mismatch" and "download.pytorch.org/whl/cpu" in exp.fixes[0]
