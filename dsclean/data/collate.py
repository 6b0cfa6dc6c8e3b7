"""Batch collation for datasets that skip failed samples (``on_error="skip"``)."""
from __future__ import annotations

from torch.utils.data import default_collate


def collate_skip_none(batch: list):
    """Drop ``None`` samples (``on_error="skip"``) then ``default_collate``.

    A batch where every sample failed returns ``None``: skip it in the training loop
    (``if batch is None: continue``).
    """
    kept = [b for b in batch if b is not None]
    if not kept:
        return None
    return default_collate(kept)
