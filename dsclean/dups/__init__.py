"""Exact and near duplicates over one or more roots, and leakage across splits (``dsclean dups``).

:mod:`.collect` gathers each file's content hash and perceptual hash (from scan
results, else computed in :mod:`.worker` processes run by :mod:`.pool`);
:mod:`.search` finds hash pairs within K bits without comparing all pairs (textures,
whose perceptual hash is unstable, also on anti-aliased hashes: :mod:`dsclean.quality.texture`);
:mod:`.grouping` confirms them with the fine check and forms groups;
:mod:`.finder` is the API; :mod:`.moves` quarantines extra copies.
"""

#: default ``--near``: Hamming distance on the 64-bit hash (docs/how-to/dups.md "Why K = 8": recall and search cost measured)
DEFAULT_NEAR = 8
