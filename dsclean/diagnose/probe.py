"""``dsclean probe``: run a real DataLoader and watch every worker's memory.

A background thread samples, every ``interval`` seconds (0.5 by default), the
USS and PSS of each worker (children of this process that appeared after the
loader started, via psutil) and the main process's RSS. After the run a line is
fitted to each worker's USS over time, skipping the warm-up (samples before the
first batch and the first ``WARMUP_SHARE`` of the run, when imports and
allocator pools fill).

A worker *climbs* when its fitted slope exceeds ``CLIMB_SLOPE`` (1 MiB/s) AND
the fitted growth over the measured window exceeds ``CLIMB_GROWTH`` (16 MiB):
both, so that a short run's noise does not count, nor does a tiny steady leak
over a long run. A steady climb is the signature of the per-worker copying
problem (a Dataset holding Python objects that every forked worker copies as
their reference counts are written) or of a cache that grows per item.

``check_all`` is the "run with num_workers=0" step over the whole dataset: every
sample is loaded in this process and each failure is kept with its path and
full traceback, not just the first.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import UserError
from .loader_kwargs import human

#: default interval between memory samples (seconds)
INTERVAL = 0.5
#: a worker climbs when its USS slope exceeds this (bytes/s) ...
CLIMB_SLOPE = 2**20
#: ... and its fitted growth over the measured window exceeds this (bytes)
CLIMB_GROWTH = 16 * 2**20
#: memory sparklines span at least this much, so noise below the climb threshold draws flat
SPARK_MIN_SPAN = CLIMB_GROWTH
#: share of the run (after the first batch) treated as warm-up and left out of the fit
WARMUP_SHARE = 0.25
#: fewer points than this after warm-up: no verdict
MIN_POINTS = 3
DEFAULT_SECONDS = 10.0
_BARS = "▁▂▃▄▅▆▇█"
_ASCII_BARS = "_.-=+*#@"


@dataclass
class WorkerTrace:
    """Memory samples of one worker (bytes) and the fitted trend."""

    pid: int
    t: list[float] = field(default_factory=list)
    uss: list[int] = field(default_factory=list)
    pss: list[int | None] = field(default_factory=list)
    slope: float | None = None  # bytes per second over the measured window
    growth: float | None = None  # fitted growth over the measured window (bytes)
    climbing: bool = False

    @property
    def start(self) -> int | None:
        return self.uss[0] if self.uss else None

    @property
    def end(self) -> int | None:
        return self.uss[-1] if self.uss else None


@dataclass
class ProbeResult:
    num_workers: int
    batch_size: int
    batches: int = 0
    samples: int = 0
    failed: int = 0  # samples the dataset returned as None (on_error="skip")
    seconds: float = 0.0  # from the first batch to the end
    startup: float = 0.0  # from creating the iterator to the first batch
    samples_per_s: float = 0.0
    workers: list[WorkerTrace] = field(default_factory=list)
    main_t: list[float] = field(default_factory=list)
    main_rss: list[int] = field(default_factory=list)
    fit_from: float = 0.0  # samples before this time are warm-up
    memory_metric: str = "uss"
    error: str | None = None  # the DataLoader's exception text, if the run failed

    @property
    def climbing(self) -> bool:
        return any(w.climbing for w in self.workers)

    @property
    def exit_code(self) -> int:
        return 1 if self.climbing or self.failed or self.error else 0

    def to_json(self) -> dict:
        out = asdict(self)
        out["climbing"] = self.climbing
        return out


# --------------------------------------------------------------------------- sampling


class _Sampler(threading.Thread):
    """Samples the workers' USS/PSS and the main RSS every ``interval`` seconds until stopped."""

    def __init__(self, interval: float, t0: float) -> None:
        super().__init__(name="dsclean-probe-sampler", daemon=True)
        import psutil

        self.psutil = psutil
        self.me = psutil.Process()
        self.before = {p.pid for p in self.me.children()}
        self.interval, self.t0 = interval, t0
        self.stop_event = threading.Event()
        self.workers: dict[int, WorkerTrace] = {}
        self.main_t: list[float] = []
        self.main_rss: list[int] = []
        self.metric = "uss"

    def run(self) -> None:
        while True:
            self.sample()
            if self.stop_event.wait(self.interval):
                break

    def sample(self) -> None:
        ps = self.psutil
        t = time.monotonic() - self.t0
        self.main_t.append(t)
        self.main_rss.append(self.me.memory_info().rss)
        for child in self.me.children():
            if child.pid in self.before:
                continue
            try:
                uss, pss = self._memory(child)
            except (ps.NoSuchProcess, ps.ZombieProcess):
                continue  # exited between listing and reading
            trace = self.workers.setdefault(child.pid, WorkerTrace(child.pid))
            trace.t.append(t)
            trace.uss.append(uss)
            trace.pss.append(pss)

    def _memory(self, proc) -> tuple[int, int | None]:
        """USS and PSS (Linux); RSS where the full info is denied or unsupported."""
        try:
            info = proc.memory_full_info()
            return int(info.uss), (int(info.pss) if hasattr(info, "pss") else None)
        except self.psutil.AccessDenied:
            self.metric = "rss"
            return int(proc.memory_info().rss), None

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


