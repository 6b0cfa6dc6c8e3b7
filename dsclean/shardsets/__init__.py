"""Stage: shard sets written by other tools (WebDataset tars, Mosaic MDS, litdata chunks, Parquet), checked.

``dsclean scan SHARDS`` and ``dsclean verify SHARDS`` read every sample of another tool's shards through
plain file objects and judge its bytes with the scan's own checker
(:func:`dsclean.scanning.check.check_bytes`, in the scan's isolated pool), naming the shard and the
member, key or row of each problem. Modules: :mod:`.detect` (what a path, a list of paths or a brace
pattern holds), :mod:`.events` (what a reader yields), one reader per format (:mod:`.webdataset`,
:mod:`.parquet`, :mod:`.mds`, :mod:`.litdata`), :mod:`.results` (the results table with its shard
columns), :mod:`.run` (``scan_shard_set`` and ``verify_shard_set``). "Quarantine" of a sample inside a
shard is a line of the shard set's deny-list (:mod:`dsclean.denylist`): shards are never rewritten.
"""
