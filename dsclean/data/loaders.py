"""Default sample loaders: images as PIL RGB (torchvision's rule), audio as (tensor, rate).

Each takes a path, or a binary file object (a packed set's samples are decoded from memory).
"""
from __future__ import annotations

import os
from typing import BinaryIO

import numpy as np
import torch


def pil_loader(path: str | BinaryIO):
    """torchvision's default: open with Pillow and convert to RGB (forces the decode here)."""
    from PIL import Image

    if not isinstance(path, (str, bytes, os.PathLike)):
        return Image.open(path).convert("RGB")
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def audio_loader(path: str | BinaryIO) -> tuple[torch.Tensor, int]:
    """``(float32 tensor shaped (channels, frames), sample_rate)`` via soundfile."""
    import soundfile

    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.T)), int(rate)


DEFAULT_LOADERS = {"image": pil_loader, "audio": audio_loader}