def fit_trend(trace: WorkerTrace, fit_from: float) -> None:
    """Fit USS = a + slope * t over samples at ``t >= fit_from``; flag a steady climb."""
    t = np.asarray(trace.t, dtype=float)
    uss = np.asarray(trace.uss, dtype=float)
    keep = t >= fit_from
    if keep.sum() < MIN_POINTS:
        return
    t, uss = t[keep], uss[keep]
    if t[-1] - t[0] <= 0:
        return
    slope = float(np.polyfit(t, uss, 1)[0])
    trace.slope = slope
    trace.growth = slope * float(t[-1] - t[0])
    trace.climbing = slope > CLIMB_SLOPE and trace.growth > CLIMB_GROWTH


# --------------------------------------------------------------------------- running


def to_tensor(sample: Any) -> Any:
    """PIL images become uint8 HWC tensors (as a real pipeline would), audio passes through."""
    if hasattr(sample, "getbands"):
        import torch

        return torch.from_numpy(np.asarray(sample).copy())
    return sample


def collate_list(batch: list) -> list:
    """Keep the batch as a list: samples of different sizes need no stacking to be measured."""
    return batch


def probe_dataset(
    dataset,
    *,
    num_workers: int = 2,
    batch_size: int = 32,
    batches: int | None = None,
    seconds: float | None = None,
    interval: float = INTERVAL,
    collate_fn: Callable | None = collate_list,
    shuffle: bool = True,
    seed: int = 0,
) -> ProbeResult:
    """Iterate a DataLoader over ``dataset`` (epochs repeat) for ``batches`` or ``seconds``, sampling memory.

    Workers are persistent, so the same processes are watched across epochs.
    An exception from the loader ends the run; its text is kept in ``error``.
    """
    import torch
    from torch.utils.data import DataLoader

    if batches is not None and seconds is not None:
        raise UserError("pass --batches or --seconds, not both")
    if batches is None and seconds is None:
        seconds = DEFAULT_SECONDS
    if len(dataset) == 0:
        raise UserError("the dataset is empty: nothing to probe")
    kwargs: dict[str, Any] = {
        "batch_size": batch_size,
        "num_workers": num_workers,
        "shuffle": shuffle,
        "collate_fn": collate_fn,
        "generator": torch.Generator().manual_seed(seed),
    }
    if num_workers > 0:
        kwargs["persistent_workers"] = True
    loader = DataLoader(dataset, **kwargs)
    result = ProbeResult(num_workers=num_workers, batch_size=batch_size)
    t0 = time.monotonic()
    sampler = _Sampler(interval, t0)
    sampler.start()
    first: float | None = None
    try:
        done = False
        while not done:
            for batch in loader:
                now = time.monotonic()
                if first is None:
                    first = now
                items = batch if isinstance(batch, list) else [batch]
                result.batches += 1
                result.samples += sum(1 for b in items if b is not None) if isinstance(batch, list) else batch_size
                result.failed += sum(1 for b in items if b is None) if isinstance(batch, list) else 0
                if (batches is not None and result.batches >= batches) or (
                    seconds is not None and now - first >= seconds
                ):
                    done = True
                    break
    except Exception as exc:  # the loader's failure is the finding: keep its text for the report
        result.error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        _release(exc)
    finally:
        end = time.monotonic()
        sampler.sample()
        sampler.stop()
        del loader  # shuts the persistent workers down
    first = first if first is not None else end
    result.startup = round(first - t0, 3)
    result.seconds = round(end - first, 3)
    result.samples_per_s = round(result.samples / result.seconds, 1) if result.seconds > 0 else 0.0
    result.fit_from = (first - t0) + WARMUP_SHARE * (end - first)
    result.memory_metric = sampler.metric
    result.main_t, result.main_rss = sampler.main_t, sampler.main_rss
    result.workers = sorted(sampler.workers.values(), key=lambda w: w.t[0] if w.t else 0)
    for w in result.workers:
        fit_trend(w, result.fit_from)
    return result


