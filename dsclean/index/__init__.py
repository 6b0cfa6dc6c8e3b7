"""The index stage: a compact, memory-mappable index of the files that survived the scan.

- :mod:`.build`: stream the tree into the index, leaving out bad files
- :mod:`.checking`: check the files the scan did not cover (never scanned, changed, restored)
- :mod:`.folder`: index a folder on the spot into its state folder (``IndexedDataset.from_folder``)
- :mod:`.store`: the on-disk formats (Arrow IPC, npy folder): write, map, describe
- :mod:`.labels`: ImageFolder classes and order, or labels from a CSV

Never imports torch: the Dataset that reads an index is :mod:`dsclean.data`.
"""
