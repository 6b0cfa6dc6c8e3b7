"""``dsclean.guard``: wrap any dataset so one bad sample is named, skipped or replaced, and logged.

Map-style datasets get a :class:`GuardedDataset`, iterable ones a :class:`GuardedIterable`.
Both stay picklable (spawn/forkserver workers get the options, the inner dataset and the
shared :class:`~.slots.Slots` table) and keep no Python object per sample: the counters live in
the shared int64 table, a failure costs one log line and nothing is remembered after it.

``on_error``:

- ``"raise"`` (default): a :class:`~dsclean.data.dataset.SampleError` naming the index and what
  the dataset can tell about it (``path(i)`` and ``root`` of an :class:`~dsclean.IndexedDataset`,
  ``samples[i][0]`` of a torchvision folder dataset, the row of a Hugging Face ``Dataset``,
  ``__key__``/``__url__`` of a webdataset sample). The text matches ``dsclean explain``.
- ``"skip"``: map-style returns ``None`` (the loader's collate drops it: the batch is shorter,
  see :func:`dsclean.collate_skip_none`); iterable drops the sample.
- ``"replace"``: map-style loads another index chosen from ``(seed, epoch, failed index,
  attempt)`` by a fixed 64-bit mix (the same on every machine and rerun), trying up to
  ``retries`` indices; iterable takes the next sample.

``max_failures``: an ``int`` is a count; a ``float`` a fraction of the samples seen so far,
with one failure always allowed (``max(1, floor(f * seen))``). The counts are summed over
the rows of the shared table, so under one DataLoader the budget covers every worker (per
DDP rank: each rank has its own loader). Past it: :class:`~.errors.TooManyFailures`.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import traceback
from typing import Any, Callable, Iterator

from torch.utils.data import Dataset, IterableDataset

from ..failures import FailureWriter, process_log_path
from . import slots as S
from .errors import SampleError, TooManyFailures, UnsafePathError

logger = logging.getLogger("dsclean.guard")

ON_ERROR = ("raise", "skip", "replace")
#: an iterable that fails this many samples in a row is not making progress
MAX_CONSECUTIVE = 1000
_MASK = (1 << 64) - 1


def guard(
    dataset,
    *,
    on_error: str = "raise",
    log: str | os.PathLike | None = None,
    max_failures: int | float | None = None,
    seed: int = 0,
    retries: int = 10,
    transform: Callable | None = None,
) -> "GuardedDataset | GuardedIterable":
    """Wrap ``dataset`` (map-style or iterable) so a failing sample is named, skipped or replaced.

    ``log``: the failure log (JSON lines, :mod:`dsclean.failures`); each process appends to its
    own file beside it. ``transform`` (iterables): applied to each sample inside the guard, so a
    decode error there is one failed sample and the stream goes on (a generator that raised
    itself cannot be resumed). ``retries``: replacement attempts (map-style ``"replace"``).
    """
    if isinstance(dataset, (GuardedDataset, GuardedIterable)):
        raise ValueError("the dataset is already guarded")
    if _own_guard(dataset):
        raise ValueError(
            f"IndexedDataset(on_error={dataset.on_error!r}) is already guarded (it is dsclean.guard(..., "
            f"on_error={dataset.on_error!r})); for a log or a budget give the policy to the guard: "
            f"dsclean.guard(IndexedDataset(index), on_error={dataset.on_error!r}, log=..., max_failures=...)"
        )
    iterable = isinstance(dataset, IterableDataset) or (
        not hasattr(dataset, "__getitem__") and hasattr(dataset, "__iter__")
    )
    cls = GuardedIterable if iterable else GuardedDataset
    if transform is not None and not iterable:
        raise ValueError("transform= is for iterable datasets; a map-style dataset applies its own")
    return cls(
        dataset, on_error=on_error, log=log, max_failures=max_failures, seed=seed, retries=retries, transform=transform
    )


def _own_guard(dataset) -> bool:
    """Whether ``dataset`` runs a guard of its own (``IndexedDataset(on_error="skip"/"replace")``: ``guarded()``)."""
    return callable(getattr(type(dataset), "guarded", None)) and getattr(dataset, "on_error", "raise") != "raise"


def loader_guard(dataset, log: str | os.PathLike | None = None) -> "GuardedDataset | GuardedIterable":
    """The guard a dsclean loader runs: ``dataset`` if it is one, an ``IndexedDataset``'s own (its
    ``on_error="skip"``/``"replace"``), else ``guard(dataset, log=log)``; ``log`` fills a guard without one."""
    if isinstance(dataset, (GuardedDataset, GuardedIterable)):
        guarded = dataset
    elif _own_guard(dataset):
        guarded = dataset.guarded()
    else:
        return guard(dataset, log=log)
    if log is not None and guarded.log is None:
        guarded.log = os.fspath(log)
    return guarded


def mix64(*values: int) -> int:
    """A fixed 64-bit mix (splitmix64 steps) of the values: the same everywhere, unlike ``hash``."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (int(v) & _MASK)) & _MASK
        h = (h + 0x9E3779B97F4A7C15) & _MASK
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
        h ^= h >> 31
    return h