def _release(exc: BaseException | None) -> None:
    """Clear the frames of an exception chain: they reference the DataLoader iterator in a cycle, which
    would keep its workers alive until a later garbage collection (which then waits for them)."""
    while exc is not None:
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


def open_dataset(index: str, *, root: str | None = None, follow_symlinks: str | None = None, **kwargs):
    """``IndexedDataset(index, ...)`` as probe opens it: an index or a packed shard set (what
    ``IndexedDataset`` takes). ``follow_symlinks`` None: the index's own link policy, so an index
    built with ``--symlinks all`` (``--files imagefolder``: a symlink farm) follows links out of
    its root, as :meth:`IndexedDataset.from_folder` does; else ``"inside"``."""
    from ..data import shards
    from ..data.dataset import IndexedDataset, resolve_source
    from ..index.store import read_meta

    kind, path = resolve_source(index)
    if follow_symlinks is None:
        meta = read_meta(shards.packed_index(path) if kind == "packed" else path)
        follow_symlinks = "all" if kind != "packed" and meta.get("symlinks") == "all" else "inside"
    return IndexedDataset(path, root=root, follow_symlinks=follow_symlinks, **kwargs)


def probe_index(index: str, *, root: str | None = None, follow_symlinks: str | None = None, **kwargs) -> ProbeResult:
    """``probe_dataset`` over an IndexedDataset (images as uint8 tensors, broken samples skipped and counted);
    ``follow_symlinks``: as in :func:`open_dataset`."""
    ds = open_dataset(index, root=root, follow_symlinks=follow_symlinks, transform=to_tensor, on_error="skip")
    return probe_dataset(ds, **kwargs)


@dataclass
class SampleFailure:
    index: int
    path: str
    error: str  # last line: "SampleError: sample 3 (...): OSError: ..."
    traceback: str


