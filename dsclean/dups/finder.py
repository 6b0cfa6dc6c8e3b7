"""``dsclean dups`` as a Python API: find exact and near duplicates over one or more roots (splits).

:func:`find_duplicates` gathers facts (:mod:`.collect`), groups (:mod:`.grouping`),
and returns a :class:`DupsResult`; :func:`write_groups` writes the JSONL described
in docs/reference/facts.md; :func:`quarantine_duplicates` moves the extras (:mod:`.moves`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..argtypes import memory_floor_problem
from ..atomic import atomic_output
from ..errors import UserError
from ..jsonpaths import path_fields
from ..quality.compare import DEFAULT_MIN_CORRELATION, similarity
from ..quality.flags import FlagOptions
from ..quality.texture import WINDOWS
from ..storage.listing import Obj
from ..storage.reads import DEFAULT_READ_THREADS, ReadPolicy
from ..storage.urls import is_url
from . import DEFAULT_NEAR
from .collect import Inventory, check_outside_roots, collect
from .grouping import Group, NearStats, group
from .objects import second_hashes_objects, thumbs_objects
from .pool import fresh_workers, run_chunks
from .worker import Limits, second_hashes_chunk, thumbs_chunk


@dataclass(frozen=True)
class DupsOptions:
    """Everything ``dsclean dups`` can be told about finding. The defaults are the CLI's."""

    near: int = DEFAULT_NEAR  # max Hamming distance of near duplicates; 0 = exact only
    min_similarity: float = DEFAULT_MIN_CORRELATION  # the fine check's threshold; 0 would skip nothing
    verify: bool = True  # run the fine check on candidate pairs (off: the hash alone decides)
    second_signal: bool = True  # also search textures on their anti-aliased hash (dsclean.quality.texture)
    jobs: int = 0  # worker processes; 0 = usable cores
    timeout: float = 60.0  # seconds per file in a worker; 0 = none
    max_memory: int = 0  # bytes one file's decode may add in a worker; 0 = none
    use_results: bool = True  # take facts from each root's last scan results where they are current
    state_dir: str | None = None  # where the roots' last scans are recorded (default: $DSCLEAN_STATE_DIR, per user)
    exclude: tuple[str, ...] = ()  # folders to leave out (the quarantine is always left out)
    flag_options: FlagOptions = FlagOptions()
    storage_options: dict = field(default_factory=dict, repr=False)  # for URL roots; may hold secrets: never shown
    manifest: str | None = None  # URL roots: the keys to compare, instead of listing (text, CSV or Parquet)
    read_threads: int = DEFAULT_READ_THREADS  # URL roots: object reads in flight per worker
    read_policy: ReadPolicy = ReadPolicy()  # URL roots: retries, and the in-memory size limit of one object


@dataclass
class DupsSummary:
    """Counts of one run; what the CLI prints."""

    roots: list[str]
    files: int = 0
    images: int = 0
    exact_groups: int = 0
    near_groups: int = 0
    duplicate_files: int = 0  # files in groups beyond one per group
    leaking_groups: int = 0  # groups spanning two or more roots (splits)
    near: int = DEFAULT_NEAR
    near_stats: dict = field(default_factory=dict)
    from_results: int = 0
    computed: int = 0
    excluded_bad: int = 0
    results_sources: list[str] = field(default_factory=list)  # per root: where its scan results came from
    undecodable: int = 0
    failed: list[str] = field(default_factory=list)
    same_file: list[str] = field(default_factory=list)  # hard links / one file seen twice: never grouped as copies
    elapsed: float = 0.0
    output: str | None = None
    planned: int = 0  # extra copies chosen to move (with --dry-run: how many would move)
    moved: int = 0
    move_errors: list[str] = field(default_factory=list)
    kept_across_splits: int = 0  # extras in another split, left in place (no --drop-from)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class DupsResult:
    """The groups (in output order) over the inventory they index, and the summary."""

    inventory: Inventory
    groups: list[Group]
    summary: DupsSummary

    def records(self):
        """Yield each group as the JSON-ready dict written to groups.jsonl."""
        inv = self.inventory
        # A root given relative also gets root_abs: the groups file is read from other folders (report --dups).
        extra = [{} if os.path.isabs(r) or is_url(r) else {"root_abs": os.path.abspath(r)} for r in inv.roots]
        for n, g in enumerate(self.groups):
            yield {
                "group": n,
                "kind": g.kind,
                "members": [
                    {
                        "root": inv.roots[inv.root[i]],
                        **extra[inv.root[i]],
                        **path_fields(inv.rel(i)),
                        "distance": int(d),
                    }
                    for i, d in zip(g.members, g.distance)
                ],
                "splits": [inv.roots[r] for r in g.splits(inv)],
            }


