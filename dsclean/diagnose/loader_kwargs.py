"""DataLoader settings from the measured machine: ``recommended_loader_kwargs``.

The decoded size of a sample drives both the shared memory in flight and the
workers' memory. It comes from the index's recorded media facts
(width x height x channels for images, 3 channels when unknown because the
default loader converts to RGB; frames x channels x 4 for float32 audio), or,
when the index has no facts (built without scan results) or the dataset is not
an index, from decoding a small random sample.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import UserError
from ..openfile import map_regular
from .sysinfo import SysPaths, read_cgroup, read_cpus, read_meminfo, read_shm

DEFAULT_PREFETCH = 2
#: rough memory a forked worker adds on its own (interpreter + torch pages it touches), beyond its batches
WORKER_OVERHEAD = 200 * 2**20
#: never recommend more workers than this: beyond it the main process rarely keeps up
MAX_WORKERS = 16
#: share of available RAM / free /dev/shm the loader may plan to use
MEMORY_SHARE = 0.5
SHM_SHARE = 0.5
#: samples decoded to measure the size when the index has no facts
MEASURE_SAMPLES = 16
_FACT_NAMES = ("kind", "width", "height", "channels", "frames")


@dataclass
class SampleEstimate:
    """Bytes of one decoded sample: ``mean`` (used for estimates) and ``max``; how it was obtained."""

    mean: int
    max: int
    method: str  # "index facts", "measured", "given"
    rows: int = 0  # rows (or samples) the estimate is based on
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- sample size


def index_facts(path: str) -> dict[str, np.ndarray]:
    """The kind and media-fact columns of an index (Arrow or npy) as int64 arrays, -1 for unknown."""
    import pyarrow as pa

    if not os.path.exists(path):
        raise UserError(f"{path}: index not found")
    out: dict[str, np.ndarray] = {}
    try:
        if os.path.isdir(path):
            for name in _FACT_NAMES:
                f = os.path.join(path, f"{name}s.npy" if name == "kind" else f"{name}.npy")
                if os.path.exists(f):
                    out[name] = np.asarray(np.load(f, mmap_mode="r", allow_pickle=False), dtype=np.int64)
        else:
            with pa.BufferReader(pa.py_buffer(map_regular(path) or b"")) as source:  # (a FIFO: refused)
                table = pa.ipc.open_file(source).read_all()
            for name in _FACT_NAMES:
                if name in table.column_names:
                    col = table.column(name).cast(pa.int64()).fill_null(-1)
                    out[name] = col.to_numpy()
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise UserError(f"{path}: cannot read the index's media facts ({exc}); rebuild it with dsclean index") from exc
    return out


def bytes_from_facts(facts: dict[str, np.ndarray]) -> np.ndarray:
    """Decoded bytes per row from media facts; -1 where the facts are missing.

    Images: width x height x channels (3 when unknown: the default loader gives RGB), uint8.
    Audio: frames x channels x 4 (float32).
    """
    kind = facts.get("kind")
    if kind is None:
        return np.zeros(0, np.int64)
    n = len(kind)
    get = lambda name: facts.get(name, np.full(n, -1, np.int64))  # noqa: E731
    width, height, channels, frames = get("width"), get("height"), get("channels"), get("frames")
    out = np.full(n, -1, np.int64)
    image = (kind == 0) & (width > 0) & (height > 0)
    out[image] = width[image] * height[image] * np.where(channels[image] > 0, channels[image], 3)
    audio = (kind == 1) & (frames >= 0) & (channels > 0)
    out[audio] = frames[audio] * channels[audio] * 4
    return out


def sample_nbytes(obj: Any) -> int:
    """Bytes of a decoded sample: tensors, arrays, PIL images, and tuples/lists/dicts of them."""
    if obj is None:
        return 0
    if hasattr(obj, "nbytes"):  # numpy
        return int(obj.nbytes)
    if hasattr(obj, "element_size") and hasattr(obj, "nelement"):  # torch
        return int(obj.element_size() * obj.nelement())
    if hasattr(obj, "getbands") and hasattr(obj, "size"):  # PIL
        w, h = obj.size
        return int(w * h * len(obj.getbands()))
    if isinstance(obj, dict):
        return sum(sample_nbytes(v) for v in obj.values())
    if isinstance(obj, (tuple, list)):
        return sum(sample_nbytes(v) for v in obj)
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    return 0


def measure_sample_bytes(dataset, n: int = MEASURE_SAMPLES, seed: int = 0) -> SampleEstimate | None:
    """Decode up to ``n`` random samples (``dataset[i]``) and measure them; None if none could be loaded."""
    total = len(dataset)
    if total == 0:
        return None
    picks = random.Random(seed).sample(range(total), min(n, total))
    sizes, failed = [], 0
    for i in picks:
        try:
            item = dataset[i]
        except Exception:  # a broken sample says nothing about the size of good ones: count it, go on
            failed += 1
            continue
        if item is None:
            failed += 1
            continue
        sample = item[0] if isinstance(item, tuple) and len(item) == 2 else item
        sizes.append(sample_nbytes(sample))
    if not sizes:
        return None
    note = f"{failed} of {len(picks)} samples failed to load" if failed else ""
    return SampleEstimate(int(np.mean(sizes)), int(max(sizes)), "measured", len(sizes), note)


def estimate_sample_bytes(dataset_or_index, *, n: int = MEASURE_SAMPLES, seed: int = 0) -> SampleEstimate | None:
    """Index facts when the dataset is an index (path or IndexedDataset) that has them, else measured."""
    index = (
        dataset_or_index
        if isinstance(dataset_or_index, (str, os.PathLike))
        else getattr(dataset_or_index, "index", None)
    )
    if isinstance(index, (str, os.PathLike)):
        per_row = bytes_from_facts(index_facts(os.fspath(index)))
        known = per_row[per_row >= 0]
        if len(known):
            note = "" if len(known) == len(per_row) else f"facts for {len(known)} of {len(per_row)} rows"
            return SampleEstimate(int(known.mean()), int(known.max()), "index facts", int(len(known)), note)
    dataset = dataset_or_index
    if isinstance(dataset_or_index, (str, os.PathLike)):
        from ..data.dataset import IndexedDataset

        dataset = IndexedDataset(os.fspath(dataset_or_index), on_error="skip")
    return measure_sample_bytes(dataset, n=n, seed=seed)


# --------------------------------------------------------------------------- recommendation


@dataclass
class Recommendation:
    """``kwargs`` for ``DataLoader(dataset, **kwargs)`` and the ``reasons`` behind them."""

    kwargs: dict
    reasons: list[str] = field(default_factory=list)
    estimate: SampleEstimate | None = None
    bounds: dict[str, int] = field(default_factory=dict)  # workers allowed by cpu / memory / shm

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return "\n".join([f"DataLoader(dataset, {args})", *(f"  - {r}" for r in self.reasons)])

    def to_json(self) -> dict:
        return {
            "kwargs": self.kwargs,
            "reasons": self.reasons,
            "bounds": self.bounds,
            "estimate": self.estimate.to_json() if self.estimate else None,
        }


def available_memory(paths: SysPaths) -> tuple[int | None, str]:
    """Bytes this process can still allocate: MemAvailable, or the cgroup's limit minus usage if tighter."""
    mem, cg = read_meminfo(paths), read_cgroup(paths)
    options: list[tuple[int, str]] = []
    if mem.available is not None:
        options.append((mem.available, "MemAvailable"))
    if cg.memory_limit is not None:
        options.append((max(0, cg.memory_limit - (cg.memory_usage or 0)), f"cgroup v{cg.version} limit minus usage"))
    if not options:
        return None, "unknown"
    return min(options)


