"""``dsclean pack``: the surviving samples of an index, as WebDataset tar shards with a packed index.

Flow: open the source index -> plan (keys, order, shards; :mod:`.plan`) ->
check or create the folder's ``pack.json`` (:mod:`.state`) -> write the
missing shards on a pool (:mod:`.write`, :mod:`.runner`) -> read back the
shards an earlier run wrote (:mod:`.readback`) -> write the packed index and ``shardindex.json``
(:mod:`.publish`).

Job arrays: ``part=(I, N)`` writes only the shards whose number is I mod N
and leaves a part marker; :func:`finish_pack` then checks every part and
writes the packed index and the shard list.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from .. import locations
from ..atomic import remove_stale_temps
from ..data.shards import open_packed_index
from ..errors import UserError
from ..hashing import content_hash, content_hash_file
from ..index.store import open_index, read_meta, read_table
from ..interrupts import stop_on_signals
from ..jsonpaths import path_fields
from . import extnames, names, state
from .options import RANDOM
from .plan import Layout, Plan, make_layout, make_plan
from .publish import publish
from .readback import left_out_earlier, read_back
from .runner import WorkersLost, run_tasks
from .samples import key_numbers
from .scanhashes import scan_checksums
from .shardjob import INLINE_LIMIT, ShardJob, ShardResult
from .tarformat import TarError
from .write import finish_shard, write_shard

#: files of the folder a killed run may have left temp copies of (shards' temps are their writers' to remove)
_OWN_FILES = (locations.PACKED_INDEX_FILE, locations.SHARD_LIST_FILE, locations.PACK_STATE_FILE)


@dataclass(frozen=True)
class PackOptions:
    """How to pack. The layout options (shard size or count, shuffle, name) decide the bytes."""

    shard_size: int | None = None  # bytes per shard (default 1 GiB when samples_per_shard is None)
    samples_per_shard: int | None = None
    #: seed of the permutation; None = index order (--no-shuffle); RANDOM = the seed the folder's pack.json
    #: records for this index (resuming, a later part, --finish), else one chosen at random and recorded
    shuffle: int | str | None = RANDOM
    #: how media members are named (:mod:`.extnames`: by-kind, keep); None = as the folder's pack.json
    #: records for this index, else by-kind
    ext_policy: str | None = None
    name: str | None = None  # shard file name format (default data-{:06d}.tar)
    jobs: int = 1  # shards written at once (loky processes)
    backend: str = "loky"  # loky | dask
    scheduler: str | None = None  # with dask: address or scheduler file
    part: tuple[int, int] | None = None  # (I, N): only shards I mod N, for job arrays
    skip_changed: bool = False  # leave changed/missing sources out (reported) instead of stopping
    progress: bool = False  # print progress to stderr
    inline_limit: int = INLINE_LIMIT  # files up to this size are read once into memory
    rehash: bool = False  # hash every file's bytes, even those the scan results hold a current hash for
    fsync: bool = True  # False (--no-fsync): no fsync of any file of the pack; the OS writes them back in its time
    denylist: str | None = (
        None  # a deny-list (dsclean.denylist, e.g. an older pack's denylist.jsonl): its keys are left out
    )
    #: the storage options of an index whose root is a bucket URL (:mod:`.bucketsource`); never stored
    storage_options: dict = field(default_factory=dict, repr=False)
    #: where each finished shard goes, its local copy removed (:class:`dsclean.pack.remote.BucketShards`: a
    #: bucket prefix): ``has(name)``, ``put(path, name)``, ``get(name, path)``. None: the shards stay in the folder
    shard_sink: Any = field(default=None, repr=False, compare=False)
    #: where a bucket source's listing and a bucket output's staging folder live (default: $DSCLEAN_STATE_DIR)
    state_dir: str | None = None
    #: what ``pack.json`` records as the source index when it is not ``index`` itself: a bucket prefix's URL
    #: for the listing index built in the state folder (no local state path in a pack written to a bucket)
    source_name: str | None = None


@dataclass
class PackSummary:
    output: str
    shards: int = 0  # in the plan
    written: int = 0  # shards written by this run
    reused: int = 0  # shards found complete from an earlier run
    samples: int = 0  # in the packed index (0 until it is written)
    bytes_written: int = 0  # shard bytes this run wrote
    skipped: list[dict] = field(default_factory=list)  # samples left out (path fields + why)
    hashed: int = 0  # samples this run hashed (the others written took the scan's current content_hash)
    scan_hashes: int = 0  # samples of the index with a current content_hash in the scan results
    scan_results: str = ""  # where those came from (or why none)
    failures: list[str] = field(default_factory=list)  # shards that could not be written, and why
    complete: bool = False  # the packed index and shard list are written
    resumed: bool = False
    part: tuple[int, int] | None = None
    signal: int = 0  # SIGINT/SIGTERM that stopped the run
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)
    shuffle: int | None = None  # the seed of the order (recorded in pack.json); None: index order
    ext_policy: str = extnames.DEFAULT
    recipe: dict | None = None  # the webdataset pipeline that reads the set (extnames.recipe), once published
    warnings: list[str] = field(default_factory=list)  # e.g. a set of mixed extensions under --ext-policy keep

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class _Context:
    index: str
    output: str
    meta: dict
    plan: Plan
    identity: str
    record: dict
    checksums: np.ndarray | None = None  # (rows, 16): the scan's content_hash where current
    known: np.ndarray | None = None  # bool per row
    checksum_source: str = ""
    chosen: bool = False  # the seed was chosen at random here (not given, nor recorded in the folder)


def _prepare(index: str, output: str, options: PackOptions, *, writing: bool = True) -> _Context:
    # the options' own errors first, before any file is read
    _order_and_names(replace(options, shuffle=None if options.shuffle == RANDOM else options.shuffle), {}, output)
    make_layout(options.shard_size, options.samples_per_shard, None, options.name)
    if options.jobs < 1:
        raise UserError(f"--jobs must be 1 or more, not {options.jobs}")
    if options.scheduler is not None and options.backend != "dask":  # as dsclean scan: never silently local
        raise UserError(
            f"--scheduler goes with --backend dask (the backend is {options.backend}): add "
            "--backend dask to pack on that cluster, or drop --scheduler to pack on this machine"
        )
    index = os.path.abspath(index)
    if os.path.isdir(index) and os.path.isfile(os.path.join(index, locations.SHARD_LIST_FILE)):
        raise UserError(f"{index}: is a packed shard set; pack takes the index written by dsclean index")
    meta = read_meta(index)
    root = str(meta["root"])
    remote = _is_url(root)
    out = os.path.abspath(output)
    if not remote and locations.is_inside(out, root[len("file://") :] if root.startswith("file://") else root):
        raise UserError(
            f"{output}: is inside the dataset {root}; dsclean never writes into the data it packs: "
            "choose a folder outside it"
        )
    if meta.get("packed"):
        raise UserError(f"{index}: is a packed index (of shards); pack the source index instead")
    if root.startswith("file://"):
        raise UserError(
            f"{index}: its root is the URL {root}: pack reads a local folder by its path; index the folder itself "
            f"(dsclean index {root[len('file://') :]} -o INDEX) and pack that index"
        )
    if not remote and not os.path.isdir(root):
        raise UserError(f"{index}: its root {root} is not a folder (moved?); the files to pack must be there")
    idx = open_index(index)
    denied = _denied_keys(options.denylist)
    identity = _identity(index)
    seed, policy, chosen = _order_and_names(options, state.recorded_layout(out, identity) or {}, out)
    layout = make_layout(options.shard_size, options.samples_per_shard, seed, options.name, policy)
    plan = make_plan(idx, layout, denied)
    layout_json = (
        layout.to_json()
        if not denied
        else {**layout.to_json(), "denylist": content_hash("\n".join(sorted(denied)).encode()).hex()}
    )  # another deny-list is another pack: never resumed into this one
    rec = state.record(
        index=options.source_name or index,
        identity=identity,
        rows=len(idx),
        root=root,
        layout=layout_json,
        shards=plan.shards,
    )
    ctx = _Context(index, out, meta, plan, identity, rec, chosen=chosen)
    if not writing:
        return ctx
    if remote:
        ctx.checksum_source = f"none: the objects of {root} are hashed as they are read"
    elif options.rehash:
        ctx.checksum_source = "none: --rehash (every file is hashed)"
    else:
        sums, known, ctx.checksum_source = scan_checksums(idx)
        if known.any():
            ctx.checksums, ctx.known = sums, known
    return ctx


def _order_and_names(options: PackOptions, recorded: dict, out: str) -> tuple[int | None, str, bool]:
    """This pack's seed (None: index order) and ``--ext-policy``, and whether the seed was chosen here.

    What the options leave open is what the folder's ``pack.json`` records for this index (a resume, a
    later ``--part``, ``--finish``: the order and the names never change), else a random seed and by-kind.
    """
    seed: object = options.shuffle
    chosen = False
    if seed == RANDOM:
        if "shuffle" in recorded:
            seed = recorded["shuffle"]
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
                raise UserError(
                    f"{os.path.join(out, locations.PACK_STATE_FILE)}: records the seed {seed!r}, not a whole "
                    "number: not a pack dsclean wrote; use an empty folder"
                )
        else:
            seed, chosen = secrets.randbelow(1 << 32), True
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise UserError(f"--shuffle SEED must be a whole number 0 or more, not {seed!r}")
    policy = options.ext_policy or recorded.get("ext_policy", extnames.DEFAULT)
    if policy not in extnames.POLICIES:
        raise UserError(f"--ext-policy must be one of {', '.join(extnames.POLICIES)}, not {policy!r}")
    return seed, str(policy), chosen


def _denied_keys(path: str | None) -> set[str] | None:
    """The sample keys of the deny-list at ``path`` (a UserError if it cannot be read)."""
    if path is None:
        return None
    from ..denylist import read_denylist

    if not os.path.isfile(path):
        raise UserError(f"--denylist {path}: no such file")
    dl = read_denylist(path)
    if dl.refused:
        raise UserError(f"--denylist {dl.refused}")
    return {key for _, key in dl.keys()}  # noqa: SIM118 (Denylist.keys(), not a dict)


def _identity(index: str) -> str:
    """The source index's content hash (an npy index: of its files' names and hashes, in name order)."""
    if not os.path.isdir(index):
        return content_hash_file(index).hex()
    parts = [
        f"{n}:{content_hash_file(os.path.join(index, n)).hex()}"
        for n in sorted(os.listdir(index))
        if os.path.isfile(os.path.join(index, n))
    ]
    return content_hash("\n".join(parts).encode("utf-8", "surrogateescape")).hex()


def _job(ctx: _Context, k: int, options: PackOptions) -> ShardJob:
    rows = ctx.plan.rows(k)
    known = None if ctx.known is None else ctx.known[rows]
    return ShardJob(
        number=k,
        output=ctx.output,
        name=ctx.plan.shard_name(k),
        index=ctx.index,
        root=str(ctx.meta["root"]),
        rows=rows,
        classes=tuple(ctx.meta.get("classes", [])),
        skip_changed=options.skip_changed,
        inline_limit=options.inline_limit,
        checksums=None if known is None or not known.any() else ctx.checksums[rows],
        known=None if known is None or not known.any() else known,
        keys=ctx.plan.keys[rows],
        one_at_a_time=options.jobs <= 1 and options.backend == "loky",
        fsync=options.fsync,
        deferred=options.jobs > 1 and options.backend == "loky",
        ext_policy=ctx.plan.layout.ext_policy,
        storage_options=dict(options.storage_options) if _is_url(str(ctx.meta["root"])) else None,
    )


def _is_url(root: str) -> bool:
    from ..storage.urls import is_url  # (no fsspec import: the URL rule only)

    return is_url(root) and not root.startswith("file://")


def _remove_shard_temps(ctx: _Context) -> None:
    """Remove shard temp files an interrupted pack left: a killed writer's, and the finished shards ``--jobs 2``
    workers leave in their temp files for the parent to rename (a second Ctrl-C stops the parent first).

    Only while holding the folder's lock for the whole pack, before any shard is written; temp names are
    ``.<shard name>.<random>.tmp`` (:func:`dsclean.atomic.temp_next_to`)."""
    names = {ctx.plan.shard_name(k) for k in range(ctx.plan.shards)}
    for entry in os.scandir(ctx.output):
        n = entry.name
        if (
            n.startswith(".")
            and n.endswith(".tmp")
            and n[1:-4].rsplit(".", 1)[0] in names
            and entry.is_file(follow_symlinks=False)
        ):
            os.unlink(entry.path)


def pack_shards(index: str, output: str, options: PackOptions = PackOptions()) -> PackSummary:
    """Pack ``index`` into shards in ``output`` (created, or resumed); see the module docstring.

    Raises :class:`UserError` for bad input before anything is written, and when every
    sample was left out (``skip_changed``: nothing is left in ``output`` then). Shards that
    could not be written are listed in ``summary.failures`` (``complete`` is then False).

    ``index`` may be a bucket prefix (``s3://BUCKET/PREFIX``: its media objects less those its last scan
    found bad, :mod:`.bucketsource`) and ``output`` a bucket prefix (:mod:`.remote`); ``options.storage_options``
    opens them.
    """
    if _is_url(index) or _is_url(output):
        from .remote import pack_url

        return pack_url(index, output, options, pack_shards)
    t0 = time.monotonic()
    ctx = _prepare(index, output, options)
    try:
        resumed = state.prepare_output(ctx.output, ctx.record, fsync=options.fsync)
    except UserError:
        if not ctx.chosen or state.recorded_layout(ctx.output, ctx.identity) is None:
            raise
        # another task of the job array created pack.json first, with its own random seed: take that one
        ctx = _prepare(index, output, options)
        resumed = state.prepare_output(ctx.output, ctx.record, fsync=options.fsync)
    summary = PackSummary(
        output=ctx.output,
        shards=ctx.plan.shards,
        part=options.part,
        scan_hashes=0 if ctx.known is None else int(ctx.known.sum()),
        scan_results=ctx.checksum_source,
        resumed=resumed,
        shuffle=ctx.plan.layout.shuffle,
        ext_policy=ctx.plan.layout.ext_policy,
    )
    if options.denylist:
        summary.notes.append(
            f"{ctx.record['source']['rows'] - len(ctx.plan.order):,} samples left out: on the deny-list "
            f"{options.denylist}"
        )
    with state.locked(ctx.output, options.part):
        if options.part is None:
            remove_stale_temps(ctx.output, _OWN_FILES)
            _remove_shard_temps(ctx)
        mine = [k for k in range(ctx.plan.shards) if options.part is None or k % options.part[1] == options.part[0]]
        local = {k for k in mine if os.path.isfile(os.path.join(ctx.output, ctx.plan.shard_name(k)))}
        sink = options.shard_sink
        elsewhere = {k for k in mine if k not in local and sink.has(ctx.plan.shard_name(k))} if sink else set()
        missing = [k for k in mine if k not in local and k not in elsewhere]
        summary.reused = len(mine) - len(missing)
        results = _write(ctx, missing, options, summary)
        if summary.failures or summary.signal:
            return _done(summary, t0)
        if options.part is not None:
            if not _read_back_all(ctx, [k for k in mine if k not in results], options, results, summary):
                return _done(summary, t0)
            state.write_part(
                ctx.output,
                ctx.record,
                options.part,
                mine,
                [s for k in mine for s in results[k].skipped],
                fsync=options.fsync,
            )
            summary.skipped = [s for k in mine for s in results[k].skipped]
            return _done(summary, t0)
        if not results and _published(ctx.output):
            summary.complete = True
            summary.samples = int(read_meta(os.path.join(ctx.output, locations.PACKED_INDEX_FILE))["rows"])
            summary.skipped = _not_in_the_shards(ctx) if summary.samples != len(ctx.plan.order) else []
            summary.notes.append("every shard was already there: nothing to do")
            summary.recipe = (state.read_state(ctx.output) or {}).get("recipe")
            if isinstance(summary.recipe, dict) and isinstance(summary.recipe.get("keys"), list):  # said again
                warning = extnames.mixed_warning(str(summary.recipe["keys"][0]).split(";"), ctx.plan.layout.ext_policy)
                summary.warnings += [warning] if warning else []
            _note_left_out(ctx, summary)
            return _done(summary, t0)
        earlier = [k for k in range(ctx.plan.shards) if k not in results]
        if not _read_back_all(ctx, [k for k in earlier if k not in elsewhere], options, results, summary):
            return _done(summary, t0)
        for k in sorted(elsewhere):  # shards a killed run put in the sink: read back one at a time
            path = os.path.join(ctx.output, ctx.plan.shard_name(k))
            sink.get(ctx.plan.shard_name(k), path)
            try:
                if not _read_back_all(ctx, [k], options, results, summary):
                    return _done(summary, t0)
            finally:
                os.unlink(path)
        _refuse_empty(ctx, results)
        _finish(ctx, results, summary, options.fsync)
        _note_left_out(ctx, summary)
    return _done(summary, t0)


def _not_in_the_shards(ctx: _Context) -> list[dict]:
    """The index rows a finished, published pack does not hold (an earlier ``--skip-changed`` run left
    them out), in pack order, each with the shard it belongs in: found by key against the packed index."""
    packed = open_packed_index(ctx.output)
    have = key_numbers(np.asarray(packed.offsets, np.int64), packed.data)
    absent = ~np.isin(ctx.plan.keys[ctx.plan.order], have)  # by pack position
    positions = np.flatnonzero(absent)
    shards = np.searchsorted(ctx.plan.bounds, positions, side="right") - 1
    rows = ctx.plan.order[positions]
    paths = read_table(ctx.index, rows).column("path").to_pylist()
    return [{**path_fields(p), "why": left_out_earlier(ctx.plan.shard_name(int(k)))} for p, k in zip(paths, shards)]


def _note_left_out(ctx: _Context, summary: PackSummary) -> None:
    """Say how many index rows the published set lacks and how to get them in (samples left out by a
    ``--skip-changed`` run stay out of the shards that run finished, also on later runs without it)."""
    rows = len(ctx.plan.order)
    if not summary.complete or summary.samples == rows:
        return
    summary.notes.append(
        f"{rows - summary.samples:,} of the index's {rows:,} rows are not in the shards (left out "
        "by --skip-changed, listed): once their files are back as indexed, delete the shards they "
        "belong in and run the same command to pack them"
    )


def finish_pack(index: str, output: str, options: PackOptions = PackOptions()) -> PackSummary:
    """The job array's last step: check every part, then write the packed index and the shard list."""
    t0 = time.monotonic()
    if options.part is not None:
        raise UserError("--finish and --part cannot be used together: finish runs once, after every part")
    ctx = _prepare(index, output, options, writing=False)
    summary = PackSummary(
        output=ctx.output,
        shards=ctx.plan.shards,
        resumed=True,
        shuffle=ctx.plan.layout.shuffle,
        ext_policy=ctx.plan.layout.ext_policy,
    )
    existing = state.read_state(ctx.output)
    if existing is None:
        raise UserError(f"{output}: no {locations.PACK_STATE_FILE}: nothing was packed there yet")
    state.prepare_output(ctx.output, ctx.record)  # the same pack, or a clear refusal
    with state.locked(ctx.output, None):
        remove_stale_temps(ctx.output, _OWN_FILES)
        state.check_parts(ctx.output, ctx.record)
        absent = [
            ctx.plan.shard_name(k)
            for k in range(ctx.plan.shards)
            if not os.path.isfile(os.path.join(ctx.output, ctx.plan.shard_name(k)))
        ]
        if absent:
            raise UserError(
                f"{output}: every part finished but {len(absent)} shards are missing "
                f"(e.g. {absent[0]}); run their parts again"
            )
        results: dict[int, ShardResult] = {}
        if not _read_back_all(ctx, list(range(ctx.plan.shards)), options, results, summary):
            return _done(summary, t0)
        _refuse_empty(ctx, results)
        summary.reused = ctx.plan.shards
        _finish(ctx, results, summary, options.fsync)
        _note_left_out(ctx, summary)
    return _done(summary, t0)


