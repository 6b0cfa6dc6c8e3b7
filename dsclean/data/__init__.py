"""The Dataset stage: PyTorch datasets over a dsclean index, with flat worker memory.

- :mod:`.dataset`: :class:`~dsclean.data.dataset.IndexedDataset`
- :mod:`.loaders`: default image and audio loaders
- :mod:`.collate`: :func:`~dsclean.data.collate.collate_skip_none`
"""
