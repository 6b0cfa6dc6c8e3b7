"""Issue 27, section 2: the torchvision loader profiles through the real torchvision (this folder runs in the
second venv, whose torchvision is built for its torch). Each expectation is checked against a direct call of
the library, so the test follows what torchvision really does on each file."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from support.loadermedia import jpeg, jpeg_with_orientation, picture, png16
from torchvision.io import ImageReadMode, decode_image

from dsclean import reasons as R
from dsclean.data.loaders import pil_loader
from dsclean.loaders import compare, profiles
from dsclean.scanning.check import CheckOptions, check_bytes

TV = CheckOptions(loaders=("torchvision",))
TV_EXIF = CheckOptions(loaders=("torchvision-exif",))


def png(img: Image.Image) -> bytes:
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def direct(data: bytes, exif: bool = False) -> np.ndarray:
    """The call training makes: decode_image(read_file(path), mode=RGB), as an HxWx3 array."""
    t = decode_image(
        torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB, apply_exif_orientation=exif
    )
    return np.ascontiguousarray(t.permute(1, 2, 0).numpy())


@pytest.mark.parametrize(
    "name,data",
    [
        ("plain.jpg", lambda: jpeg(picture())),
        ("progressive.jpg", lambda: jpeg(picture(), progressive=True)),
        ("grey.jpg", lambda: jpeg(picture().convert("L"))),
        ("rgb.png", lambda: png(picture())),
        ("palette.png", lambda: png(picture().convert("P"))),
    ],
)
def test_torchvision_agrees_with_pillow_on_ordinary_images(name, data):
    blob = data()
    assert compare.image_difference(np.asarray(pil_loader(io.BytesIO(blob))), direct(blob)) is None
    for options in (TV, TV_EXIF):
        v = check_bytes(blob, name, options)
        assert (v.status, v.reason) == (R.OK, None), v.detail


def test_the_profile_loads_what_torchvision_returns():
    blob = jpeg(picture())
    got = profiles.load_torchvision(blob)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.uint8 and tuple(got.shape) == (3, 48, 64)
    assert np.array_equal(got.permute(1, 2, 0).numpy(), direct(blob))


def test_exif_orientation_turns_only_the_exif_profile():
    """Orientation 6 (a quarter turn): decode_image(apply_exif_orientation=True) turns the image, Pillow's
    convert('RGB') and the plain torchvision profile do not."""
    blob = jpeg_with_orientation(picture(64, 48), 6)
    assert direct(blob).shape == (48, 64, 3) and direct(blob, exif=True).shape == (64, 48, 3)
    plain = check_bytes(blob, "turned.jpg", TV)
    assert (plain.status, plain.reason) == (R.WARN, R.EXIF_ROTATED), plain.detail  # issue 27's warning, no loader one
    turned = check_bytes(blob, "turned.jpg", TV_EXIF)
    assert (turned.status, turned.reason) == (R.WARN, R.LOADER_DIFFERS), turned.detail
    # shapes read width x height x channels
    assert "decoder said" not in turned.detail, turned.detail  # torchvision's DeprecationWarning is not about the file
    assert "--loader torchvision-exif: shape 48x64x3, the reference decode's is 64x48x3 (pillow)" in turned.detail
    upright = check_bytes(jpeg_with_orientation(picture(64, 48), 1), "upright.jpg", TV_EXIF)
    assert upright.status == R.OK, upright.detail


@pytest.mark.parametrize("name,data", [("cmyk.jpg", lambda: jpeg(picture().convert("CMYK"))), ("deep.png", png16)])
def test_the_verdict_follows_what_torchvision_really_does(name, data):
    """CMYK JPEG and 16-bit PNG: whatever this torchvision does with them, the check reports it exactly:
    loader_fails when the call raises, loader_differs when its pixels differ from the reference decode."""
    blob = data()
    try:
        diff = compare.image_difference(np.asarray(pil_loader(io.BytesIO(blob))), direct(blob))
        raised = None
    except Exception as e:  # what torchvision raises on this file is the fact under test
        diff, raised = None, e
    v = check_bytes(blob, name, TV)
    if raised is not None:
        assert v.reason == R.LOADER_FAILS and "--loader torchvision" in v.detail, v.detail
    elif diff is not None:
        assert v.reason == R.LOADER_DIFFERS and "--loader torchvision" in v.detail, v.detail
    else:
        assert v.reason not in (R.LOADER_FAILS, R.LOADER_DIFFERS), v.detail


def test_a_truncated_jpeg_is_bad_before_any_loader_is_asked():
    blob = jpeg(picture(256, 256))
    v = check_bytes(blob[: len(blob) // 2], "cut.jpg", TV)
    assert v.status == R.BAD, v.detail


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "dsclean", *map(str, args)], capture_output=True, text=True, timeout=300
    )


def test_scan_index_and_dataset_for_the_torchvision_loader(tmp_path):
    """scan/index --loader torchvision end to end, and IndexedDataset loading through torchvision in real
    DataLoader workers."""
    root = tmp_path / "data"
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        (root / cls / "x.jpg").write_bytes(jpeg(picture()))
        (root / cls / "y.png").write_bytes(png(picture(32, 32)))
    (root / "a" / "turned.jpg").write_bytes(jpeg_with_orientation(picture(64, 48), 6))
    env_state = ["--state-dir", tmp_path / "state"]
    proc = run_cli("scan", root, "--loader", "torchvision-exif", "--jobs", "1", "--json", *env_state)
    assert proc.returncode == 0, proc.stderr
    assert '"loader_differs": 1' in proc.stdout
    out = tmp_path / "tv.arrow"
    proc = run_cli("index", root, "-o", out, "--loader", "torchvision", "--jobs", "1", *env_state)
    assert proc.returncode == 0, proc.stderr

    from torch.utils.data import DataLoader

    from dsclean import IndexedDataset

    ds = IndexedDataset(out, loader_profile="torchvision")
    assert ds.meta["loaders"] == ["torchvision"]
    names = sorted(os.path.basename(ds.path(i)) for i in range(len(ds)))
    assert names == ["turned.jpg", "x.jpg", "x.jpg", "y.png", "y.png"]
    shapes = []
    for img, _label in DataLoader(ds, batch_size=None, num_workers=2):
        assert isinstance(img, torch.Tensor) and img.dtype == torch.uint8 and img.shape[0] == 3
        shapes.append(tuple(img.shape))
    assert sorted(shapes).count((3, 48, 64)) == 3 and sorted(shapes).count((3, 32, 32)) == 2