def _write(ctx: _Context, numbers: list[int], options: PackOptions, summary: PackSummary) -> dict[int, ShardResult]:
    """Write the shards; with ``--jobs N`` (loky) the workers leave each shard in its temp file and
    this process fsyncs and renames it on a thread, so a worker never waits for the disk."""
    results: dict[int, ShardResult] = {}
    finishing: dict[Future, ShardResult] = {}
    lost: WorkersLost | None = None

    def done(r: ShardResult, error: str | None) -> None:
        if not error and options.shard_sink is not None:  # e.g. uploaded to a bucket, then removed here
            path = os.path.join(ctx.output, r.name)
            try:
                options.shard_sink.put(path, r.name)
                os.unlink(path)
            except UserError as exc:
                error = str(exc)
        if error:
            summary.failures.append(error)
            stop.stop()  # let the shards in flight finish, start no more
            return
        results[r.number] = r
        summary.written += 1
        summary.bytes_written += r.filesize
        summary.hashed += r.hashed
        summary.skipped += r.skipped
        if options.progress:
            print(
                f"\rpack: {summary.written + summary.reused}/{summary.shards} shards",
                end="",
                file=sys.stderr,
                flush=True,
            )

    with stop_on_signals() as stop, ThreadPoolExecutor(2, thread_name_prefix="pack-finish") as finisher:
        try:
            jobs = (_job(ctx, k, options) for k in numbers)
            for r in run_tasks(
                write_shard,
                jobs,
                backend=options.backend,
                jobs=options.jobs,
                scheduler=options.scheduler,
                stop=stop,
                overlap=options.fsync,
            ):  # jobs 1: the fsyncs overlap the next shard
                if r.temp is not None and not r.error:
                    finishing[finisher.submit(finish_shard, r, ctx.output, options.fsync)] = r
                else:
                    done(r, r.error)
                for f in [f for f in finishing if f.done()]:
                    done(finishing.pop(f), f.result())
        except WorkersLost as exc:  # tried in fresh pools and lost every time: listed, the run is incomplete
            lost = exc
        finally:  # the shards handed over are renamed (or their temp files removed), even when interrupted
            for f, r in finishing.items():
                done(r, f.result())
        summary.signal = stop.signum
    if lost is not None:
        summary.failures += [f"{job.name}: not written: {lost}" for job in lost.items]
        rest = len(numbers) - len(results) - len(lost.items)
        if rest:
            summary.failures.append(f"{rest} more shards were not started")
        summary.failures.append("run the same command to write the missing shards (the shards written are kept)")
    if options.progress and numbers:
        print(file=sys.stderr)
    return results


