"""The results table's Arrow schema, and a chunk's verdicts as one Arrow record batch.

Needs ``pyarrow`` alone (not ``pyarrow.parquet`` or ``pyarrow.compute``, ~75 ms more to
import), so checking processes can build their chunk's batch themselves: the scan's main
process then receives one buffer per chunk instead of a Python object per file
(:func:`chunk_message` in the worker, :func:`read_chunk` in the main process).

What a first scan's main process computes on batches calls the kernels by name (:func:`call_function`),
never the methods that import ``pyarrow.compute`` (``take``, ``filter``, ...): see the import below.
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

try:  # compute kernels called by name: `import pyarrow.compute` costs ~75 ms of CPU (it wraps ~290 kernels
    # in Python functions), on the critical path of every scan's start (BENCHMARKS.md "Scan scaling")
    from pyarrow._compute import (
        CastOptions,
        MatchSubstringOptions,
        SetLookupOptions,
        SplitPatternOptions,
        call_function,
    )
except ImportError:  # a pyarrow laid out otherwise: the public module has them all
    from pyarrow.compute import (
        CastOptions,
        MatchSubstringOptions,
        SetLookupOptions,
        SplitPatternOptions,
        call_function,
    )

from .. import reasons
from ..schema import RESULTS, arrow_fields
from .verdict import Verdict, encode_path

#: Arrow schema of the results table: the columns of :data:`dsclean.schema.RESULTS` (a Verdict's fields), in
#: order. ``path`` is binary: the exact bytes of the file name relative to the root, so non-UTF-8 names
#: survive (decode with os.fsdecode); the quality facts and flags (docs/reference/facts.md) are null when
#: not computed (scan --facts none, or not decoded).
SCHEMA = pa.schema(arrow_fields(RESULTS))


def verdicts_batch(verdicts: list[Verdict]) -> pa.RecordBatch:
    """Verdicts as one record batch of the results :data:`SCHEMA` (path as its exact bytes)."""
    n = len(verdicts)
    cols = list(zip(*(tuple(vars(v).values()) for v in verdicts))) or [()] * len(SCHEMA)
    arrays = [pa.array([encode_path(p) for p in cols[0]], type=pa.binary())]
    for col, f in zip(cols[1:], list(SCHEMA)[1:]):  # a column of nothing but nulls (facts off) costs no conversion
        arrays.append(pa.nulls(n, f.type) if col.count(None) == n else pa.array(col, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def warm_conversions() -> None:
    """Convert one Python value to Arrow now: pyarrow's first conversion imports what it tests values against
    (``dateutil``: ~6 ms of CPU; pandas too, where it is installed and not refused as the ``dsclean`` command
    refuses it). Done once in the scan's process before its workers' forkserver is forked, every worker inherits
    it instead of paying it on its first chunk (issue 29)."""
    pa.array([0])


class Chunk(NamedTuple):
    """A checked chunk as the scan's main process gets it: the verdicts as a batch, and what the main
    process must know at once without looking at each row (counted by the worker that checked it)."""

    batch: pa.RecordBatch
    not_ok: list[int]  # rows whose status is not ok: the only rows the main process looks at one by one
    ok_kinds: dict[str, int]  # ok rows by kind ("image", "audio", ...)
    size: int  # bytes of the chunk's files (the sizes known)


def chunk_message(verdicts: list[Verdict]) -> tuple[bytes, list[int], dict[str, int], int]:
    """A chunk's verdicts as a worker hands them back: one Arrow IPC message and a few numbers
    (:class:`Chunk`), one small object to pickle whatever the backend (local processes, loky,
    threads or Dask)."""
    not_ok, ok_kinds, size = [], {}, 0
    for i, v in enumerate(verdicts):
        if v.status != reasons.OK:
            not_ok.append(i)
        else:
            ok_kinds[v.kind] = ok_kinds.get(v.kind, 0) + 1
        size += v.size or 0
    return verdicts_batch(verdicts).serialize().to_pybytes(), not_ok, ok_kinds, size


def read_chunk(message: tuple[bytes, list[int], dict[str, int], int]) -> Chunk:
    """The :class:`Chunk` of :func:`chunk_message` (the batch zero-copy over the message's bytes)."""
    data, not_ok, ok_kinds, size = message
    return Chunk(pa.ipc.read_record_batch(pa.py_buffer(data), SCHEMA), not_ok, ok_kinds, size)


def chunk_of(verdicts: list[Verdict]) -> Chunk:
    """The :class:`Chunk` of verdicts made in this process (a chunk re-checked file by file)."""
    return read_chunk(chunk_message(verdicts))
