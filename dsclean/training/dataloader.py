"""``dsclean.DataLoader``: torch's DataLoader, plus a name for the sample a dead worker had in flight.

Each worker writes the index it is about to load into its row of the guard's shared table
(:mod:`.slots`; one int64 store before and after each sample, no lock). When torch reports a
dead worker, this loader looks at which worker is gone,
its exit status, the index in its row and the batches it had been sent, and raises
:class:`~.errors.WorkerDied` (a ``RuntimeError``) naming all of it with ``dsclean explain``'s
reading of the signal -- and writes a ``worker_died`` line to the failure log.

Deaths are found by the liveness check in the fetch loop, every ``_POLL`` seconds while the main
process waits for a batch -- not by torch's SIGCHLD handler: that handler raises its
``RuntimeError`` wherever the main thread happens to be (the training step, your loop body),
outside this loader, so the death would go unnamed. This iterator's workers are therefore not
registered with it.

``on_worker_death="skip"`` (map-style datasets): the dead iterator's workers are shut down and a
fresh iterator finishes the epoch over the batches not yet delivered -- the ones in flight (the
culprit removed from its batch) and the rest of the sampler's order -- so each other index is
delivered exactly once. After ``max_worker_deaths`` deaths in one epoch the run stops: deaths on
different samples are a memory problem (the OOM killer), not a bad file.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import signal as _signal
import time

import torch.utils.data as tud
from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL as _STATUS_INTERVAL
from torch.utils.data._utils import signal_handling as _torch_signals
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from ..data.collate import collate_skip_none
from ..data.guard import GuardedDataset, GuardedIterable, loader_guard, process_rank, sample_text
from ..data.slots import Slots
from ..failures import FailureWriter, process_log_path
from .errors import WorkerDied

logger = logging.getLogger("dsclean.guard")

ON_WORKER_DEATH = ("raise", "skip")
_DEATH_TEXT = ("is killed by signal", "exited unexpectedly")
_TORCH_INIT = inspect.signature(tud.DataLoader.__init__)
#: how long a lost connection to a worker waits for that worker's death to show (seconds)
_DYING_WAIT = 2.0
#: how often the main process, waiting for a batch, looks for a dead worker (seconds)
_POLL = 0.2


class DropNone:
    """``collate_fn`` wrapper: drop the ``None`` a skipping guard returns, then collate the rest."""

    def __init__(self, collate_fn) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch):
        return self.collate_fn([b for b in batch if b is not None])


class DataLoader(tud.DataLoader):
    """``torch.utils.data.DataLoader`` with the same arguments, plus:

    - ``on_worker_death``: ``"raise"`` (default) a :class:`WorkerDied` naming the signal and the
      sample(s); ``"skip"`` (map-style) go on without the culprit.
    - ``max_worker_deaths``: deaths per epoch before stopping (default 3).
    - ``log``: the failure log (also the guard's when it has none).

    A dataset that is not guarded yet is wrapped in ``dsclean.guard(dataset, log=log)`` (errors
    raise, naming the sample); an ``IndexedDataset(on_error="skip"/"replace")`` brings its own
    guard (``dataset.guarded()``). ``loader.dataset`` is the guard, ``loader.dataset.dataset`` yours
    (for that IndexedDataset: a view of it whose errors raise, with its attributes).
    With a ``guard(..., on_error="skip")`` dataset the ``collate_fn`` drops the ``None`` samples
    (default: :func:`dsclean.collate_skip_none`).
    """

    def __init__(
        self,
        dataset,
        *args,
        on_worker_death: str = "raise",
        max_worker_deaths: int = 3,
        log: str | os.PathLike | None = None,
        **kwargs,
    ) -> None:
        if on_worker_death not in ON_WORKER_DEATH:
            raise ValueError(f"on_worker_death must be one of {ON_WORKER_DEATH}, not {on_worker_death!r}")
        if max_worker_deaths < 1:
            raise ValueError("max_worker_deaths must be at least 1")
        dataset = loader_guard(dataset, log)
        bound = _TORCH_INIT.bind(None, dataset, *args, **kwargs)
        arguments = bound.arguments
        workers = int(arguments.get("num_workers", 0) or 0)
        if workers > dataset.slots.workers:
            dataset.slots = Slots(workers)
        if dataset.on_error == "skip" and isinstance(dataset, GuardedDataset):
            collate = arguments.get("collate_fn")
            arguments["collate_fn"] = collate_skip_none if collate in (None, collate_skip_none) else DropNone(collate)
        self.on_worker_death = on_worker_death
        self.max_worker_deaths = int(max_worker_deaths)
        self.log = dataset.log
        super().__init__(*bound.args[1:], **bound.kwargs)

    def set_epoch(self, epoch: int) -> None:
        """Forward the epoch to the sampler (``DistributedSampler``) and the guard."""
        setter = getattr(self.sampler, "set_epoch", None)
        if callable(setter):
            setter(epoch)
        self.dataset.set_epoch(epoch)

    def __iter__(self):
        it = self._iterator
        if it is not None and getattr(it, "_broken", False):  # persistent workers that lost one: start again
            self._iterator = None
        return super().__iter__()

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        self.check_worker_number_rationality()
        return _GuardedIter(self)


def _signal_name(code: int | None) -> tuple[str | None, str]:
    """(signal name, torch-style description) of a negative exit code."""
    if code is None or code >= 0:
        return None, f"exited unexpectedly with exit code {code}"
    try:
        sig = _signal.Signals(-code)
    except ValueError:
        return f"signal {-code}", f"is killed by signal: {-code}"
    return sig.name, f"is killed by signal: {_signal.strsignal(sig) or sig.name}"


def _batch_text(batch, show: int = 8) -> str:
    """A batch's indices for a message: the first ``show`` and the count (a batch of 256 stays one short line)."""
    items = list(batch)
    if len(items) <= show:
        return str(items)
    return "[" + ", ".join(str(i) for i in items[:show]) + f", ... ({len(items)} samples)]"


class _GuardedIter(_MultiProcessingDataLoaderIter):
    """torch's multi-process iterator, remembering which batches went to which worker."""

    def __init__(self, loader: DataLoader, batches=None, deaths: int = 0) -> None:
        self._batches = batches  # an iterator of index lists instead of the sampler's (a resumed epoch)
        self._sent: dict[int, tuple[int, object]] = {}
        self._replacement: _GuardedIter | None = None
        self._deaths = deaths
        self._last_index = None
        self._broken = False
        self._loader = loader
        super().__init__(loader)
        if self._worker_pids_set:  # deaths are found by _try_get_data, in _next_data (see the module's docstring)
            _torch_signals._remove_worker_pids(id(self))
            self._worker_pids_set = False

    def _reset(self, loader, first_iter=False):
        self._sent = {}
        if not first_iter:
            self._batches = None
        super()._reset(loader, first_iter)

    def _next_index(self):
        index = next(self._batches) if self._batches is not None else super()._next_index()
        self._last_index = index
        return index

    def _try_put_index(self):
        before = self._send_idx
        super()._try_put_index()
        if self._send_idx != before:
            self._sent[before] = (self._task_info[before][0], self._last_index)

    def _try_get_data(self, timeout=_STATUS_INTERVAL):
        """torch's fetch with its liveness check every ``_POLL`` seconds, up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            success, data = self._try_get_data_once(min(_POLL, max(0.0, deadline - time.monotonic())))
            if success or time.monotonic() >= deadline:
                return success, data

    def _try_get_data_once(self, timeout: float):
        try:
            return super()._try_get_data(timeout)
        except (ConnectionError, EOFError, FileNotFoundError) as exc:
            # A batch whose worker died before this process fetched its shared memory (the file descriptor
            # goes through the worker's resource sharer): torch looked for a dead worker a moment before the
            # kernel had finished the death. Look again for a while; a death is then named like torch's.
            deadline = time.monotonic() + _DYING_WAIT
            while True:
                dead = [
                    (wid, w) for wid, w in enumerate(self._workers) if self._workers_status[wid] and not w.is_alive()
                ]
                if dead:
                    for wid, _ in dead:
                        self._mark_worker_as_unavailable(wid)
                    pids = ", ".join(str(w.pid) for _, w in dead)
                    raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly") from exc
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _next_data(self):
        if self._replacement is not None:
            try:
                return self._replacement._next_data()
            except StopIteration:
                self._replacement._shutdown_workers()
                raise
        try:
            data = super()._next_data()
        except RuntimeError as exc:
            if not any(t in str(exc) for t in _DEATH_TEXT):
                raise
            return self._on_death(exc)
        sent, pending = self._sent, self._task_info
        for t in [t for t in sent if t not in pending]:  # delivered (or never to be): forget it
            del sent[t]
        return data

    # -- a death ---------------------------------------------------------------------

    def _on_death(self, exc: RuntimeError):
        loader = self._loader
        dataset = loader.dataset
        dead = [(wid, w) for wid, w in enumerate(self._workers) if w.exitcode is not None and w.exitcode != 0]
        if not dead:
            raise exc
        culprits, parts = set(), []
        writer = FailureWriter(process_log_path(loader.log, rank=process_rank(), worker=None)) if loader.log else None
        from ..diagnose.explain import explain

        for wid, w in dead:
            name, torch_text = _signal_name(w.exitcode)
            current = dataset.slots.current(wid) if wid < dataset.slots.workers else -1
            in_flight = [b for t, (owner, b) in sorted(self._sent.items()) if owner == wid and t in self._task_info]
            where = dataset.where(current) if current >= 0 and isinstance(dataset, GuardedDataset) else {}
            if current >= 0 and isinstance(dataset, GuardedDataset):
                culprits.add(current)
                loading = f"it was loading {sample_text(current, where)}"
            elif current >= 0:
                loading = f"it was reading sample #{current} of its stream"
            else:
                loading = "it was between samples (collating, pinning or sending a batch: memory, not a file)"
            exp = explain(f"DataLoader worker (pid {w.pid}) {torch_text}")
            batches = ", ".join(_batch_text(b) for b in in_flight[:4] if b is not None)
            text = (
                f"DataLoader worker {wid} (pid {w.pid}) died: "
                + (f"killed by {name}" if w.exitcode < 0 else f"exit code {w.exitcode}")
                + f"; {loading}"
                + (f"; batches in flight: {batches}" if batches else "")
                + f". Usually: {exp.title}: {exp.cause}"
            )
            parts.append((text, exp))
            if writer is not None:
                writer.write(
                    rank=process_rank(),
                    worker=wid,
                    pid=w.pid,
                    epoch=dataset.epoch,
                    index=current if current >= 0 else None,
                    kind="worker_died",
                    error=name or "exit",
                    message=text,
                    action=loader.on_worker_death,
                    **where,
                )
            logger.error("%s", text)
        self._deaths += len(dead)
        name = _signal_name(dead[0][1].exitcode)[0]
        fixes = parts[0][1].fixes
        samples = sorted(culprits)
        logged = f"\nLogged to {loader.log}." if loader.log else ""
        iterable = isinstance(dataset, GuardedIterable)
        if loader.on_worker_death == "raise" or iterable or self._deaths > loader.max_worker_deaths:
            self._broken = True
            self._shutdown_workers()
            head = "\n".join(t for t, _ in parts)
            if self._deaths > loader.max_worker_deaths:
                oom = explain("DataLoader worker (pid 0) is killed by signal: Killed.")
                head = (
                    f"{self._deaths} DataLoader workers died this epoch (max_worker_deaths="
                    f"{loader.max_worker_deaths}), each on a different sample: that is memory (the OOM "
                    f"killer), not a bad file.\n{head}"
                )
                fixes = oom.fixes
            elif iterable and loader.on_worker_death == "skip":
                head += "\n(on_worker_death='skip' needs a map-style dataset: an iterable stream cannot be resumed)"
            raise WorkerDied(
                head + "\nFixes:\n" + "\n".join(f"- {f}" for f in fixes) + logged + f"\n(torch: {exc})",
                pid=dead[0][1].pid,
                signal=name,
                exit_code=dead[0][1].exitcode,
                samples=samples,
                kind=parts[0][1].kind,
            ) from exc
        # skip: what was sent and not delivered, minus the culprits, then the rest of the order
        left = [b for t, (_, b) in sorted(self._sent.items()) if t in self._task_info]
        left = [[i for i in b if i not in culprits] for b in left]
        left = [b for b in left if b]
        rest = self._batches if self._batches is not None else self._sampler_iter
        self._broken = True
        self._shutdown_workers()
        logger.warning("continuing the epoch without sample(s) %s after the worker death", samples)
        self._replacement = _GuardedIter(loader, batches=itertools.chain(left, rest), deaths=self._deaths)
        return self._next_data()
