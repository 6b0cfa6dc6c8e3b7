"""The one list of verdict statuses and reason codes.

Every verdict dsclean writes has a ``status`` (``ok`` / ``warn`` / ``bad``) and,
unless it is ``ok``, a ``reason`` taken from :data:`REASONS`. Reports, the CLI
summary and docs/reference/reasons.md are all generated from this module.
"""

from __future__ import annotations

OK = "ok"
WARN = "warn"
BAD = "bad"
STATUSES = (OK, WARN, BAD)

TRUNCATED = "truncated"
CORRUPT = "corrupt"
NOT_MEDIA = "not_media"
EMPTY = "empty"
DECOMPRESSION_BOMB = "decompression_bomb"
UNSUPPORTED = "unsupported"
UNREADABLE = "unreadable"
EXTENSION_MISMATCH = "extension_mismatch"
INVALID_SAMPLES = "invalid_samples"
VANISHED = "vanished"
CHANGED = "changed"
DECODER_CRASH = "decoder_crash"
TIMEOUT = "timeout"
TOO_LARGE = "too_large"
NONCONFORMING = "nonconforming"
NOT_REGULAR = "not_regular"
LOADER_FAILS = "loader_fails"
LOADER_DIFFERS = "loader_differs"

# what silently changes the data (issue 27): warnings, never moved (bad only under scan --strict-expect)
HIGH_BIT_DEPTH = "high_bit_depth"
CMYK = "cmyk"
YCCK = "ycck"
EXIF_ROTATED = "exif_rotated"
PALETTE_TRANSPARENCY = "palette_transparency"
ALPHA = "alpha"
GRAYSCALE = "grayscale"
MODE_MISMATCH = "mode_mismatch"
TOO_SMALL = "too_small"
ASPECT_RATIO = "aspect_ratio"
SAMPLE_RATE_MISMATCH = "sample_rate_mismatch"
CHANNEL_MISMATCH = "channel_mismatch"
TOO_SHORT = "too_short"

DUPLICATE = "duplicate"
FLAGGED = "flagged"

# a shard set written by another tool (dsclean.shardsets): what breaks the readers that stream it
BROKEN_SHARD = "broken_shard"
DUPLICATE_KEY = "duplicate_key"
SPLIT_SAMPLE = "split_sample"
MISSING_SHARD = "missing_shard"

#: reason code -> what it means (shown by ``dsclean reasons`` and in docs/reference/reasons.md)
REASONS: dict[str, str] = {
    TRUNCATED: "the file ends early: missing end marker, fewer bytes or frames than its header promises",
    CORRUPT: "the data is damaged: decoder error or warning, bad chunk CRC, broken container structure",
    NOT_MEDIA: "the content is not the media its extension claims (e.g. an HTML page saved as .jpg)",
    EMPTY: "zero bytes, a zero-sized image, or audio with zero frames",
    DECOMPRESSION_BOMB: "the image declares more pixels than the limit (Pillow's MAX_IMAGE_PIXELS, --max-pixels)",
    UNSUPPORTED: "a whole media file (its structure checked) that a decoder cannot read: a variant or a library limit, "
    "not damage; a warning, never moved (the detail names the decoders tried and which read it)",
    LOADER_FAILS: "a whole file the training loader named in --loader cannot open (it raises or returns nothing); a warning",
    LOADER_DIFFERS: "a --loader decodes a whole file to another shape or other pixels/samples than the reference "
    "decode (pillow, soundfile) beyond rounding; a warning",
    UNREADABLE: "the file cannot be read: permission denied, I/O error, broken symlink",
    EXTENSION_MISMATCH: "valid media whose extension names another format (e.g. a PNG saved as .jpg); a warning",
    INVALID_SAMPLES: "float audio containing NaN, Inf or absurd magnitudes",
    VANISHED: "the file disappeared between discovery and check; a warning",
    CHANGED: "the file changed (size or mtime) while it was being checked; a warning: scan again later",
    DECODER_CRASH: "checking the file killed the decoder's process (segfault, abort, ...); the signal is in the detail",
    TIMEOUT: "checking the file took longer than --timeout seconds",
    TOO_LARGE: "checking the file needed more memory than --max-memory allows (bad); or than the default ceiling "
    "per check (a warning: never moved; raise --max-memory to check it)",
    NONCONFORMING: "breaks a rule of its format that common decoders tolerate (e.g. an ID3v2 tag before a FLAC stream, "
    "junk after the last MP3 frame, data after a PNG's zlib stream); a warning",
    NOT_REGULAR: "a FIFO, socket or device named like media: never opened, never moved, not indexed; a warning",
    HIGH_BIT_DEPTH: 'a 16-bit or 32-bit image: an 8-bit RGB conversion saturates it (torchvision\'s convert("RGB") '
    "turns a 16-bit grey PNG white) or truncates it; dsclean's default loader scales it; a warning",
    CMYK: "a CMYK JPEG: its colours depend on the decoder and on the Adobe APP14 marker (inverted or not); "
    "some decoders refuse it; a warning",
    YCCK: "a YCCK JPEG (Adobe transform 2): the colour transform depends on the decoder; a warning",
    EXIF_ROTATED: "EXIF orientation 2-8: loaders that apply it and loaders that do not disagree on the shape "
    "(boxes, masks); scan --exif apply makes the default loader apply it; a warning",
    PALETTE_TRANSPARENCY: 'a palette image with a transparent colour (PNG tRNS, GIF): convert("RGB") drops '
    "the transparency; a warning",
    ALPHA: "has an alpha channel in a set that is otherwise opaque (or scan --expect asks for a mode without one); "
    "a warning",
    GRAYSCALE: "a greyscale image in a colour set (or scan --expect mode=RGB); a warning",
    MODE_MISMATCH: "an image mode that is not the set's (inferred norm or scan --expect mode=); a warning",
    TOO_SMALL: "shorter side below scan --expect min-side; a warning",
    ASPECT_RATIO: "longer side more than scan --expect max-aspect times the shorter; a warning",
    SAMPLE_RATE_MISMATCH: "a sample rate that is not the set's (inferred norm or scan --expect sample-rate=): a "
    "model hears it pitch-shifted, batching fails; a warning",
    CHANNEL_MISMATCH: "a channel count that is not the set's (inferred norm or scan --expect channels=): "
    "default_collate cannot stack it; a warning",
    TOO_SHORT: "a clip far shorter than the set's (under a tenth of its median) or than scan --expect "
    "min-duration; a warning",
    DUPLICATE: "an extra copy of a file kept elsewhere (exact or near duplicate); moved only by dsclean dups --quarantine",
    FLAGGED: "a whole file with a quality flag named in scan --quarantine-flags (the flag is in the detail); moved only when asked",
    BROKEN_SHARD: "a shard whose container cannot be read to its end (a broken tar header, a damaged gzip stream, "
    "a hash that does not match its index, a non-file member): readers stop or fail there",
    DUPLICATE_KEY: "a sample key (or one member name within a sample) that appears twice: webdataset raises "
    "ValueError, readers keyed by sample see one of them",
    SPLIT_SAMPLE: "members of one sample key that are not adjacent in the tar: a streaming reader (webdataset) "
    "yields them as two incomplete samples",
    MISSING_SHARD: "a shard the set names (brace pattern, numbering, index.json) that is not there",
}

