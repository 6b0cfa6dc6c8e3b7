"""Per-file quality facts and flags: what an image or a sound *is*, beyond being decodable.

Pure functions of pixels, samples or a path; nothing here writes anything.
Two ways in, one computation:

- from what a decoder already produced (the scan's own decode):
  :func:`.image.image_facts` on a grey (or RGB) thumbnail, :class:`.audio.AudioStats` fed
  block by block;
- from a path (:func:`dsclean.quality.files.facts_from_path`: content hash, then image or
  audio facts), decoding as little as possible (Pillow ``draft``/``reduce``, soundfile
  blocks), for files whose check does not decode pixels and for roots never scanned.

Flags (``dark``, ``silent``, ...) are derived from the facts by :func:`.flags.image_flags` /
:func:`.flags.audio_flags` with thresholds from :class:`FlagOptions`. The Arrow types of the
fact columns are :data:`dsclean.quality.columns.FACT_COLUMNS` (imports pyarrow; the rest
of this package does not). Modules: :mod:`.thumbnail` (the canonical grey thumbnail),
:mod:`.phash`, :mod:`.image`, :mod:`.audio`, :mod:`.flags`, :mod:`.facts` (one file's
record), :mod:`.columns`, :mod:`.files` (facts from a path), :mod:`.compare` (the fine
check dups runs on candidate pairs).
"""

#: the fine check's default correlation threshold (defined here so the CLI can show it without numpy;
#: :mod:`.compare` uses it)
DEFAULT_MIN_CORRELATION = 0.75