def loader_memory(workers: int, batch_size: int, prefetch: int, sample_bytes: int) -> int:
    """Estimated memory of the loader beyond the main process: batches in flight + per-worker cost."""
    in_flight = workers * prefetch * batch_size * sample_bytes
    return in_flight + workers * (WORKER_OVERHEAD + batch_size * sample_bytes)


def human(n: float | None) -> str:
    """``1.5 GiB``-style size (``?`` for None)."""
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def recommended_loader_kwargs(
    dataset,
    batch_size: int,
    *,
    prefetch_factor: int = DEFAULT_PREFETCH,
    sys_paths: SysPaths = SysPaths(),
    cuda_available: bool | None = None,
    sample_bytes: int | None = None,
) -> Recommendation:
    """DataLoader keyword arguments bounded by usable cores, available memory and free /dev/shm.

    ``dataset``: an IndexedDataset, an index path, or any map-style Dataset (a few
    samples are decoded to size them), or None with ``sample_bytes`` given.
    ``cuda_available`` None asks torch. The reasons say which bound decided.
    """
    if batch_size < 1:
        raise UserError(f"batch_size must be 1 or more, not {batch_size}")
    if prefetch_factor < 1:
        raise UserError(f"prefetch_factor must be 1 or more, not {prefetch_factor}")
    if sample_bytes is not None:
        estimate = SampleEstimate(sample_bytes, sample_bytes, "given")
    elif dataset is not None:
        estimate = estimate_sample_bytes(dataset)
    else:
        estimate = None
    reasons: list[str] = []
    bounds: dict[str, int] = {}

    cpus = read_cpus(sys_paths)
    bounds["cpu"] = min(MAX_WORKERS, cpus.usable - 1) if cpus.usable > 1 else 0
    reasons.append(
        f"{cpus.usable} usable cores (os.cpu_count() {cpus.logical}, affinity {cpus.affinity}, "
        f"cgroup quota {_fmt_quota(cpus.quota)}): up to {bounds['cpu']} workers, one core left for "
        "the main process" + (f", capped at {MAX_WORKERS}" if cpus.usable - 1 > MAX_WORKERS else "")
    )
    per_sample = estimate.mean if estimate else 0
    if estimate:
        reasons.append(
            f"a decoded sample is about {human(estimate.mean)} ({estimate.method}"
            + (f", {estimate.note}" if estimate.note else "")
            + ")"
        )
    else:
        reasons.append("sample size unknown: memory and shared-memory bounds count only the per-worker overhead")

    avail, source = available_memory(sys_paths)
    if avail is not None:
        per_worker = WORKER_OVERHEAD + (prefetch_factor + 1) * batch_size * per_sample
        bounds["memory"] = int(MEMORY_SHARE * avail // per_worker)
        reasons.append(
            f"{human(avail)} memory available ({source}); each worker needs about {human(per_worker)} "
            f"({prefetch_factor}+1 batches of {batch_size} + {human(WORKER_OVERHEAD)} overhead): "
            f"up to {bounds['memory']} workers within {int(MEMORY_SHARE * 100)}%"
        )
    shm = read_shm(sys_paths)
    if shm.free is not None and per_sample:
        per_worker_shm = prefetch_factor * batch_size * per_sample
        bounds["shm"] = int(SHM_SHARE * shm.free // per_worker_shm)
        reasons.append(
            f"{human(shm.free)} free in {shm.path}; each worker keeps {prefetch_factor} batches "
            f"({human(per_worker_shm)}) there: up to {bounds['shm']} workers within {int(SHM_SHARE * 100)}%"
        )
    workers = max(0, min(bounds.values()))
    decider = min(bounds, key=lambda k: bounds[k])
    reasons.append(
        f"num_workers={workers}: limited by {decider}" + (" (0 = load in the main process)" if workers == 0 else "")
    )

    kwargs: dict[str, Any] = {"batch_size": batch_size, "num_workers": workers}
    if workers > 0:
        kwargs["prefetch_factor"] = prefetch_factor
        kwargs["persistent_workers"] = True
        reasons.append("persistent_workers=True: workers (and their warm caches) survive between epochs")
    if cuda_available is None:
        import torch

        cuda_available = bool(torch.cuda.is_available())
    kwargs["pin_memory"] = bool(cuda_available)
    reasons.append(
        "pin_memory=True: CUDA is available, pinned batches copy to the GPU asynchronously"
        if cuda_available
        else "pin_memory=False: no CUDA device"
    )
    return Recommendation(kwargs, reasons, estimate, bounds)


def _fmt_quota(quota: float | None) -> str:
    return "none" if quota is None else f"{quota:g} cores"
