"""The scan's quality facts: from what a checker decoded anyway to the verdict's fact fields.

Checkers call these with their own decode (``CheckOptions.facts`` on): the JPEG check's
scaled grey pixels, the Pillow frame the other image checks load, the audio blocks the
audio checks decode; PNG (whose check unfilters no pixel) and raw PCM WAV (whose samples
are not decoded) are the exceptions, read here once more. The computations are
:mod:`dsclean.quality`'s; this module only feeds them and copies the results into the
:class:`~dsclean.scanning.verdict.Verdict`.

Facts never change a verdict: a picture whose facts cannot be computed (an exotic pixel
mode, a decode Pillow refuses where the integrity check passed, no memory left for it)
keeps null facts. Flags are derived later, in the scan's main process
(:func:`flags_of`), so a change of threshold needs no re-check.
"""

from __future__ import annotations

import contextlib
import io
import threading
import warnings
from typing import TYPE_CHECKING, Iterator

import numpy as np

from .. import reasons as R
from ..quality.audio import AudioFacts, AudioStats
from ..quality.flags import FlagOptions, audio_flags, image_flags
from .verdict import Verdict

if TYPE_CHECKING:
    from ..quality.image import ImageFacts

#: what a decoded picture's facts may raise that says nothing about the file's integrity:
#: a mode Pillow cannot convert to grey (ValueError/OSError), no memory left for a thumbnail
_FACT_ERRORS = (ValueError, OSError, TypeError, MemoryError)


_quality_image = None


def _image():
    """:mod:`dsclean.quality.image` (Pillow), imported on first use: a scan of sounds never loads Pillow."""
    global _quality_image
    if _quality_image is None:
        from ..quality import image

        _quality_image = image
    return _quality_image


def from_grey(v: Verdict, grey: np.ndarray, *, colour_stored: bool, orientation: int | None) -> None:
    """Facts of an image from a grey decode (the JPEG check's, at least :func:`decode_side` pixels each way
    unless the image is smaller), (H, W) or (H, W, 1) uint8.

    Inside :func:`batched` the decode is queued and its facts filled in with the batch's (same values)."""
    if grey.ndim == 3:
        grey = grey[..., 0]
    queue = getattr(_batch, "queue", None)
    if queue is None:
        # a grey decode of a colour file cannot tell whether its channels are equal: grayscale stays unknown
        v.set_facts(
            _image().image_facts(grey, colour_stored=False if not colour_stored else None, orientation=orientation)
        )
        return
    queue.append((v, grey, colour_stored, orientation))
    if len(queue) >= BATCH:
        _flush(queue)


def decode_side() -> int:
    """The fewest pixels each way a decode for facts keeps: the canonical thumbnail's side
    (:data:`dsclean.quality.thumbnail.SIZE`; imported here only when a scan takes facts)."""
    from ..quality.thumbnail import SIZE

    return SIZE


#: decodes whose facts are computed together: enough to share each numpy call's cost, few enough that the
#: batch's arrays (32 x 32 KB per step) stay in the CPU's cache
BATCH = 32
#: the queue :func:`from_grey` fills in this thread (None outside :func:`batched`)
_batch = threading.local()


@contextlib.contextmanager
def batched() -> Iterator[None]:
    """Within this block (a worker's chunk of checks), :func:`from_grey` queues each JPEG decode and computes
    the facts of :data:`BATCH` of them at a time (:func:`~dsclean.quality.image.grey_facts_batch`); the last
    ones when the block ends, so every verdict has its facts by then. The values are those of one picture
    at a time, for less CPU in the scan (BENCHMARKS.md "What the quality facts cost the scan"). If the block raises, the queued
    verdicts keep null facts (the chunk is lost or re-checked anyway)."""
    queue: list = []
    outer = getattr(_batch, "queue", None)
    _batch.queue = queue
    try:
        yield
        _flush(queue)
    finally:
        _batch.queue = outer


def _flush(queue: list) -> None:
    """Compute the queued decodes' facts and copy them into their verdicts."""
    if not queue:
        return
    try:
        results = _image().grey_facts_batch([q[1] for q in queue])
    except _FACT_ERRORS:  # e.g. no memory left under the check's ceiling: these facts stay null, verdicts as checked
        queue.clear()
        return
    for (v, _, colour_stored, orientation), facts in zip(queue, results):
        facts.orientation = orientation if orientation in range(1, 9) else None
        if not colour_stored:
            facts.grayscale = False
        v.set_facts(facts)
    queue.clear()


