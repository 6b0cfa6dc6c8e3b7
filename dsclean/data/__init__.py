"""The Dataset stage: PyTorch datasets over a dsclean index, with flat worker memory.

- :mod:`.dataset`: :class:`~dsclean.data.dataset.IndexedDataset`
- :mod:`.shards`: reading samples out of a packed shard set (``dsclean pack``)
- :mod:`.loaders`: default image and audio loaders
- :mod:`.collate`: :func:`~dsclean.data.collate.collate_skip_none`
"""
