"""The Dataset stage: PyTorch datasets over a dsclean index, with flat worker memory.

- :mod:`.dataset`: :class:`~dsclean.data.dataset.IndexedDataset`
- :mod:`.shards`: reading samples out of a packed shard set (``dsclean pack``)
- :mod:`.loaders`: default image and audio loaders
- :mod:`.collate`: :func:`~dsclean.data.collate.collate_skip_none`
- :mod:`.guard`: ``dsclean.guard``, any dataset's per-sample failures named, skipped or replaced
  (``IndexedDataset(on_error=...)`` runs one), with :mod:`.slots`, the workers' shared table
- :mod:`.errors`: ``SampleError``, ``UnsafePathError``, ``TooManyFailures``
"""