def _workers(jobs: int) -> int:
    if jobs:
        return jobs
    from ..scanning.cores import usable_cores

    return usable_cores()


def find_duplicates(
    roots: list[str] | str, options: DupsOptions = DupsOptions(), *, quarantine: str | None = None, progress=None
) -> DupsResult:
    """Exact and near duplicate groups over ``roots`` (each root is one split; names as given).

    ``progress``: called with 1 for each file whose facts are computed here (not taken from scan results).
    """
    t0 = time.monotonic()
    roots = [roots] if isinstance(roots, str) else list(roots)
    if not roots:
        raise UserError("give at least one root folder")
    if options.near < 0 or options.near > 32:
        raise UserError(f"--near {options.near}: must be from 0 (exact duplicates only) to 32 bits")
    if memory_floor_problem(options.max_memory):
        raise UserError(memory_floor_problem(options.max_memory))
    if options.max_memory and any(is_url(r) for r in roots):
        raise UserError(
            "--max-memory: not yet for a storage URL root (a worker's reader threads share the address space "
            "the ceiling would limit); give --max-in-memory to bound one object's bytes instead"
        )
    if quarantine:
        check_outside_roots(quarantine, roots, "the quarantine")
    workers = _workers(options.jobs)
    if any(is_url(r) for r in roots):
        fresh_workers(workers)  # workers with the environment's credentials as they are now
    limits = Limits(
        options.timeout, options.max_memory, options.flag_options, options.read_threads, options.read_policy
    )
    exclude = tuple(options.exclude) + ((os.path.abspath(quarantine),) if quarantine and not is_url(quarantine) else ())
    inv = collect(
        roots,
        limits=limits,
        workers=workers,
        exclude=exclude,
        use_results=options.use_results,
        progress=progress,
        state_dir=options.state_dir,
        storage_options=options.storage_options,
        manifest=options.manifest,
    )
    verify = _verifier(inv, limits, workers, options.min_similarity) if options.verify else None
    second = _second_hasher(inv, limits, workers) if options.second_signal else None
    groups, near_stats = group(inv, options.near, verify, second)
    s = DupsSummary(roots=list(roots), near=options.near, near_stats=asdict(near_stats))
    s.files, s.images = len(inv), int((inv.kind == 0).sum())
    s.exact_groups = sum(g.kind == "exact" for g in groups)
    s.near_groups = len(groups) - s.exact_groups
    s.duplicate_files = sum(len(g.members) - 1 for g in groups)
    s.leaking_groups = sum(len(g.splits(inv)) > 1 for g in groups)
    s.from_results, s.computed, s.excluded_bad = inv.from_results, inv.computed, inv.excluded_bad
    s.undecodable, s.failed, s.same_file = inv.undecodable, inv.failed, list(inv.same_file)
    s.results_sources = list(inv.results_sources)
    s.elapsed = round(time.monotonic() - t0, 3)
    return DupsResult(inv, groups, s)