def replacement_index(seed: int, epoch: int, index: int, attempt: int, n: int) -> int:
    """The index served instead of ``index`` (never ``index`` itself when ``n > 1``)."""
    if n <= 1:
        return index
    j = mix64(seed, epoch, index, attempt) % (n - 1)
    return j if j < index else j + 1


def process_rank(sender: int | None = None) -> int:
    """This process's DDP rank: its process group, else ``RANK``, else ``sender`` (the rank that pickled
    the guard: a spawned DataLoader worker of a rank started by ``torch.multiprocessing.spawn`` has neither)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except (ImportError, RuntimeError):
        pass
    try:
        return int(os.environ["RANK"])
    except (KeyError, ValueError):
        return 0 if sender is None else int(sender)


def _worker() -> int | None:
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return None if info is None else info.id


def frames(exc: BaseException) -> list[str]:
    """The last frames of ``exc``'s traceback as ``file:line in function``."""
    return [f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(exc.__traceback__)[-8:]]


def sample_text(index: Any, where: dict) -> str:
    """``sample 12 (a/b.jpg under /data)``: the form ``dsclean explain`` reads back."""
    if where.get("path") is not None:
        root = where.get("root")
        return f"sample {index} ({where['path']}" + (f" under {root})" if root else ")")
    if where.get("key") is not None:
        return f"sample {index} (key {where['key']} in {where.get('shard')})"
    return f"sample {index}"


