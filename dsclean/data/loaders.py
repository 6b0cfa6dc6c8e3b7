"""Default sample loaders: images as PIL RGB (torchvision's rule), audio as (tensor, rate)."""
from __future__ import annotations

import numpy as np
import torch


def pil_loader(path: str):
    """torchvision's default: open with Pillow and convert to RGB (forces the decode here)."""
    from PIL import Image

    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def audio_loader(path: str) -> tuple[torch.Tensor, int]:
    """``(float32 tensor shaped (channels, frames), sample_rate)`` via soundfile."""
    import soundfile

    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.T)), int(rate)


DEFAULT_LOADERS = {"image": pil_loader, "audio": audio_loader}