def check_all(
    index_or_dataset,
    *,
    root: str | None = None,
    follow_symlinks: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, list[SampleFailure]]:
    """Load every sample in this process; ``(samples tried, failures with path and full traceback)``.

    An index (or packed set) is opened by :func:`open_dataset` (``follow_symlinks`` as there)."""
    ds = index_or_dataset
    if isinstance(ds, (str, os.PathLike)):
        ds = open_dataset(os.fspath(ds), root=root, follow_symlinks=follow_symlinks, on_error="raise")
    n = len(ds)
    failures: list[SampleFailure] = []
    for i in range(n):
        try:
            ds[i]
        except Exception as exc:  # every failure is a finding: record it, go on to the next sample
            path = getattr(exc, "path", None) or _path_of(ds, i)
            failures.append(
                SampleFailure(
                    i,
                    path,
                    f"{type(exc).__name__}: {exc}",
                    "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                )
            )
        if progress is not None:
            progress(i + 1, n)
    return n, failures


def _path_of(ds, i: int) -> str:
    path = getattr(ds, "path", None)
    if callable(path):
        try:
            return str(path(i))
        except Exception as exc:  # the path itself may be what is broken
            return f"<path unavailable: {exc}>"
    return f"<sample {i}>"


# --------------------------------------------------------------------------- output


def _unicode_ok() -> bool:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    return "utf" in enc


def sparkline(values: list[float], width: int = 40, ascii_only: bool | None = None, min_span: float = 0.0) -> str:
    """A one-line chart of ``values`` (resampled to ``width`` buckets), scaled from their min over
    ``max(max - min, min_span)``: with ``min_span`` a few KiB of noise stays flat instead of filling the scale."""
    if not values:
        return ""
    bars = _ASCII_BARS if (ascii_only if ascii_only is not None else not _unicode_ok()) else _BARS
    arr = np.asarray(values, dtype=float)
    if len(arr) > width:
        arr = np.array([chunk.mean() for chunk in np.array_split(arr, width)])
    lo = float(arr.min())
    hi = max(float(arr.max()), lo + min_span)
    if hi - lo <= 0:
        return bars[0] * len(arr)
    idx = np.minimum(((arr - lo) / (hi - lo) * len(bars)).astype(int), len(bars) - 1)
    return "".join(bars[i] for i in idx)


def _rate(slope: float | None) -> str:
    return "?" if slope is None else f"{'+' if slope >= 0 else '-'}{human(abs(slope))}/s"


def format_probe(result: ProbeResult, ascii_only: bool | None = None) -> str:
    """Throughput, per-worker memory start/end with a sparkline, and the verdict."""
    r = result
    lines = [
        f"probe: {r.num_workers} workers, batch_size {r.batch_size}: {r.batches} batches, {r.samples} samples "
        f"in {r.seconds:.1f} s = {r.samples_per_s:.1f} samples/s (first batch after {r.startup:.1f} s)"
    ]
    if r.failed:
        lines.append(
            f"  {r.failed} samples failed to load (skipped): list them with dsclean probe INDEX --num-workers 0 --all"
        )
    metric = r.memory_metric.upper()
    if r.main_rss:
        chart = sparkline(r.main_rss, ascii_only=ascii_only, min_span=SPARK_MIN_SPAN)
        lines.append(f"  main RSS  {chart}  {human(r.main_rss[0])} -> {human(r.main_rss[-1])}")
    for n, w in enumerate(r.workers):
        verdict = "CLIMBING" if w.climbing else "settled" if w.slope is not None else "too short to tell"
        pss = f", PSS {human(w.pss[-1])}" if w.pss and w.pss[-1] is not None else ""
        chart = sparkline(w.uss, ascii_only=ascii_only, min_span=SPARK_MIN_SPAN)
        lines.append(
            f"  worker {n} (pid {w.pid}) {metric} {chart}  "
            f"{human(w.start)} -> {human(w.end)}{pss}, {_rate(w.slope)}: {verdict}"
        )
    if r.num_workers and not r.workers:
        lines.append("  no worker was sampled (the run was shorter than the sampling interval)")
    if r.climbing:
        lines.append(
            f"warning: worker memory climbs steadily (> {human(CLIMB_SLOPE)}/s and > {human(CLIMB_GROWTH)} "
            "after warm-up). Each worker keeps growing: the Dataset holds Python objects that every "
            "forked worker copies as it touches them (reference counts), or caches per item. Use "
            "IndexedDataset (a memory-mapped index, no per-sample objects) and do not keep state per item."
        )
    elif r.workers:
        lines.append("worker memory settles: no sign of per-worker copying")
    if r.error:
        from .explain import explain

        exp = explain(r.error)
        lines.append(f"the DataLoader failed: {r.error.strip().splitlines()[-1]}")
        lines.append(f"  {exp.kind}: {exp.title} (dsclean explain for details)")
    return "\n".join(lines)


def failure_reason(error: str) -> str:
    """The kind of a failure, with what differs per file replaced:
    ``"OSError: image file is truncated (N bytes not processed)"``.

    ``error`` is ``"SampleError: sample 3 (cats/x.jpg under /data): OSError: image file is
    truncated (5 bytes not processed)"``: the sample prefix goes; paths (quoted, or bare
    absolute ones) become ``<path>``, numbers ``N`` (an errno stays), memory addresses ``0x…``;
    the rest of the message is kept as it is, so it reads as the error did and failures of
    one kind group together.
    """
    cause = _SAMPLE_PREFIX.sub("", error)
    cause = _QUOTED_PATH.sub("<path>", cause)
    cause = _BARE_PATH.sub("<path>", cause)
    cause = _ADDRESS.sub("0x…", cause)
    cause = _NUMBER.sub("N", cause)
    return re.sub(r"\s+", " ", cause).strip(" :") or error


_SAMPLE_PREFIX = re.compile(r"^\w+: sample \d+ \(.*? under .*?\): ")
_QUOTED_PATH = re.compile(r"'[^'\n]*/[^'\n]*'|\"[^\"\n]*/[^\"\n]*\"")
_BARE_PATH = re.compile(r"(?<![\w.~<])/[^\s,;'\"()<>]+")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
_NUMBER = re.compile(r"(?<!Errno )(?<![\w.])\d+(?:\.\d+)?(?!\w)")


def format_failures(tried: int, failures: list[SampleFailure], *, tracebacks: bool = False, examples: int = 5) -> str:
    """Failures grouped by reason with counts and example paths; every traceback only with ``tracebacks``."""
    lines = [f"loaded {tried} samples in the main process: {len(failures)} failed"]
    groups: dict[str, list[SampleFailure]] = {}
    for f in failures:
        groups.setdefault(failure_reason(f.error), []).append(f)
    for reason, members in sorted(groups.items(), key=lambda g: -len(g[1])):
        lines.append(f"  {len(members):>6}  {reason}")
        lines += [f"            sample {f.index}: {f.path}" for f in members[:examples]]
        if len(members) > examples:
            lines.append(f"            ... and {len(members) - examples} more (--json lists all)")
    if tracebacks:
        for f in failures:
            lines.append("")
            lines.append(f"sample {f.index}: {f.path}")
            lines.append(f"  {f.error}")
            lines.extend(f"    {ln}" for ln in f.traceback.rstrip().splitlines())
    elif failures:
        lines.append("full tracebacks: --tracebacks")
    if any("follow_symlinks='all'" in f.error for f in failures):
        lines.append(
            "links leading out of the root were refused: dsclean probe --symlinks all follows them "
            "(IndexedDataset(..., follow_symlinks='all'))"
        )
    return "\n".join(lines)


def plot_probe(result: ProbeResult, path: str) -> None:
    """Write a PNG of every worker's memory and the main RSS over time (needs matplotlib)."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for n, w in enumerate(result.workers):
        ax.plot(
            w.t,
            [v / 2**20 for v in w.uss],
            label=f"worker {n} {result.memory_metric.upper()}" + (" (climbing)" if w.climbing else ""),
        )
    if result.main_rss:
        ax.plot(result.main_t, [v / 2**20 for v in result.main_rss], "k--", label="main RSS")
    ax.axvline(result.fit_from, color="grey", linestyle=":", label="end of warm-up")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.set_title(f"dsclean probe: {result.num_workers} workers, {result.samples_per_s:.0f} samples/s")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise UserError(f"{path}: cannot write the plot ({exc})") from exc
    finally:
        plt.close(fig)


def require_matplotlib():
    """``matplotlib.pyplot`` (Agg backend), or a UserError saying how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError(
            "--plot needs matplotlib, which is not installed: pip install matplotlib "
            "(the terminal sparklines work without it)"
        ) from None
    return plt
