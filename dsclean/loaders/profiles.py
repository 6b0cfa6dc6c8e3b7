"""The loader profiles: one table, one function a profile, each the library's real call.

A profile's function takes what training would give it (a path, a binary file object, or the file's
bytes) and returns what training would get: a PIL image, a tensor, a numpy array, ``(tensor, rate)``.
:func:`as_array` turns any of them into the numpy array :mod:`.compare` compares.

``pillow`` and ``soundfile`` are dsclean's own default loaders (:mod:`dsclean.data.loaders`): the
reference decodes. The check itself already decides what they read (its Pillow or libjpeg-turbo decode is
stricter than theirs), so they cost nothing unless another profile needs reference pixels.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UserError


@dataclass(frozen=True)
class Profile:
    name: str
    kind: str  # "image" or "audio": the files it loads
    load: Callable[[Any], Any]  # path, binary file object or bytes -> what training gets
    module: str | None  # the library it needs (None: dsclean's own dependencies)
    extra: str | None  # the dsclean extra that installs it
    call: str  # the library call, as docs and messages show it
    reference: bool = False  # dsclean's own default loader: the decode others are compared with


def _bytes(source) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return f.read()
    source.seek(0)
    return source.read()


def _file(source):
    return io.BytesIO(bytes(source)) if isinstance(source, (bytes, bytearray, memoryview)) else source


def load_pillow(source):
    """``Image.open(f).convert("RGB")``: the function dsclean's default image loader is (and torchvision's)."""
    from ..data.loaders import pil_loader

    return pil_loader(_file(source))


def _torchvision(source, exif: bool):
    import torch
    from torchvision.io import ImageReadMode, decode_image

    data = torch.frombuffer(bytearray(_bytes(source)), dtype=torch.uint8)  # = torchvision.io.read_file(path)
    return decode_image(data, mode=ImageReadMode.RGB, apply_exif_orientation=exif)


def load_torchvision(source):
    """``torchvision.io.decode_image(read_file(path), mode=ImageReadMode.RGB)``: a (3, H, W) uint8 tensor."""
    return _torchvision(source, False)


def load_torchvision_exif(source):
    """The same with ``apply_exif_orientation=True`` (the image turned as its EXIF Orientation says)."""
    return _torchvision(source, True)


def load_opencv(source):
    """``cv2.imdecode(buf, cv2.IMREAD_COLOR)`` (= ``cv2.imread(path, IMREAD_COLOR)``): BGR (H, W, 3) uint8, or None."""
    import cv2
    import numpy as np

    return cv2.imdecode(np.frombuffer(_bytes(source), dtype=np.uint8), cv2.IMREAD_COLOR)


def load_soundfile(source):
    """dsclean's default audio loader: ``soundfile.read(f, dtype="float32", always_2d=True)`` as (tensor, rate)
    (soundfile alone: the default loader reads AAC through PyAV, a profile of its own)."""
    from ..data.loaders import soundfile_loader

    return soundfile_loader(_file(source))


def load_torchaudio(source):
    """``torchaudio.load(f)``: ``(float32 tensor (channels, frames), rate)``."""
    import torchaudio

    return torchaudio.load(_file(source))


def load_pyav(source):
    """FFmpeg through PyAV: every frame of the first audio stream as float32, ``(tensor (channels, frames), rate)``."""
    from ..data.loaders import pyav_loader

    return pyav_loader(_file(source))


#: every profile, by the name ``--loader`` takes
PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("pillow", "image", load_pillow, None, None, 'Image.open(f).convert("RGB")', reference=True),
        Profile(
            "torchvision",
            "image",
            load_torchvision,
            "torchvision",
            "torchvision",
            "torchvision.io.decode_image(data, mode=ImageReadMode.RGB)",
        ),
        Profile(
            "torchvision-exif",
            "image",
            load_torchvision_exif,
            "torchvision",
            "torchvision",
            "torchvision.io.decode_image(data, mode=ImageReadMode.RGB, apply_exif_orientation=True)",
        ),
        Profile("opencv", "image", load_opencv, "cv2", "opencv", "cv2.imdecode(buf, cv2.IMREAD_COLOR)"),
        Profile(
            "soundfile",
            "audio",
            load_soundfile,
            None,
            None,
            'soundfile.read(f, dtype="float32", always_2d=True)',
            reference=True,
        ),
        Profile("torchaudio", "audio", load_torchaudio, "torchaudio", "torchaudio", "torchaudio.load(f)"),
        Profile("pyav", "audio", load_pyav, "av", "av", "av.open(f) + decode every frame of the first audio stream"),
    )
}
#: the profile dsclean's default loaders are, per kind
DEFAULT = {"image": "pillow", "audio": "soundfile"}
#: the reference profile a kind's other profiles are compared with
REFERENCE = DEFAULT


def profile(name: str) -> Profile:
    """The profile called ``name``; a clear error naming the known ones."""
    if name not in PROFILES:
        raise UserError(f"unknown loader profile {name!r}: use one of {', '.join(PROFILES)}")
    return PROFILES[name]


def normalize(names) -> tuple[str, ...]:
    """Profile names from ``--loader`` (repeatable, comma-separated too), known, de-duplicated, sorted."""
    out = sorted({n.strip() for item in names for n in str(item).split(",") if n.strip()})
    for name in out:
        profile(name)
    return tuple(out)


def require(names) -> None:
    """Import every named profile's library now: a missing (or broken) one is a :class:`UserError` naming the extra."""
    import importlib

    for name in names:
        p = profile(name)
        if p.module is None:
            continue
        try:
            importlib.import_module(p.module)
        except Exception as exc:  # ImportError, or a build that does not match torch (RuntimeError, OSError)
            raise UserError(_missing(p, exc)) from None


