"""Default sample loaders: images as PIL RGB (torchvision's rule), audio as (tensor, rate).

Each takes a path, or a binary file object (a packed set's samples are decoded from memory).
"""
from __future__ import annotations

import os
from typing import BinaryIO

import numpy as np
import torch

from ..openfile import open_regular_file


def pil_loader(path: str | BinaryIO):
    """torchvision's default: open with Pillow and convert to RGB (forces the decode here)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        return open_image(path).convert("RGB")
    with open_regular_file(path) as f:  # a FIFO in the dataset is refused, never waited on
        img = open_image(f)
        return img.convert("RGB")


_PLUGINS_TRIED = False


def open_image(f: BinaryIO):
    """``Image.open``, and for a format Pillow only reads through an installed plugin (HEIF/HEIC:
    ``pillow-heif``, JPEG XL: ``pillow-jxl-plugin``, the extras ``dsclean[heif]``/``[jxl]``), the
    plugin registered on the first file Pillow cannot identify: nothing is imported for other sets."""
    global _PLUGINS_TRIED
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(f)
    except UnidentifiedImageError:
        if _PLUGINS_TRIED:
            raise
        _PLUGINS_TRIED = True
        import importlib
        import importlib.util

        registered = False
        for module in ("pillow_heif", "pillow_jxl"):  # importing pillow_jxl registers it; pillow_heif is asked to
            if importlib.util.find_spec(module) is not None:
                plugin = importlib.import_module(module)
                if module == "pillow_heif":
                    plugin.register_heif_opener()
                registered = True
        if not registered:
            raise
        f.seek(0)
        return Image.open(f)


def lenient_pil_loader(path: str | BinaryIO):
    """:func:`pil_loader`, but a JPEG Pillow refuses (cut short: "image file is truncated") is decoded the way
    ``scan --lenient`` accepted it: libjpeg-turbo in its recovering mode, the missing rows grey.

    The default image loader of an index built with ``--include-warn truncated`` (or ``corrupt``) only:
    nothing global changes (Pillow's ``LOAD_TRUNCATED_IMAGES`` stays as it is).
    """
    try:
        return pil_loader(path)
    except OSError:
        if isinstance(path, (str, bytes, os.PathLike)):
            with open_regular_file(path) as f:
                data = f.read()
        else:
            path.seek(0)
            data = path.read()
        if data[:2] != b"\xff\xd8":  # not a JPEG: Pillow's error stands
            raise
        import simplejpeg
        from PIL import Image

        return Image.fromarray(simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False))


def audio_loader(path: str | BinaryIO) -> tuple[torch.Tensor, int]:
    """``(float32 tensor shaped (channels, frames), sample_rate)`` via soundfile."""
    import soundfile

    if isinstance(path, (str, bytes, os.PathLike)):
        with open_regular_file(path) as f:  # (libsndfile's own open would block on a FIFO)
            data, rate = soundfile.read(f, dtype="float32", always_2d=True)
    else:
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.T)), int(rate)


DEFAULT_LOADERS = {"image": pil_loader, "audio": audio_loader}
#: the default loaders of an index that ships warnings scan --lenient accepted (``meta["include_warn"]``)
LENIENT_LOADERS = {"image": lenient_pil_loader, "audio": audio_loader}