class _Guard:
    """What both wrappers share: options, the shared counters, the per-process log writer."""

    def __init__(
        self, dataset, *, on_error: str, log, max_failures, seed: int, retries: int, transform: Callable | None
    ) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, not {on_error!r}")
        if max_failures is not None:
            if isinstance(max_failures, bool) or not isinstance(max_failures, (int, float)) or max_failures < 0:
                raise ValueError(f"max_failures must be a count (int >= 0) or a fraction (float), not {max_failures!r}")
            if isinstance(max_failures, float) and max_failures >= 1:
                raise ValueError(f"max_failures as a float is a fraction of the samples seen (< 1), not {max_failures}")
        if retries < 1:
            raise ValueError("retries must be at least 1")
        self.dataset = dataset
        self.on_error = on_error
        self.log = None if log is None else os.fspath(log)
        self.max_failures = max_failures
        self.seed = int(seed)
        self.retries = int(retries)
        self.transform = transform
        self.slots = S.Slots()
        self._local()

    def _local(self) -> None:
        self._writer: FailureWriter | None = None
        self._writer_pid: int | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_writer", None)
        state.pop("_writer_pid", None)
        state["_sender_rank"] = self._rank()
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._local()

    def _rank(self) -> int:
        """The rank this process logs as (a spawned worker: the rank of the process that sent it the guard)."""
        return process_rank(self.__dict__.get("_sender_rank"))

    def __getattr__(self, name: str):  # the inner dataset's attributes (classes, targets, ...)
        if name.startswith("__") or "dataset" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["dataset"], name)

    # -- epoch and state -------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.slots.epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch replacements are drawn for; shared, so persistent workers see it too."""
        self.slots.epoch = int(epoch)
        inner = getattr(self.dataset, "set_epoch", None)
        if callable(inner):
            inner(epoch)

    def counts(self) -> dict:
        """Samples seen, failed and replaced so far (every worker of the loader)."""
        seen, failed, replaced = self.slots.totals()
        return {"seen": seen, "failed": failed, "replaced": replaced}

    def state_dict(self) -> dict:
        """What a resumed run needs to replace the same samples and keep its budget."""
        return {"epoch": self.epoch, "seed": self.seed, **self.counts()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` in the main process, before the workers start.

        In a worker it does nothing: the table is shared, and torchdata's ``StatefulDataLoader``
        hands each worker the state it saved there, which would zero the counts others made since.
        """
        if _worker() is not None:
            return
        self.slots.epoch = int(state.get("epoch", 0))
        self.slots.load_counts(int(state.get("seen", 0)), int(state.get("failed", 0)), int(state.get("replaced", 0)))

    # -- a failure -------------------------------------------------------------------

    def _writer_for_process(self) -> FailureWriter | None:
        if self.log is None:
            return None
        if self._writer is None or self._writer_pid != os.getpid():
            self._writer = FailureWriter(process_log_path(self.log, rank=self._rank(), worker=_worker()))
            self._writer_pid = os.getpid()
        return self._writer

    def _record(self, index, where: dict, exc: BaseException, action: str, replaced_by=None) -> None:
        """Count the failure, write its line, and stop the run past the budget."""
        row = self.slots.row()
        row[S.FAILED] += 1
        logger.warning("%s failed (%s): %s: %s", sample_text(index, where), action, type(exc).__name__, exc)
        writer = self._writer_for_process()
        if writer is not None:
            cause = exc.__cause__ if isinstance(exc, SampleError) and exc.__cause__ is not None else exc
            writer.write(
                rank=self._rank(),
                worker=_worker(),
                pid=os.getpid(),
                epoch=self.epoch,
                index=index,
                kind="exception",
                error=type(cause).__name__,
                message=str(exc),
                traceback=frames(exc),
                action=action,
                replaced_by=replaced_by,
                **where,
            )
        self._check_budget()

    def _check_budget(self) -> None:
        if self.max_failures is None:
            return
        seen, failed, _ = self.slots.totals()
        mf = self.max_failures
        budget = mf if isinstance(mf, int) else max(1, math.floor(mf * seen))
        if failed > budget:
            where = (
                f"; the failures are logged in {self.log} (dsclean.read_failures)"
                if self.log
                else "; pass log= to keep a record of them"
            )
            raise TooManyFailures(
                f"{failed} samples failed, more than max_failures={mf} allows ({budget} of {seen} samples seen){where}",
                failures=failed,
                budget=budget,
                seen=seen,
                log=self.log,
            )


class GuardedDataset(_Guard, Dataset):
    """A map-style dataset whose failing samples are named, skipped (``None``) or replaced."""

    def __len__(self) -> int:
        return len(self.dataset)

    def where(self, index: int) -> dict:
        """What the inner dataset can tell about sample ``index``: path/root, or row (HF)."""
        ds = self.dataset
        out: dict = {}
        try:
            path = getattr(ds, "path", None)
            if callable(path) and not isinstance(ds, str):
                out["path"] = path(index)
                root = getattr(ds, "root", None)
                if isinstance(root, str):
                    out["root"] = root
            elif isinstance(getattr(ds, "samples", None), list):  # torchvision's DatasetFolder
                out["path"] = ds.samples[index][0]
            elif type(ds).__module__.split(".")[0] == "datasets":  # Hugging Face: the row
                out["row"] = int(index)
        except Exception as exc:  # naming is best effort: the failure itself is what is reported
            logger.debug("could not name sample %s: %s", index, exc)
        return out

    def __getitem__(self, index):
        row = self.slots.row()
        row[S.SEEN] += 1
        row[S.CURRENT] = index if type(index) is int else -1
        try:
            sample = self.dataset[index]
        except Exception as exc:
            sample = self._failed(index, exc)
        row[S.CURRENT] = -1
        return sample

    def _failed(self, index, exc: Exception):
        where = self.where(index)
        if isinstance(exc, UnsafePathError) or self.on_error == "raise":
            self._record(index, where, exc, "raise")
            if isinstance(exc, SampleError):
                raise exc
            raise SampleError(
                f"{sample_text(index, where)}: {type(exc).__name__}: {exc}",
                index=index,
                path=where.get("path"),
                root=where.get("root"),
            ) from exc
        if self.on_error == "skip":
            self._record(index, where, exc, "skip")
            return None
        n = len(self.dataset)
        row = self.slots.row()
        for attempt in range(self.retries):
            j = replacement_index(self.seed, self.epoch, int(index), attempt, n)
            self._record(index, where, exc, "replace", replaced_by=j)
            row[S.CURRENT] = j
            try:
                sample = self.dataset[j]
            except Exception as again:
                index, where, exc = j, self.where(j), again
                continue
            row[S.REPLACED] += 1
            return sample
        self._record(index, where, exc, "raise")
        raise SampleError(
            f"{sample_text(index, where)}: no replacement loaded after {self.retries} tries; "
            f"last error {type(exc).__name__}: {exc}",
            index=index,
            path=where.get("path"),
            root=where.get("root"),
        ) from exc


class GuardedIterable(_Guard, IterableDataset):
    """An iterable dataset whose failing samples are named and dropped (``skip``/``replace``) or raised."""

    def __len__(self) -> int:
        return len(self.dataset)

    @staticmethod
    def where_exc(exc: BaseException) -> dict:
        """shard/key from a webdataset error (``DecodingError.key/url``, or the url appended to ``args``)."""
        out: dict = {}
        key, url = getattr(exc, "key", None), getattr(exc, "url", None)
        if key is not None:
            out["key"] = str(key)
        if url is not None:
            out["shard"] = str(url)
        return out

    @staticmethod
    def where_sample(sample) -> dict:
        if isinstance(sample, dict):
            out = {}
            if sample.get("__key__") is not None:
                out["key"] = str(sample["__key__"])
            if sample.get("__url__") is not None:
                out["shard"] = str(sample["__url__"])
            return out
        return {}

    def __iter__(self) -> Iterator:
        row = self.slots.row()
        it = iter(self.dataset)
        ordinal, consecutive = 0, 0
        while True:
            row[S.CURRENT] = ordinal
            try:
                sample = next(it)
            except StopIteration:
                row[S.CURRENT] = -1
                return
            except Exception as exc:
                row[S.SEEN] += 1
                self._stream_failed(ordinal, self.where_exc(exc), exc)
                if inspect.isgenerator(it) and it.gi_frame is None:
                    raise SampleError(
                        f"{sample_text(ordinal, self.where_exc(exc))}: {type(exc).__name__}: {exc}; the "
                        "dataset's iterator is a generator that ended with the error, so the stream "
                        "cannot go on: give the failing step to guard(..., transform=...) or use the "
                        "library's own handler (webdataset: handler=)"
                    ) from exc
                consecutive += 1
                ordinal += 1
                self._progress(consecutive, exc)
                continue
            row[S.SEEN] += 1
            if self.transform is not None:
                try:
                    sample = self.transform(sample)
                except Exception as exc:
                    self._stream_failed(ordinal, self.where_sample(sample), exc)
                    consecutive += 1
                    ordinal += 1
                    self._progress(consecutive, exc)
                    continue
            consecutive = 0
            ordinal += 1
            row[S.CURRENT] = -1
            yield sample

    def _progress(self, consecutive: int, exc: Exception) -> None:
        if consecutive >= MAX_CONSECUTIVE:
            raise SampleError(
                f"{consecutive} samples in a row failed (last: {type(exc).__name__}: {exc}); the "
                "stream makes no progress"
            ) from exc

    def _stream_failed(self, ordinal: int, where: dict, exc: Exception) -> None:
        if self.on_error == "raise":
            self._record(ordinal, where, exc, "raise")
            raise SampleError(f"{sample_text(ordinal, where)}: {type(exc).__name__}: {exc}", index=ordinal) from exc
        self._record(ordinal, where, exc, self.on_error)
