"""Per-file quality facts and flags: what an image or a sound *is*, beyond being decodable.

Pure functions of pixels, samples or a path; nothing here writes anything.
Two ways in, one computation:

- from what a decoder already produced (the scan's own decode):
  :func:`image_facts` on a grey (or RGB) thumbnail, :class:`AudioStats` fed block by block;
- from a path (:func:`image_facts_from_path`, :func:`audio_facts_from_path`), decoding as
  little as possible (Pillow ``draft``/``reduce``, soundfile blocks), for files whose check
  does not decode pixels and for roots never scanned.

Flags (``dark``, ``silent``, ...) are derived from the facts by :func:`image_flags` /
:func:`audio_flags` with thresholds from :class:`FlagOptions`. The Arrow types of the
fact columns are :data:`dsclean.quality.columns.FACT_COLUMNS` (imports pyarrow; the rest
of this package does not). Modules: :mod:`.thumbnail` (the canonical grey thumbnail),
:mod:`.phash`, :mod:`.image`, :mod:`.audio`, :mod:`.flags`, :mod:`.facts` (one file's
record), :mod:`.columns`, :mod:`.compare` (the fine check dups runs on candidate pairs).
"""