def from_pil(v: Verdict, im) -> None:
    """Facts of an image from a loaded Pillow frame (the other image checks' decode)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            v.set_facts(_image().image_facts_from_pil(im))
    except _FACT_ERRORS:
        return  # e.g. a mode with no grey conversion: the facts stay null, the verdict is the check's


def from_encoded_image(v: Verdict, data) -> None:
    """Facts of an image whose check decoded no pixels (PNG): Pillow decodes its first frame here."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data if isinstance(data, bytes) else bytes(data))) as im:
                im.load()
                v.set_facts(_image().image_facts_from_pil(im))
    except _FACT_ERRORS:
        return  # Pillow refuses what the integrity rules accepted, or no memory for it: no facts
    except (SyntaxError, EOFError, Image.DecompressionBombError):
        return  # Pillow's other refusals of a file the integrity rules accepted


def from_audio(v: Verdict, stats: AudioStats) -> None:
    """Copy the level facts accumulated over the decoded blocks into the verdict."""
    v.set_facts(stats.result())


#: bytes per sample of the PCM subtypes whose samples numpy reads in place
PCM_WIDTH = {"PCM_U8": 1, "PCM_S8": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4}


def raw_pcm(data, at: int, frames: int, channels: int, subtype: str) -> np.ndarray | None:
    """The samples of a PCM WAV where they lie in the bytes, as integers (frames, channels); None if
    the subtype has no plain integer layout or the bytes are not all there."""
    width = PCM_WIDTH.get(subtype)
    if width is None or frames <= 0 or at + frames * channels * width > len(data):
        return None
    count = frames * channels
    if width == 3:  # little-endian 24-bit: place the 3 bytes in the top of an int32 (full scale 2**31)
        raw = np.frombuffer(data, dtype=np.uint8, count=3 * count, offset=at).reshape(count, 3)
        wide = np.zeros((count, 4), dtype=np.uint8)
        wide[:, 1:] = raw
        return wide.view("<i4").reshape(frames, channels)
    if subtype == "PCM_U8":
        return (
            (np.frombuffer(data, dtype=np.uint8, count=count, offset=at).astype(np.int16) - 128)
            .astype(np.int8)
            .reshape(frames, channels)
        )
    dtype = {1: "i1", 2: "<i2", 4: "<i4"}[width]
    return np.frombuffer(data, dtype=dtype, count=count, offset=at).reshape(frames, channels)


#: the verdict fields the flags are judged from, in :func:`flags_from` argument order
FLAG_INPUTS = (
    "status",
    "kind",
    "width",
    "height",
    "duration",
    "channels",
    "brightness",
    "contrast",
    "sharpness",
    "rms",
    "peak",
    "clipped",
    "dc_offset",
    "silent_channels",
)


def flags_of(v: Verdict, options: FlagOptions) -> list[str] | None:
    """The quality flags of a checked file (see :func:`flags_from`)."""
    return flags_from(*(getattr(v, name) for name in FLAG_INPUTS), options)


def flags_from(
    status,
    kind,
    width,
    height,
    duration,
    channels,
    brightness,
    contrast,
    sharpness,
    rms,
    peak,
    clipped,
    dc_offset,
    silent_channels,
    options: FlagOptions,
) -> list[str] | None:
    """The quality flags of a file from its verdict's fields (:data:`FLAG_INPUTS`), or None when the file
    is bad (a bad file is the integrity verdict's business; its partial facts say nothing)."""
    if status == R.BAD:
        return None
    if kind == "image":
        facts = (
            _image().ImageFacts(brightness=brightness, contrast=contrast, sharpness=sharpness)
            if brightness is not None
            else None
        )
        return image_flags(facts, width, height, options)
    if kind == "audio":
        if rms is None:
            return audio_flags(AudioFacts(duration=duration), options) if duration is not None else []
        return audio_flags(
            AudioFacts(
                duration=duration,
                peak=peak,
                rms=rms,
                clipped=clipped,
                dc_offset=dc_offset,
                silent_channels=silent_channels,
                channels=channels,
            ),
            options,
        )
    return []