def _missing(p: Profile, exc: BaseException) -> str:
    try:
        import torch

        torch_version = f"torch {torch.__version__}"
    except Exception:  # no torch at all: the message still names the extra
        torch_version = "no torch"
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:200]
    return (
        f"--loader {p.name} needs the {p.module} package, which cannot be imported here ({type(exc).__name__}: "
        f"{first}): install the extra, pip install 'dsclean[{p.extra}]', with a build matching {torch_version}"
    )


def as_array(p: Profile, out):
    """A profile's output as numpy for comparison: images (H, W, C) RGB in their own dtype; audio ((channels,
    frames) float32, rate). None when the loader returned nothing."""
    import numpy as np

    if out is None:
        return None
    if p.kind == "audio":
        samples, rate = out
        return np.asarray(samples, dtype=np.float32), int(rate)
    if p.name == "opencv":
        return np.ascontiguousarray(out[..., ::-1]) if out.ndim == 3 else out[..., None]  # BGR -> RGB
    if hasattr(out, "numpy"):  # a torch tensor (C, H, W)
        return np.ascontiguousarray(out.numpy().transpose(1, 2, 0))
    arr = np.asarray(out)
    return arr if arr.ndim == 3 else arr[..., None]


class ProfileLoader:
    """A dataset's loader for a profile: the profile's load function for the files of its kind, dsclean's default
    profile for the other kind (an opencv index may hold sounds too). Picklable (DataLoader workers)."""

    def __init__(self, name: str) -> None:
        self.name = profile(name).name

    def __call__(self, source):
        p = PROFILES[self.name]
        if isinstance(source, (str, os.PathLike)):
            from ..formats import format_of_name, kind_of

            fmt = format_of_name(os.fspath(source))
            if fmt and kind_of(fmt) != p.kind:
                p = PROFILES[DEFAULT[kind_of(fmt)]]
        return p.load(source)

    def __repr__(self) -> str:
        return f"ProfileLoader({self.name!r})"