def _read_back_all(
    ctx: _Context, numbers: list[int], options: PackOptions, results: dict[int, ShardResult], summary: PackSummary
) -> bool:
    """Records of shards an earlier run (or another part) wrote, read from the shards themselves.

    False when worker processes kept dying (the shards not read are in ``summary.failures``)."""
    if not numbers:
        return True
    with stop_on_signals() as stop:
        try:
            for r in run_tasks(
                read_back,
                (_job(ctx, k, options) for k in numbers),
                backend=options.backend,
                jobs=options.jobs,
                scheduler=options.scheduler,
                stop=stop,
            ):
                results[r.number] = r
        except WorkersLost as exc:
            summary.failures += [f"{job.name}: not read back: {exc}" for job in exc.items]
            summary.failures.append("run the same command again to finish (the shards written are kept)")
            return False
        except TarError as exc:
            raise UserError(f"{exc}; remove that shard and pack again to rebuild it") from exc
        if stop.signum:
            raise KeyboardInterrupt
    return True


def _refuse_empty(ctx: _Context, results: dict[int, ShardResult]) -> None:
    """Every sample was left out (``--skip-changed``, every file changed or gone): publish nothing.

    A set of empty shards is no dataset (webdataset refuses it), so, like ``dsclean index``
    refusing an empty index, a :class:`UserError`; the pack's shards (all empty) and its
    state (``pack.json``, part markers) are removed first, so the folder holds nothing of it
    and the same command runs afresh once the index is rebuilt.
    """
    if any(len(r.rows) for r in results.values()):
        return
    skipped = [s for k in sorted(results) for s in results[k].skipped]
    for k in range(ctx.plan.shards):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(ctx.output, ctx.plan.shard_name(k)))
    state.remove_state(ctx.output)
    example = f", e.g. {skipped[0]['why']}" if skipped else ""
    raise UserError(
        f"{ctx.index}: all {len(ctx.plan.order):,} samples were left out (--skip-changed: their files "
        f"changed or vanished since indexing{example}); refusing to publish a shard set with no "
        f"samples (its empty shards are removed from {ctx.output}): rebuild the index with dsclean "
        "index and pack again"
    )


