"""Batch collation for datasets that skip failed samples (``on_error="skip"``)."""

from __future__ import annotations

import torch
from torch.utils.data import default_collate

#: the structure of the last batch collated in this process, with a batch size of 0
_empty_like_last = None


def collate_skip_none(batch: list):
    """Drop ``None`` samples (``on_error="skip"``), then ``default_collate`` the rest.

    A batch where every sample failed becomes an EMPTY batch of the same structure
    (batch dimension 0), so ``for x, y in loader:`` goes on: tensors keep the
    shape and dtype of the last batch this process collated, with 0 rows (before
    any good batch: ``(tensor([]), tensor([], dtype=int64))``, the ``(sample,
    label)`` pair of :class:`~dsclean.IndexedDataset`). Skip it with
    ``if len(y) == 0: continue`` where an empty step would upset the model.
    Each skipped sample was logged by the guard that skipped it (``dsclean.guard``).
    """
    global _empty_like_last
    kept = [b for b in batch if b is not None]
    if not kept:
        if _empty_like_last is not None:
            return _empty_like_last
        return torch.empty(0), torch.empty(0, dtype=torch.int64)
    out = default_collate(kept)
    _empty_like_last = _empty(out)
    return out


def _empty(batch):
    """``batch`` with every tensor cut to 0 rows (the same nesting, shapes after the first and dtypes)."""
    if isinstance(batch, torch.Tensor):
        return batch[:0].clone()
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_empty(b) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_empty(b) for b in batch)
    if isinstance(batch, dict):
        return {k: _empty(v) for k, v in batch.items()}
    return []  # e.g. a list of strings: no items