#: reasons whose verdict is no judgement of the file's bytes: the check could not finish (the machine, the
#: moment or a ceiling stopped it). A ``warn`` with one of these means "not judged": ``dsclean index`` checks
#: the file again and, still not judged, leaves it out (``--include-warn REASON`` ships it anyway).
NOT_JUDGED = frozenset({VANISHED, CHANGED, UNREADABLE, TIMEOUT, TOO_LARGE, DECODER_CRASH, NOT_REGULAR})
#: reasons a ``warn`` carries when ``scan --lenient`` accepted damage a decoder recovered from (a JPEG cut short,
#: corrupt entropy data): Pillow's default loader refuses such a file, so ``dsclean index`` leaves it out
#: unless ``--include-warn REASON`` asks for it
LENIENT = frozenset({TRUNCATED, CORRUPT})
#: what ``dsclean index`` does with a ``warn`` verdict of each reason: the ones it leaves out unless asked, and why
#: (the rest, e.g. ``nonconforming``, are files every common decoder reads: shipped)
LEFT_OUT_WARNINGS: dict[str, str] = {
    TOO_LARGE: "not judged: checking needed more memory than the default ceiling per check; re-scan with a higher "
    "--max-memory (e.g. 8G, or none) to judge them",
    CHANGED: "not judged: the file changed while it was being checked; scan again when it is complete",
    TIMEOUT: "not judged: the check took longer than --timeout",
    DECODER_CRASH: "not judged: the check killed the decoder",
    UNREADABLE: "not judged: the file could not be read",
    TRUNCATED: "cut short, accepted by scan --lenient: Pillow's default loader refuses a truncated image",
    CORRUPT: "damaged, accepted by scan --lenient: a decoder recovered from it, a strict one may not",
    UNSUPPORTED: "a decoder's limit: the default loader (Pillow, soundfile) cannot read it; ships with "
    "--include-warn unsupported (e.g. for an index built for a --loader that reads it)",
    LOADER_FAILS: "the loader the index is built for (--loader) cannot open it",
    EXTENSION_MISMATCH: "only when the content is another kind than the extension says (a WAV named .jpg): the "
    "loader and transforms of an image dataset fail on a sound; a PNG named .jpg is indexed",
}
#: reasons in :data:`LEFT_OUT_WARNINGS` that leave a file out only when its content's kind (image, audio) is not
#: the one its extension names
KIND_CHANGE_ONLY = frozenset({EXTENSION_MISMATCH})

#: the warnings of issue 27: what silently changes the data a loader returns. Never moved (``bad`` only under
#: ``scan --strict-expect``); ``dsclean index`` ships them unless ``--exclude-warn REASON`` leaves them out
CONSISTENCY = frozenset(
    {
        HIGH_BIT_DEPTH,
        CMYK,
        YCCK,
        EXIF_ROTATED,
        PALETTE_TRANSPARENCY,
        ALPHA,
        GRAYSCALE,
        MODE_MISMATCH,
        TOO_SMALL,
        ASPECT_RATIO,
        SAMPLE_RATE_MISMATCH,
        CHANNEL_MISMATCH,
        TOO_SHORT,
    }
)