def _finish(ctx: _Context, results: dict[int, ShardResult], summary: PackSummary, fsync: bool = True) -> None:
    for k in range(ctx.plan.shards):
        if not results[k].written:
            summary.skipped += results[k].skipped
    try:
        summary.samples = publish(ctx.output, ctx.index, ctx.meta, ctx.plan, results, ctx.identity, fsync=fsync)
    except OSError as exc:
        summary.failures.append(f"{ctx.output}: cannot write the packed index or shard list: {exc.strerror or exc}")
        return
    summary.complete = True
    exts = {e for r in results.values() for e in r.exts}
    layout = ctx.plan.layout
    warning = extnames.mixed_warning(exts, layout.ext_policy)
    if warning:
        summary.warnings.append(warning)
    if exts:
        has = np.asarray(open_index(ctx.index).labels)[np.concatenate([r.rows for r in results.values()])] >= 0
        labelled = "all" if has.all() else "some" if has.any() else "none"  # samples with a .cls member
        summary.recipe = extnames.recipe(exts, labelled, names.brace_pattern(layout.name, ctx.plan.shards))
        try:
            state.write_recipe(ctx.output, summary.recipe, fsync=fsync)
        except OSError as exc:
            summary.failures.append(f"{ctx.output}: cannot record the recipe in pack.json: {exc.strerror or exc}")


def _published(output: str) -> bool:
    return all(
        os.path.isfile(os.path.join(output, n)) for n in (locations.PACKED_INDEX_FILE, locations.SHARD_LIST_FILE)
    )


def _done(summary: PackSummary, t0: float) -> PackSummary:
    summary.elapsed = round(time.monotonic() - t0, 3)
    return summary
