"""``dsclean verify --decode``: the scan's checks on every packed sample, in the scan's isolated pool.

Each task is a chunk of ``(shard, member, offset, size)`` ranges
(:class:`dsclean.scanning.worker.FileSlices`): the worker reads each sample's
bytes with one ``pread`` and runs :func:`dsclean.scanning.check.check_bytes` on
them, under the scan's time limit and memory ceiling; a sample that crashes or
hangs its decoder is re-checked alone and named, as in a scan. Nothing is
written anywhere.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterator

from ..openfile import map_regular
from ..reasons import LENIENT
from ..scanning.cache import options_from_key
from ..scanning.check import CheckOptions
from ..scanning.executors import run_checks
from ..scanning.verdict import Verdict
from ..scanning.worker import FileSlices
from .tarformat import TarError, iter_members

#: samples per check task
CHUNK = 64


def recorded_options(meta: dict | None) -> CheckOptions:
    """The check options the packed set's samples were judged with: the ``check_options`` its index
    recorded (from the scan results it was built from; defaults when none), ``lenient`` also when the
    index ships warnings only ``scan --lenient`` accepts (``include_warn``). Verdicts only (no facts)."""
    meta = meta or {}
    options = options_from_key(meta.get("check_options"))
    lenient = options.lenient or bool(set(meta.get("include_warn") or ()) & LENIENT)
    return dataclasses.replace(options, lenient=lenient, facts=False)


def decode_members(
    folder: str, names: list[str], options: CheckOptions, jobs: int
) -> Iterator[tuple[str, str, Verdict]]:
    """``(shard name, member name, verdict)`` for every media member of the shards, in completion order."""

    def chunks() -> Iterator[list[tuple[str, str, int, int]]]:
        chunk: list[tuple[str, str, int, int]] = []
        for shard in names:
            for member, offset, size in _media_members(os.path.join(folder, shard)):
                chunk.append((shard, member, offset, size))
                if len(chunk) >= CHUNK:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk

    for verdicts in run_checks(FileSlices(folder), chunks(), options, max(1, jobs), backend="loky"):
        for v in verdicts:
            shard, _, member = v.path.partition("/")
            yield shard, member, v


def _media_members(path: str) -> Iterator[tuple[str, int, int]]:
    """``(member name, offset, size)`` of each media member; a shard that cannot be walked yields what it
    can (its structure problems are the structural check's to report)."""
    try:
        mm = map_regular(path)
    except OSError:  # missing, or not a regular file: the structural check reports it
        return
    if mm is None:
        return
    with mm:
        try:
            for m in iter_members(mm):
                if not m.name.endswith((".cls", ".json")):
                    yield m.name, m.offset, m.size
        except TarError:
            return
