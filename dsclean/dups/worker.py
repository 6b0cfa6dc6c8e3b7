"""What runs in dups' worker processes: facts, thumbnails or anti-aliased hashes of a chunk of files, under a time limit.

Each task gets (root, relative paths, limits) and returns plain tuples, so a
chunk's answer is small to send back. The time limit and memory ceiling are the
scan's (:mod:`dsclean.scanning.worker`): a decoder that hangs is killed with its
process, and :mod:`dsclean.dups.pool` re-runs the chunk file by file to name it.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Callable, TypeVar

import numpy as np

from .. import formats
from ..quality import flags as F
from ..quality.files import FileFacts, facts_from_path
from ..quality.flags import FlagOptions
from ..quality.image import thumbnail_from_path
from ..quality.texture import antialiased_hashes_from_path, is_unstable
from ..scanning.worker import FAULT_ENV, inject_fault, set_memory_ceiling, time_limit
from ..storage.reads import DEFAULT_READ_THREADS, ReadPolicy

KIND_CODES = {None: -1, formats.IMAGE: 0, formats.AUDIO: 1}


@dataclass(frozen=True)
class Limits:
    """Per-file limits in the workers (0 = none), the flag thresholds, and how a bucket's objects are read."""

    timeout: float = 60.0
    max_memory: int = 0
    flag_options: FlagOptions = FlagOptions()
    read_threads: int = DEFAULT_READ_THREADS  # object reads in flight per worker (URL roots)
    read_policy: ReadPolicy = ReadPolicy()  # retries, and the size past which an object goes through a temp file


#: one file's answer: (size, mtime_ns, kind code, width, height, content_hash, phash, low_information, unstable, error)
Row = tuple


def enter(limits: Limits) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    set_memory_ceiling(limits.max_memory)


def fault(path: str) -> None:
    """The scan's test-only fault injection (files named __segfault__, __hang__, ...), same switch."""
    if os.environ.get(FAULT_ENV) == "1":
        inject_fault(path)


def facts_chunk(root: str, rels: list[str], limits: Limits) -> list[Row]:
    """Content hash and image facts of each file (audio: hash only; dups compares images)."""
    enter(limits)
    out = []
    for rel in rels:
        with time_limit(limits.timeout):
            fault(os.path.join(root, rel))
            out.append(facts_row(os.path.join(root, rel), limits.flag_options))
    return out


def facts_row(path: str, options: FlagOptions = FlagOptions()) -> Row:
    """One file's row; an unreadable file gives (None, ..., error)."""
    try:
        ff = facts_from_path(path, options, decode=(formats.IMAGE,))
    except OSError as exc:
        return failed_row(f"cannot read: {exc.strerror or exc}")
    except MemoryError:
        return failed_row("out of memory")
    return file_row(ff)


def failed_row(error: str) -> Row:
    """The row of a file (or object) with no facts at all: ``error`` says why."""
    return (None, None, -1, None, None, None, None, False, False, error)


def file_row(ff: FileFacts) -> Row:
    """The row of what :func:`~dsclean.quality.files.facts_from_path` (or ``facts_from_bytes``) found."""
    facts = ff.facts
    low = bool(facts and F.LOW_INFORMATION in facts.flags)
    shaky = bool(facts and is_unstable(facts.sharpness, facts.contrast))
    return (
        ff.size,
        ff.mtime_ns,
        KIND_CODES.get(ff.kind, -1),
        ff.width,
        ff.height,
        facts.content_hash if facts else None,
        facts.phash if facts else None,
        low,
        shaky,
        ff.error,
    )


T = TypeVar("T")


def _each_image(root: str, rels: list[str], limits: Limits, decode: Callable[[str], T]) -> list[T | None]:
    """``decode`` of each image under the limits; None for one that cannot be decoded now (changed since?)."""
    enter(limits)
    out: list[T | None] = []
    for rel in rels:
        path = os.path.join(root, rel)
        with time_limit(limits.timeout):
            fault(path)
            try:
                out.append(decode(path))
            except (Exception, MemoryError):  # undecodable now: the pair is not confirmed / no second signal for it
                out.append(None)
    return out


def thumbs_chunk(root: str, rels: list[str], limits: Limits) -> list[np.ndarray | None]:
    """The canonical 64x64 grey thumbnail of each image (None if it cannot be decoded)."""
    return _each_image(root, rels, limits, thumbnail_from_path)


def second_hashes_chunk(root: str, rels: list[str], limits: Limits) -> list[list[int] | None]:
    """The anti-aliased hashes of each image, one per window (:mod:`dsclean.quality.texture`; None if undecodable)."""
    return _each_image(root, rels, limits, antialiased_hashes_from_path)
