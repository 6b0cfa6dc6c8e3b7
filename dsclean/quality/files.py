"""Facts of a file on disk, for files the scan did not decode and for roots never scanned.

One read for the content hash, then the cheapest decode that gives the facts:
an image's first frame at the smallest scale that keeps 64 px (Pillow ``draft``),
a sound's samples block by block. The format comes from the magic bytes.
"""

from __future__ import annotations

import errno
import os
import stat
import warnings
from dataclasses import dataclass

from .. import formats
from ..hashing import content_hash_file
from .audio import audio_facts_from_path
from .facts import Facts
from .flags import FlagOptions
from .image import image_facts_from_pil, open_reduced


@dataclass
class FileFacts:
    """What :func:`facts_from_path` found: the kind and size facts, the fact record, and why decoding failed."""

    kind: str | None = None  # "image" / "audio" / None (not media)
    size: int | None = None
    mtime_ns: int | None = None
    width: int | None = None
    height: int | None = None
    duration: float | None = None
    facts: Facts | None = None
    error: str | None = None  # the decoder's complaint; the content hash is still there


def facts_from_path(
    path: str, options: FlagOptions = FlagOptions(), *, decode: tuple[str, ...] = (formats.IMAGE, formats.AUDIO)
) -> FileFacts:
    """Content hash, then image or audio facts and flags for the kinds in ``decode``.

    Raises OSError if the file cannot be read; a decoder's complaint goes to ``error``.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the open below; a device could act on it
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device): not opened", path)
    out = FileFacts(size=st.st_size, mtime_ns=st.st_mtime_ns)
    with open(path, "rb") as f:
        head = f.read(formats.SNIFF_BYTES)
    fmt = formats.sniff(head)
    out.kind = formats.kind_of(fmt) if fmt else None
    digest = content_hash_file(path)
    out.facts = Facts(content_hash=digest)
    if out.kind not in decode:
        return out
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if out.kind == formats.IMAGE:
                im, (out.width, out.height) = open_reduced(path)
                with im:
                    out.facts = Facts.of_image(image_facts_from_pil(im), out.width, out.height, options, digest)
            else:
                audio = audio_facts_from_path(path)
                out.duration = audio.duration
                out.facts = Facts.of_audio(audio, options, digest)
    except MemoryError:
        raise
    except Exception as exc:  # a damaged file has no facts; it still has its bytes' hash
        out.error = f"{type(exc).__name__}: {exc}"
    return out
