"""Facts of a file on disk, for files the scan did not decode and for roots never scanned.

One read for the content hash, then the cheapest decode that gives the facts:
an image's first frame at the smallest scale that keeps 64 px (Pillow ``draft``),
a sound's samples block by block. The format comes from the magic bytes.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import warnings
from dataclasses import dataclass
from typing import BinaryIO

from .. import formats
from ..hashing import content_hash, content_hash_file
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
    _decode(out, path, content_hash_file(path), options, decode)
    return out


def facts_from_bytes(
    data: bytes, options: FlagOptions = FlagOptions(), *, size: int | None = None, mtime_ns: int | None = None
) -> FileFacts:
    """:func:`facts_from_path` of bytes already in memory (an object read from a bucket): the same hash, the same
    image decode; a sound is hashed only (dups compares images). ``size``/``mtime_ns``: what the store lists."""
    out = FileFacts(size=len(data) if size is None else size, mtime_ns=mtime_ns)
    fmt = formats.sniff(data[: formats.SNIFF_BYTES])
    out.kind = formats.kind_of(fmt) if fmt else None
    _decode(out, io.BytesIO(data), content_hash(data), options, (formats.IMAGE,))
    return out


def _decode(
    out: FileFacts, source: str | BinaryIO, digest: bytes, options: FlagOptions, decode: tuple[str, ...]
) -> None:
    """The facts of ``out.kind`` from ``source`` (a path, or a file object for images), if it is in ``decode``."""
    out.facts = Facts(content_hash=digest)
    if out.kind not in decode:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if out.kind == formats.IMAGE:
                im, (out.width, out.height) = open_reduced(source)
                with im:
                    out.facts = Facts.of_image(image_facts_from_pil(im), out.width, out.height, options, digest)
            else:
                assert isinstance(source, str)
                audio = audio_facts_from_path(source)
                out.duration = audio.duration
                out.facts = Facts.of_audio(audio, options, digest)
    except MemoryError:
        raise
    except Exception as exc:  # a damaged file has no facts; it still has its bytes' hash
        out.error = f"{type(exc).__name__}: {exc}"
