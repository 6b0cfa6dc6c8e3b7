"""The index stage: a compact, memory-mappable index of the files that survived the scan.

- :mod:`.build`: stream the tree into the index, leaving out bad files (``build_index``)
- :mod:`.options`: what a build can be told (``IndexOptions``)
- :mod:`.walk`: the tree's media files as record batches, and its fingerprint
- :mod:`.judge`: which files go in, from the scan's verdicts or a check made here
- :mod:`.write`: the kept rows, sorted into index order and written
- :mod:`.summary`: what a build did (``IndexSummary``) and its notes
- :mod:`.checking`: check the files the scan did not cover (never scanned, changed, restored)
- :mod:`.folder`: index a folder on the spot into its state folder (``IndexedDataset.from_folder``)
- :mod:`.store`: the on-disk formats (Arrow IPC, npy folder): write, map, describe
- :mod:`.labels`: ImageFolder classes and order, or labels from a CSV

Never imports torch: the Dataset that reads an index is :mod:`dsclean.data`.
"""
