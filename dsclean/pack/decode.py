"""``dsclean verify --decode``: the scan's checks on every packed sample, in the scan's isolated pool.

INTERIM. The checkers take paths today, so each media member's bytes are
written to a temp file in a private temp folder (``tempfile.mkdtemp``: never
inside a dataset or the shard folder) and checked there with
:func:`dsclean.scanning.executors.run_checks` — the scan's own loky pool with
its crash, timeout and memory isolation. Files are written only for the
chunks in flight (at most two per worker) and removed as their verdicts come
back; the folder is removed at the end. When the checkers accept bytes
(``check_bytes``), the worker task should slice the member out of the shard's
mmap instead, and this module loses its temp files.
"""
from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from typing import Iterator

from ..scanning.check import CheckOptions
from ..scanning.executors import run_checks
from ..scanning.verdict import Verdict
from .tarformat import TarError, iter_members

#: samples per check task
CHUNK = 64


def decode_members(folder: str, names: list[str], options: CheckOptions, jobs: int) -> Iterator[tuple[str, str, Verdict]]:
    """``(shard name, member name, verdict)`` for every media member of the shards, in completion order."""
    tmp = tempfile.mkdtemp(prefix="dsclean-verify-decode-")
    where: dict[str, tuple[str, str]] = {}  # temp name -> (shard, member), only for files in flight
    count = 0

    def chunks() -> Iterator[list[str]]:
        nonlocal count
        chunk: list[str] = []
        for shard in names:
            for member, data in _media_members(os.path.join(folder, shard)):
                count += 1
                temp_name = f"{count:010d}-{member}"
                with open(os.path.join(tmp, temp_name), "wb") as f:
                    f.write(data)
                where[temp_name] = (shard, member)
                chunk.append(temp_name)
                if len(chunk) >= CHUNK:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk

    try:
        for verdicts in run_checks(tmp, chunks(), options, max(1, jobs), backend="loky"):
            for v in verdicts:
                os.unlink(os.path.join(tmp, v.path))
                shard, member = where.pop(v.path)
                yield shard, member, v
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _media_members(path: str) -> Iterator[tuple[str, bytes]]:
    """``(member name, bytes)`` of each media member; a shard that cannot be walked yields what it can
    (its structure problems are the structural check's to report)."""
    if not os.path.isfile(path) or not os.path.getsize(path):
        return
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        try:
            for m in iter_members(mm):
                if not m.name.endswith((".cls", ".json")):
                    yield m.name, mm[m.offset:m.offset + m.size]
        except TarError:
            return