def _verifier(inv: Inventory, limits: Limits, workers: int, threshold: float):
    """The fine check over candidate pairs: 1 confirmed, 0 rejected, -1 a picture could not be decoded."""

    def verify(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        thumbs = _thumbnails(inv, np.unique(np.concatenate((a, b))), limits, workers)
        out = np.zeros(len(a), dtype=np.int8)
        for k, (i, j) in enumerate(zip(a.tolist(), b.tolist())):
            ti, tj = thumbs.get(i), thumbs.get(j)
            if ti is None or tj is None:
                out[k] = -1
            else:
                out[k] = similarity(ti, tj, threshold) >= threshold
        return out

    return verify


def _second_hasher(inv: Inventory, limits: Limits, workers: int):
    """The second signal: the anti-aliased hashes of the files asked for (textures only), one per window of
    :data:`dsclean.quality.texture.WINDOWS`, decoded again in the worker pool."""

    def second(files: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hashes = np.zeros((len(files), len(WINDOWS)), dtype=np.uint64)
        ok = np.zeros(len(files), dtype=bool)
        for r in range(len(inv.roots)):
            at = np.flatnonzero(inv.root[files] == r)
            pending: dict = {}  # the chunks in flight: first item -> positions in files
            task, source, item = _source(inv, r, second_hashes_chunk, second_hashes_objects)

            def chunks(at: np.ndarray = at, item=item):
                for k in range(0, len(at), 32):
                    chunk = [item(int(files[j])) for j in at[k : k + 32]]
                    pending[chunk[0]] = at[k : k + 32]  # names are unique within a root
                    yield chunk

            for chunk, answers in run_chunks(task, source, chunks(), limits, workers, lambda rel: None):
                for j, h in zip(pending.pop(chunk[0]).tolist(), answers):
                    if h is not None:
                        hashes[j], ok[j] = h, True
        return hashes, ok

    return second


def _thumbnails(inv: Inventory, files: np.ndarray, limits: Limits, workers: int) -> dict[int, np.ndarray]:
    """64x64 grey thumbnails of ``files``, decoded again in the worker pool (4 KiB each)."""
    out: dict[int, np.ndarray] = {}
    for r in range(len(inv.roots)):
        mine = files[inv.root[files] == r]
        task, source, item = _source(inv, r, thumbs_chunk, thumbs_objects)
        items = [item(int(i)) for i in mine]
        index = {it: int(i) for it, i in zip(items, mine)}
        chunks = [items[k : k + 32] for k in range(0, len(items), 32)]
        for chunk, thumbs in run_chunks(task, source, chunks, limits, workers, lambda rel: None):
            for it, t in zip(chunk, thumbs):
                if t is not None:
                    out[index[it]] = t
    return out


def _source(inv: Inventory, r: int, local_task, object_task):
    """How root ``r``'s files are decoded again in the pool: (task, its root argument, file index -> chunk item):
    a folder's by relative path, a bucket prefix's by object (key and size: one GET, no HEAD)."""
    store = inv.stores[r] if inv.stores else None
    if store is None:
        return local_task, os.path.abspath(inv.roots[r]), lambda i: os.fsdecode(inv.rel(i))
    return object_task, store, lambda i: Obj(os.fsdecode(inv.rel(i)), int(inv.size[i]))


def check_groups_output(output: str, roots: list[str]) -> None:
    """Refuse an ``-o`` that could not be written (no such folder, a folder, not writable, inside a root);
    the CLI calls it before any work, :func:`write_groups` again before writing."""
    if is_url(output):
        raise UserError(f"-o {output}: the groups are written to a local file (never into a bucket)")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UserError(f"{output}: the folder {parent} does not exist")
    if os.path.isdir(output):
        raise UserError(f"{output}: is a folder; -o takes a file name such as groups.jsonl")
    if not os.access(parent, os.W_OK | os.X_OK):  # also a read-only file system (EROFS), even for root
        raise UserError(f"{output}: the folder {parent} is not writable")
    check_outside_roots(output, roots, "-o")


def write_groups(result: DupsResult, output: str) -> None:
    """One JSON object per group (docs/reference/facts.md), written to a temp file and renamed."""
    check_groups_output(output, result.inventory.roots)
    with atomic_output(output) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for record in result.records():
            f.write(json.dumps(record) + "\n")
    result.summary.output = output
