"""WebDataset tars (and Parquet files) checked where they are read: a task names a shard (or a part of a tar),
the worker reads it.

The main process sends a shard's name; the worker opens it, walks it with :func:`.webdataset.read_shard`
(the same reader, the same problems), reads each media member itself and checks them a batch at a time
with the pool's own chunk task (same time limit, memory ceiling, crash isolation), then hands back a
:class:`Checked`: the results rows as Arrow IPC (shard columns included), the few rows that are not ok,
the shard's structure problems, counts, and the 64-bit hashes of its keys as one numpy buffer (for
duplicate keys across shards). The main process builds nothing per sample. A worker that dies takes its
task with it: the main process walks that shard part again and has its samples checked in fresh
processes (:func:`~dsclean.scanning.executors.isolate_chunks`), which names the culprit.
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

from .. import reasons as R
from ..quality.flags import FlagOptions
from ..scanning.check import CheckOptions
from ..scanning.verdict import Verdict
from ..scanning.worker import SampleBytes
from .detect import ShardSet
from .dupkeys import key_hash
from .events import Problem, Sample, ShardDone
from .webdataset import iter_members, open_stream, read_shard

if TYPE_CHECKING:
    from ..storage.fs import Store

#: samples per check batch at most, and the bytes after which a batch is checked anyway (as the scan's tasks)
CHUNK = 1024
CHUNK_BYTES = 4 << 20
#: shard-set kinds whose shards an ``index.json`` lists (read whole, a task a shard)
INDEXED = ("mds", "litdata")
#: parts a shard is cut into at most (to keep every worker busy when there are fewer shards than workers)
MAX_PARTS = 16


class TarTask(NamedTuple):
    """Part ``part`` of ``parts`` of shard ``shard`` (number ``number`` in the set); a Parquet shard (``kind``)
    is read whole by its task too, in row-group batches (``column``: ``--column``); an MDS shard or a litdata
    chunk whole, with its ``index.json`` path or key (``index``) and its ``entry`` there (the reader's
    ``plan_set`` made it: sample count, first row, columns)."""

    shard: str
    number: int
    part: int
    parts: int
    kind: str = "webdataset"
    column: str | None = None
    index: str | None = None
    entry: tuple = ()


class NotOk(NamedTuple):
    """A bad or warn row: what the main process lists, deny-lists and writes to problems.jsonl."""

    shard: str
    key: str
    member: str
    row: int | None
    status: str
    reason: str | None
    detail: str
    line: str


class Checked(NamedTuple):
    """What one task hands back (one small object to pickle, whatever the number of samples)."""

    task: TarTask
    batches: list[bytes]  # results rows (:data:`~.rows.SHARD_SCHEMA`), Arrow IPC record batches
    not_ok: list[NotOk]
    events: list  # Problem and ShardDone of the shard's structure (part 0 only)
    counts: dict[str, int]  # status -> rows
    bad_reasons: dict[str, int]
    warn_reasons: dict[str, int]
    flags: dict[str, int]
    hashes: bytes  # uint64 key hashes of the checked samples, unique


def plan(ss: ShardSet, slots: int, column: str | None = None) -> Iterator[TarTask | Problem]:
    """The tasks of a tar or Parquet shard set: a task a shard, or a few parts a tar when there are fewer shards
    than twice the workers (a gzipped tar or a Parquet file is never cut: each part would read it all).

    An MDS or litdata set: a task a shard (chunk), from its ``index.json`` (read here), and the index's
    broken entries as problems."""
    if ss.kind in INDEXED:
        reader = _reader(ss.kind)
        for number, item in enumerate(reader.plan_set(ss, column)):
            if isinstance(item, Problem):
                yield item
            else:
                yield TarTask(item[0], number, 0, 1, ss.kind, column, ss.index, item[1])
        return
    n = len(ss.names)
    cut = min(MAX_PARTS, math.ceil(2 * slots / n)) if n and n < 2 * slots else 1
    for number, name in enumerate(ss.names):
        parts = 1 if ss.kind != "webdataset" or name.lower().endswith((".gz", ".tgz")) else cut
        for part in range(parts):
            yield TarTask(name, number, part, parts, ss.kind, column)


def check_tar_part(
    folder: str,
    store: Store | None,
    task: TarTask,
    options: CheckOptions,
    flag_options: FlagOptions,
    checker: Callable[[SampleBytes, list, CheckOptions], list[Verdict]],
) -> Checked:
    """Worker task: walk one shard part, check its media members ``checker`` (the pool's chunk task) a batch
    at a time, and hand back the rows made and what the main process must know."""
    from ..scanning.facts import flags_of
    from .rows import problem_line, results_batch  # pyarrow (not its Parquet writer): in the worker, not at import

    out = Checked(task, [], [], [], {}, {}, {}, {}, b"")
    hashes: list[int] = []
    batch: list[Sample] = []
    held = 0

    def check(samples: list[Sample]) -> None:
        verdicts = checker(SampleBytes(folder), [(s.name, s.data) for s in samples], options)
        where = []
        for s, v in zip(samples, verdicts):
            if options.facts:
                v.flags = flags_of(v, flag_options)
                for flag in v.flags or ():
                    out.flags[flag] = out.flags.get(flag, 0) + 1
            out.counts[v.status] = out.counts.get(v.status, 0) + 1
            if v.status == R.BAD and v.reason:
                out.bad_reasons[v.reason] = out.bad_reasons.get(v.reason, 0) + 1
            elif v.status == R.WARN and v.reason:
                out.warn_reasons[v.reason] = out.warn_reasons.get(v.reason, 0) + 1
            if v.status != R.OK:
                line = problem_line(v, s.shard, s.member, s.key, s.row)
                out.not_ok.append(NotOk(s.shard, s.key, s.member, s.row, v.status, v.reason, v.detail, line))
            if s.row is None:
                hashes.append(key_hash(s.key))
            where.append((s.shard, s.member, s.key, s.row))
        out.batches.append(results_batch(verdicts, where).serialize().to_pybytes())

    for event in _events(folder, store, task):
        if isinstance(event, Sample):
            batch.append(event)
            held += len(event.data)
            if len(batch) >= CHUNK or held >= CHUNK_BYTES:
                check(batch)
                batch, held = [], 0
        else:
            out.events.append(event)
    if batch:
        check(batch)
    if hashes:
        import numpy as np

        return out._replace(hashes=np.unique(np.array(hashes, dtype=np.uint64)).tobytes())
    return out


def _reader(kind: str):
    """The module reading an indexed set of ``kind`` (its ``plan_set`` and ``shard_events``)."""
    if kind == "mds":
        from . import mds

        return mds
    from . import litdata

    return litdata


def _events(folder: str, store: Store | None, task: TarTask) -> Iterator[Sample | Problem | ShardDone]:
    """The shard's events, read here: a local file, or the object streamed from the store (no local copy; an
    MDS shard or litdata chunk: a temp copy, removed after, for the library's reader)."""
    if task.kind in INDEXED:
        ss = ShardSet(task.kind, folder, [], index=task.index, store=store)
        yield from _reader(task.kind).shard_events(ss, task.shard, task.entry, task.column)
        return
    try:
        f = ShardSet(task.kind, folder, [], store=store).open(task.shard)
    except OSError as exc:
        if task.part == 0:
            reason = getattr(exc, "reason", R.BROKEN_SHARD)
            yield Problem(task.shard, None, None, None, reason, f"cannot open: {exc.strerror or exc}")
            yield ShardDone(task.shard, 0)
        return
    with f:
        if task.kind == "parquet":
            from .parquet import read_shard as read_parquet

            yield from read_parquet(f, task.shard, task.column)
        else:
            yield from read_shard(f, task.shard, part=task.part, parts=task.parts)


def isolated_checker(jobs: int) -> Callable[[SampleBytes, list, CheckOptions], list[Verdict]]:
    """The checker of a task run again in this process after its worker died: each batch in fresh processes."""
    return partial(_isolated, jobs)


def _isolated(jobs: int, source: SampleBytes, items: list, options: CheckOptions) -> list[Verdict]:
    from ..scanning.executors import isolate_chunks

    return next(iter(isolate_chunks(source, [items], options, jobs)))  # type: ignore[arg-type]


def expected_formats(root: str, forced: str | None = None) -> set[str] | None:
    """The formats a scan of the folder ``root`` will check if it is a WebDataset shard set (its first members'),
    for the workers' forkserver to preload only their checkers; None: not one, or nothing seen (any format)."""
    from ..errors import UserError
    from .detect import detect

    try:
        ss = detect([root], forced)
    except (UserError, OSError):
        return None  # the scan itself says what is wrong
    return (first_formats(ss) or None) if ss is not None else None


def first_formats(ss: ShardSet, limit: int = 32) -> set[str]:
    """Media formats of the first members of the first shard (headers only): the checkers to preload."""
    import zlib

    from ..formats import format_of_name
    from ..pack.tarformat import TarError

    found: set[str] = set()
    if not ss.names or ss.kind != "webdataset":
        return found
    name = ss.names[0]
    try:
        with ss.open(name) as f:
            for i, (member, _, _, _) in enumerate(iter_members(open_stream(f, name), wanted=lambda _: False)):
                fmt = format_of_name(member)
                if fmt:
                    found.add(fmt)
                if i >= limit:
                    break
    except (OSError, EOFError, TarError, zlib.error):
        return found  # what broke the walk: its task reports it
    return found
