"""``dsclean index s3://BUCKET/PREFIX``: the index of a bucket prefix's good objects, streamed.

The local build's shape (:mod:`.build`) with the listing in the walk's place: the prefix is listed
(:func:`dsclean.storage.listing.iter_objects`, a page at a time) into record batches of compact columns
(key relative to the prefix, its first folder, size, last-modified, a 64-bit identity of key + ETag +
size + time), sorted on disk with the prefix's last scan results (:mod:`.spill`) and joined window by
window. An object goes in when the scan found it good and it is unchanged since (same size and time,
and same ETag where the scan recorded one); the objects the scan did not cover (never listed by it,
changed since, or a verdict about the moment) are read and checked here with the scan's check
(``--no-check``: a ranged read of their first bytes, sniffed). The index records the prefix's URL as
its root, never a storage option; :class:`~dsclean.data.dataset.IndexedDataset` reads the objects from it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import formats, locations, reasons
from ..errors import UserError
from ..loaders.profiles import PROFILES
from ..scanning.cache import options_key
from ..scanning.check import CheckOptions
from ..scanning.cores import usable_cores
from ..scanning.results import read_results_meta
from ..storage.fs import Store
from ..storage.listing import ListingStats, Obj, iter_objects, top_entries
from ..storage.reads import DEFAULT_READ_THREADS, ReadPolicy, classify, quiet_store_retries, retried
from ..storage.reuse import IDS_FILE, RECORD_FILE, identity, last_results
from ..storage.scan import probe_prefix
from ..storage.urls import scrub
from .judge import (
    check_exclude_warn,
    check_include_warn,
    left_out_warnings,
    loader_list,
    profile_names,
    results_batches,
    results_info,
)
from .labels import MAX_FOLDER_CLASSES, read_labels_csv, sort_key
from .options import IndexOptions, with_overrides
from .spill import Sorter, aligned, make_spill_folder
from .store import KIND_CODE, LARGE_PATH_BYTES, disk_size, index_schema, make_meta, one_chunk, resolve_format
from .summary import MAX_LISTED, IndexSummary, empty_class_notes, empty_message, note
from .walk import CHUNK_ROWS, extensions
from .write import KeptRows, check_output, write_streamed

log = logging.getLogger("dsclean.index.bucket")

#: the listing's columns (``cls``: the key's first folder, the class with folder labels; ``ident``: reuse.identity)
LIST_SCHEMA = pa.schema(
    [
        ("path", pa.binary()),
        ("key", pa.binary()),
        ("cls", pa.binary()),
        ("kind", pa.int8()),
        ("size", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("ident", pa.uint64()),
    ]
)
#: objects read and checked at once (a chunk's bytes are in memory together, at most this many objects)
CHECK_OBJECTS = 64
#: IndexOptions fields a bucket index does not take yet: field -> its default
_NOT_FOR_URLS = {
    "files": "dsclean",
    "symlinks": None,
    "dedup": False,
    "facts": False,
    "allow_inside_root": False,
}


@dataclasses.dataclass(frozen=True)
class BucketIndexOptions:
    """What reading the bucket takes beyond :class:`IndexOptions`: the storage options (may hold secrets: never
    stored or shown), reads in flight, and the read policy (retries, in-memory threshold)."""

    storage_options: dict = dataclasses.field(default_factory=dict, repr=False)
    read_threads: int = DEFAULT_READ_THREADS
    policy: ReadPolicy = ReadPolicy()


def build_bucket_index(
    url: str,
    output: str,
    options: IndexOptions = IndexOptions(),
    bucket: BucketIndexOptions = BucketIndexOptions(),
    **overrides: Any,
) -> IndexSummary:
    """Index the good media objects under the prefix ``url`` into ``output`` (Arrow file or npy folder).

    Bad objects are found in the prefix's last bucket scan (its state folder, as ``dsclean report URL``
    finds them) or ``options.scan_results``; the rest is as :func:`dsclean.index.build.build_index` (labels:
    the key's first folder, a CSV, or none).
    """
    options = with_overrides(options, overrides, "build_bucket_index")
    t0 = time.monotonic()
    given = [k for k, default in _NOT_FOR_URLS.items() if getattr(options, k) not in (default, None, ())]
    if given:
        raise UserError(f"{', '.join(given)}: not yet for a storage URL (dsclean index {url}); docs/guides/buckets.md")
    fmt = resolve_format(output, options.format)
    check_output(output, fmt)
    if options.labels_csv is not None and options.no_labels:
        raise UserError("--labels and --no-labels cannot be used together: pick one way to label")
    store = Store(url, dict(bucket.storage_options))
    include_warn = check_include_warn(options.include_warn)
    exclude_warn = check_exclude_warn(options.exclude_warn)
    mode = "csv" if options.labels_csv is not None else "none" if options.no_labels else "folder"
    summary = IndexSummary(output=output, format=fmt, labels=mode, include_warn=include_warn, exclude_warn=exclude_warn)
    csv_labels = read_labels_csv(options.labels_csv) if options.labels_csv is not None else None
    probe_prefix(store, bucket.policy)
    if mode == "folder" and options.classes is None:
        _refuse_split_root(store, options.split_names, bucket.policy)
    results_paths, prefix, scanned = _scan_results(store, options)
    summary.results_source = (
        "--scan-results"
        if options.scan_results
        else f"the last scan of {scanned}" + (" (its keys under this prefix)" if prefix else "")
        if results_paths
        else "none"
    )
    results_columns, check_options = results_info(results_paths) if results_paths else ([], CheckOptions())
    results_columns = [c for c in results_columns if c in ("path", "kind", "status", "reason", "size", "mtime_ns")]
    profiles = profile_names(options.loaders)
    wanted = tuple(n for n in profiles if not PROFILES[n].reference)
    if tuple(check_options.loaders) != wanted:
        if results_paths and options.check:
            note(
                summary,
                f"the scan results were made for the loaders {loader_list(check_options.loaders)}, not "
                f"{loader_list(wanted)}: every object is checked here",
                options.progress,
            )
            results_paths, results_columns = [], []
        check_options = dataclasses.replace(check_options, loaders=wanted)
    summary.scan_results = ", ".join(results_paths) or None
    exclude = _quarantine_inside(results_paths, store) + _check_url_exclude(store, options.exclude, bucket.policy)
    spill, spill_lock = make_spill_folder(os.path.dirname(os.path.abspath(output)))
    try:
        files = Sorter(spill, "objects", "path")
        names: set[bytes] = set()  # the first folders seen: one entry a class, not an object
        listing = ListingStats()
        for batch in _list(store, listing, exclude, options.progress):
            if mode == "folder":
                names.update(pc.unique(batch.column("cls")).to_pylist())
                if len(names) > MAX_FOLDER_CLASSES:
                    raise UserError(
                        f"{store.url}: more than {MAX_FOLDER_CLASSES:,} distinct first folders: folder labels would "
                        "make each one a class (a <id>/file layout?); label with --labels FILE.csv, or --no-labels"
                    )
            files.add(batch)
        summary.discovery.media = listing.objects - listing.skipped_other - listing.skipped_hidden
        summary.discovery.hidden = listing.skipped_hidden
        summary.discovery.ignored = listing.skipped_other
        classes = sorted(os.fsdecode(n) for n in names if n) if mode == "folder" else []
        if csv_labels is not None:
            classes = csv_labels.classes
        if options.classes is not None and mode == "folder":
            classes = list(options.classes)
        rows = KeptRows(spill, by_label=mode == "folder", facts=False, csv_labels=csv_labels, classes=len(classes))
        labeler = _Labeler(mode, classes)
        if not results_paths:
            note(
                summary,
                f"no scan of {store.url} is recorded here: every object is "
                + ("sniffed by its first bytes (--no-check)" if not options.check else "read and checked now"),
                options.progress,
            )
        _collect(
            store,
            files,
            (results_paths, prefix),
            results_columns,
            check_options,
            rows,
            summary,
            labeler,
            options,
            bucket,
        )
        if csv_labels is not None and len(csv_labels.paths) and not rows.csv_seen.any():
            example = os.fsdecode(csv_labels.paths[0].as_py())
            raise UserError(
                f"{csv_labels.source}: none of its {len(csv_labels.paths):,} paths names an object being indexed "
                f"under {store.url} (e.g. line 2: {example!r}); keys must be relative to the prefix, like "
                "cats/x.jpg; an index of 0 rows is not written"
            )
        if rows.order.rows == 0:
            raise UserError(empty_message(store.url, summary))
        summary.large_paths = rows.path_bytes > LARGE_PATH_BYTES
        schema = index_schema(classes=len(classes), max_size=rows.max_size, large=summary.large_paths, facts=False)
        meta = make_meta(store.url, classes, mode, rows.order.rows, summary.scan_results)
        meta.update(
            root=store.url,  # the prefix's URL: never a storage option (the reader brings its own)
            storage=True,
            files="dsclean",
            extensions=list(extensions("dsclean")),
            checked=options.check,
            check_options=options_key(check_options),
            include_warn=include_warn,
            exif=getattr(check_options, "exif", "ignore"),
            loaders=list(profiles),
        )
        counts = write_streamed(output, fmt, rows, schema, meta, summary, len(classes))
    finally:
        shutil.rmtree(spill, ignore_errors=True)
        os.close(spill_lock)
    summary.classes = len(classes)
    empty_class_notes(summary, counts[1:], classes, mode, options.progress)
    summary.index_bytes = disk_size(output)
    summary.elapsed = round(time.monotonic() - t0, 3)
    return summary


class _Labeler:
    """Labels of a batch: the index of its first folder among the classes (folder), else -1 (CSV, none)."""

    def __init__(self, mode: str, classes: list[str]) -> None:
        self.mode = mode
        self.classes = pa.array([os.fsencode(c) for c in classes], pa.binary())

    def __call__(self, table: pa.Table, summary: IndexSummary) -> pa.Table:
        if self.mode != "folder":
            return table.append_column("label", pa.array(np.full(table.num_rows, -1, np.int64)))
        label = pc.index_in(table.column("cls"), value_set=self.classes).cast(pa.int64())
        known = pc.is_valid(label)
        summary.unlabeled += int(pc.sum(pc.invert(known)).as_py() or 0)
        return table.append_column("label", label).filter(known)


def _scan_results(store: Store, options: IndexOptions) -> tuple[list[str], bytes, str]:
    """``(results files, prefix, scanned URL)`` to judge by: ``--scan-results`` (each must be a scan of this prefix,
    unless ``--root-moved``), else the prefix's last scan recorded in its state folder, else the last scan of
    the nearest scanned parent prefix (``prefix``: its keys under this one, e.g. ``b"train/"``); none: ``[]``."""
    given = options.scan_results
    if given is None:
        found = last_results(store.url, options.state_dir)
        if found:
            return [found], b"", store.url
        scheme, _, rest = store.url.partition("://")
        parts = rest.split("/")
        for cut in range(len(parts) - 1, 0, -1):  # s3://b/data/train: s3://b/data, then s3://b
            parent = f"{scheme}://{'/'.join(parts[:cut])}"
            found = last_results(parent, options.state_dir)
            if found:
                return [found], ("/".join(parts[cut:]) + "/").encode("utf-8", "surrogateescape"), parent
        return [], b"", ""
    paths = [given] if isinstance(given, str) else list(given)
    if len(paths) > 1:
        raise UserError("--scan-results: a bucket index takes one results file (a bucket scan writes one)")
    for p in paths:
        if not os.path.exists(p):
            raise UserError(f"{p}: scan results not found")
        try:
            root = read_results_meta(p).get("root")
        except Exception as exc:
            raise UserError(f"{p}: cannot read scan results ({exc})") from None
        if root != store.url and not options.root_moved:
            raise UserError(
                f"{p}: the results of a scan of {root}, not {store.url}; --root-moved accepts them (keys relative to "
                "the prefix)"
            )
    return paths, b"", store.url


def top_folders(store: Store, rel: str, policy: ReadPolicy, limit: int | None = None) -> list[str] | None:
    """The names of the "folders" directly under ``rel`` (relative to the prefix; ``""``: the prefix itself),
    sorted; None past ``limit`` names. S3: a delimited listing, a page at a time (only the names are kept)."""
    names: list[str] = []
    base = f"{store.root}/{rel}".rstrip("/") if rel else store.root
    try:
        if store.scheme in ("s3", "s3a"):
            from fsspec.asyn import sync

            fs = store.fs
            bucket, _, key = base.partition("/")
            kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": f"{key}/" if key else "", "Delimiter": "/"}
            while True:
                page = retried(lambda: sync(fs.loop, fs._call_s3, "list_objects_v2", **kwargs), store.url, policy)
                for p in page.get("CommonPrefixes", ()):
                    names.append(p["Prefix"][len(kwargs["Prefix"]) :].rstrip("/"))
                    if limit is not None and len(names) > limit:
                        return None
                token = page.get("NextContinuationToken")
                if not page.get("IsTruncated") or not token or token == kwargs.get("ContinuationToken"):
                    break  # the last page (or a repeated token: every loop makes progress)
                kwargs["ContinuationToken"] = token
        else:
            for name, is_dir in retried(lambda: top_entries(store, base), store.url, policy):
                if is_dir:
                    names.append(name)
                    if limit is not None and len(names) > limit:
                        return None
    except FileNotFoundError:
        return []
    except Exception as exc:
        err = classify(store.url, exc)
        raise UserError(f"listing {store.url} failed: {scrub(err.detail, store.options)}") from None
    return sorted(n for n in names if n)


def split_prefixes(store: Store, names: Iterable[str], policy: ReadPolicy) -> list[str]:
    """The split "folders" of a prefix (in ``names`` order), or ``[]`` when it is not a split root: as
    :func:`dsclean.splits.split_folders` says of a folder (every non-hidden folder named like a split)."""
    from ..splits import MAX_TOP_ENTRIES

    order = {n.lower(): i for i, n in enumerate(names)}
    top = top_folders(store, "", policy, MAX_TOP_ENTRIES)
    shown = [n for n in (top or []) if not n.startswith(".")]
    if not shown or any(n.lower() not in order for n in shown):
        return []
    return sorted(shown, key=lambda n: order[n.lower()])


def _refuse_split_root(store: Store, names: Iterable[str], policy: ReadPolicy) -> None:
    """Folder labels on a split root would make classes named ``train`` and ``val``: refused, saying what to do."""
    splits = split_prefixes(store, names, policy)
    if splits:
        raise UserError(
            f"{store.url} is a split root: its folders {', '.join(splits)} are splits, not classes. Index one split "
            f"(dsclean index {store.url}/{splits[0]} -o {splits[0]}.arrow), or every split at once with --splits "
            "-o DIR (one index per split, the same classes in each); --split-names says what splits are called"
        )


def _quarantine_inside(results_paths: list[str], store: Store) -> tuple[str, ...]:
    """The scan's quarantine prefix, when inside the indexed one: never listed (its objects are the bad ones)."""
    for p in results_paths:
        summary = os.path.join(os.path.dirname(os.path.abspath(p)), locations.SUMMARY_FILE)
        try:
            with open(summary, encoding="utf-8") as f:
                q = json.load(f).get("quarantine")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(q, str) and q.startswith(store.url + "/"):
            return (q[len(store.url) + 1 :],)
    return ()


def _check_url_exclude(store: Store, exclude: Iterable[str], policy: ReadPolicy) -> tuple[str, ...]:
    """``--exclude`` of a bucket index: each a "folder" under the prefix, as a URL (``s3://b/p/old``) or a key
    prefix relative to it (``old``), holding at least one object (a typo would silently leave nothing out);
    the relative prefixes the listing does not enter."""
    from ..scanning.quarantine.journal import safe_rel
    from ..storage.urls import is_url, normalize

    out = []
    for given in exclude:
        rel = given
        if is_url(given):
            url = normalize(given)
            if url == store.url:
                raise UserError(f"--exclude {given}: is the root {store.url} itself (it would leave everything out)")
            if not url.startswith(store.url + "/"):
                raise UserError(f"--exclude {given}: not under the root {store.url} (it would leave nothing out)")
            rel = url[len(store.url) + 1 :]
        rel = rel.strip("/")
        if not rel or safe_rel(rel) is None:
            raise UserError(f"--exclude {given}: not a folder under the root {store.url}")
        if not _has_objects(store, rel, policy):
            raise UserError(f"--exclude {given}: no object under {store.url_of(rel)}/ (a typo would leave nothing out)")
        out.append(rel)
    return tuple(out)


def _has_objects(store: Store, rel: str, policy: ReadPolicy) -> bool:
    """Whether any object's key starts with ``rel/`` under the prefix: one request of one key on S3."""
    path = f"{store.root}/{rel}"
    try:
        if store.scheme in ("s3", "s3a"):
            from fsspec.asyn import sync

            fs = store.fs
            bucket, _, key = path.partition("/")
            page = retried(
                lambda: sync(fs.loop, fs._call_s3, "list_objects_v2", Bucket=bucket, Prefix=f"{key}/", MaxKeys=1),
                store.url,
                policy,
            )
            return bool(page.get("KeyCount") or page.get("Contents"))
        return bool(retried(lambda: store.fs.isdir(path), store.url, policy))
    except FileNotFoundError:
        return False
    except Exception as exc:
        err = classify(store.url, exc)
        raise UserError(f"listing {store.url_of(rel)} failed: {scrub(err.detail, store.options)}") from None


def _list(store: Store, stats: ListingStats, exclude: tuple[str, ...], progress: bool) -> Iterator[pa.RecordBatch]:
    """The prefix's media objects as record batches of :data:`LIST_SCHEMA` (a batch of Python values at most)."""
    cols: dict[str, list] = {name: [] for name in LIST_SCHEMA.names}
    seen = 0
    try:
        for obj in iter_objects(store, stats=stats, exclude=exclude):
            fmt = formats.format_of_name(obj.rel)
            cls, sep, _ = obj.rel.partition("/")
            cols["path"].append(obj.rel.encode("utf-8", "surrogateescape"))
            cols["key"].append(sort_key(obj.rel))
            cols["cls"].append(cls.encode("utf-8", "surrogateescape") if sep else b"")
            cols["kind"].append(KIND_CODE[formats.kind_of(fmt)] if fmt else KIND_CODE[formats.IMAGE])
            cols["size"].append(obj.size if obj.size is not None else -1)
            cols["mtime_ns"].append(obj.mtime_ns if obj.mtime_ns is not None else -1)
            cols["ident"].append(identity(obj))
            seen += 1
            if len(cols["path"]) >= CHUNK_ROWS:
                yield pa.RecordBatch.from_pydict(cols, schema=LIST_SCHEMA)
                cols = {name: [] for name in LIST_SCHEMA.names}
                if progress:
                    log.info("listed %d objects of %s", seen, store.url)
    except UserError:
        raise
    except Exception as exc:
        err = classify(store.url, exc)
        raise UserError(f"listing {store.url} failed: {scrub(err.detail, store.options)}") from None
    if cols["path"]:
        yield pa.RecordBatch.from_pydict(cols, schema=LIST_SCHEMA)


def _results_with_ids(paths: list[str], columns: list[str], store: Store, state_dir: str | None, prefix: bytes):
    """The results' rows with ``ident``: the scan's identity of each ok row (0: none recorded, or not the scan
    whose identities the state folder holds, or a parent prefix's scan: ``prefix``, its rows under this one)."""
    ids = _ids_for(paths[0], store, state_dir) if len(paths) == 1 and not prefix else None
    start = 0
    for batch in results_batches(paths, columns, prefix):
        n = batch.num_rows
        part = np.asarray(ids[start : start + n], dtype=np.uint64) if ids is not None else np.zeros(n, np.uint64)
        start += n
        yield pa.Table.from_batches([batch]).append_column("ident", pa.array(part, pa.uint64()))


def _ids_for(results: str, store: Store, state_dir: str | None):
    """``object_ids.npy`` of the state folder when it belongs to ``results`` (same file, same row count)."""
    import pyarrow.parquet as pq

    folder = locations.url_state_dir(store.url, state_dir)
    try:
        with open(os.path.join(folder, RECORD_FILE), encoding="utf-8") as f:
            record = json.load(f)
        if os.path.abspath(record.get("results", "")) != os.path.abspath(results):
            return None
        ids = np.load(os.path.join(folder, IDS_FILE), mmap_mode="r")
        if pq.ParquetFile(results).metadata.num_rows != len(ids):
            return None
        return ids
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _collect(
    store: Store,
    files: Sorter,
    found: tuple[list[str], bytes],
    results_columns: list[str],
    check_options: CheckOptions,
    rows: KeptRows,
    summary: IndexSummary,
    labeler: _Labeler,
    options: IndexOptions,
    bucket: BucketIndexOptions,
) -> None:
    """Join the listing with the scan results window by window; keep current good rows, check the rest.

    ``found``: the results files and the prefix of this one's keys in them (a parent prefix's scan)."""
    results_paths, prefix = found
    checker = _Checker(store, check_options, bucket, summary, check=options.check, jobs=options.jobs)

    def keep(table: pa.Table) -> None:
        table = labeler(table, summary)
        if table.num_rows:
            rows.add(table.drop_columns(["cls", "ident"]), summary)

    if not results_paths:
        for table in checker.kept(files.sorted()):
            keep(table)
        return
    results = Sorter(files.folder, "results", "path")
    for batch in _results_with_ids(results_paths, results_columns, store, options.state_dir, prefix):
        results.add(batch)
    stale = Sorter(files.folder, "stale", "path", schema=LIST_SCHEMA)  # checked after the join, in one pool
    for here, res in aligned([files.sorted(), results.sorted()], "path"):
        if here is None or not here.num_rows:
            continue
        if res is None or not res.num_rows:
            summary.unscanned += here.num_rows
            stale.add(here)
            continue
        where = pc.index_in(here.column("path"), value_set=one_chunk(res.column("path")))
        scanned = pc.is_valid(where)
        rid = res.column("ident").take(where)
        same = pc.fill_null(
            pc.and_(
                pc.and_(
                    pc.equal(res.column("size").take(where), here.column("size")),
                    pc.equal(res.column("mtime_ns").take(where), here.column("mtime_ns")),
                ),
                # the ETag too, where the scan recorded an identity (its ok rows)
                pc.or_(pc.equal(rid, pa.scalar(0, pa.uint64())), pc.equal(rid, here.column("ident"))),
            ),
            False,
        )
        momentary = pc.fill_null(pc.is_in(res.column("reason").take(where), value_set=_NOT_JUDGED), False)
        current = pc.and_(same, pc.invert(momentary))
        summary.unscanned += int(pc.sum(pc.invert(scanned)).as_py() or 0)
        summary.changed_since_scan += int(pc.sum(pc.and_(scanned, pc.invert(same))).as_py() or 0)
        summary.rechecked += int(pc.sum(pc.and_(same, momentary)).as_py() or 0)
        fresh = here.filter(current)
        if fresh.num_rows:
            fw = where.filter(current)
            status, reason = res.column("status").take(fw), res.column("reason").take(fw)
            bad = pc.fill_null(pc.equal(status, reasons.BAD), True)
            summary.excluded_bad += int(pc.sum(bad).as_py() or 0)
            warned = left_out_warnings(status, reason, fresh.column("path"), summary)
            fresh = _with_kinds(fresh, res.column("kind").take(fw))
            keep(fresh.filter(pc.invert(pc.or_(bad, warned))))
        stale.add(here.filter(pc.invert(current)))
    for table in checker.kept(stale.sorted()):
        keep(table)


_NOT_JUDGED = pa.array(sorted(reasons.NOT_JUDGED), pa.string())


def _with_kinds(table: pa.Table, checked: pa.Array) -> pa.Table:
    """The content's kind where a check named it (a WAV named .jpg is audio), else the extension's."""
    kinds = table.column("kind")
    for name in (formats.IMAGE, formats.AUDIO):
        kinds = pc.if_else(pc.fill_null(pc.equal(checked, name), False), pa.scalar(KIND_CODE[name], pa.int8()), kinds)
    return table.set_column(table.schema.get_field_index("kind"), "kind", kinds)


class _Checker:
    """The objects the scan did not cover: read and checked with the scan's check on ``jobs`` worker processes
    (as the bucket scan checks: a decoder crash costs its object only), or, with ``--no-check``, sniffed from a
    ranged read of their first bytes; :meth:`kept` gives the rows that pass."""

    def __init__(
        self,
        store: Store,
        check_options: CheckOptions,
        bucket: BucketIndexOptions,
        summary: IndexSummary,
        *,
        check: bool,
        jobs: int,
    ) -> None:
        self.store, self.options, self.bucket, self.summary = store, check_options, bucket, summary
        self.check, self.jobs = check, jobs
        self.left_out = (set(reasons.LEFT_OUT_WARNINGS) - set(summary.include_warn)) | set(summary.exclude_warn)

    def kept(self, tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
        """The rows of ``tables`` (of :data:`LIST_SCHEMA`, streamed) whose objects pass, as tables of that schema."""
        if not self.check:
            for table in tables:
                yield self._sniffed(table)
            return
        from ..storage.scan import BucketScanOptions, check_chunks

        options = BucketScanOptions(
            storage_options=self.store.options,
            check=self.options,
            read_threads=self.bucket.read_threads,
            policy=self.bucket.policy,
        )
        jobs = self.jobs or usable_cores()
        for result in check_chunks(self.store, self._chunks(tables), options, jobs):
            cols: dict[str, list] = {name: [] for name in LIST_SCHEMA.names}
            for v in result.verdicts:
                if not self._passes(v):
                    continue
                rel = v.path
                cls, sep, _ = rel.partition("/")
                cols["path"].append(rel.encode("utf-8", "surrogateescape"))
                cols["key"].append(sort_key(rel))
                cols["cls"].append(cls.encode("utf-8", "surrogateescape") if sep else b"")
                cols["kind"].append(KIND_CODE.get(v.kind, KIND_CODE[formats.IMAGE]))
                cols["size"].append(v.size if v.size is not None else -1)
                cols["mtime_ns"].append(v.mtime_ns if v.mtime_ns is not None else -1)
                cols["ident"].append(0)
            if cols["path"]:
                yield pa.Table.from_pydict(cols, schema=LIST_SCHEMA)

    def _chunks(self, tables: Iterable[pa.Table]) -> Iterator[list[Obj]]:
        """Chunks of :data:`CHECK_OBJECTS` objects: a chunk's Python objects at most, per task in flight."""
        for table in tables:
            for start in range(0, table.num_rows, CHECK_OBJECTS):
                objs = _objs(table.slice(start, CHECK_OBJECTS))
                self.summary.checked += len(objs)
                yield objs

    def _passes(self, v) -> bool:
        """Whether a fresh verdict keeps its object; what does not is counted (bad, vanished, left-out warning)."""
        s = self.summary
        if v.status == reasons.OK or (v.status == reasons.WARN and v.reason not in self.left_out):
            return True
        if v.status == reasons.WARN:
            s.warned += 1
            s.warned_reasons[v.reason or "?"] = s.warned_reasons.get(v.reason or "?", 0) + 1
            if len(s.warned_paths) < MAX_LISTED:
                s.warned_paths.append(v.path)
        elif v.reason == reasons.VANISHED:
            s.unreadable += 1
        else:
            reason = v.reason or "unchecked"
            s.checked_bad += 1
            s.checked_bad_reasons[reason] = s.checked_bad_reasons.get(reason, 0) + 1
            if len(s.bad_paths) < MAX_LISTED:
                s.bad_paths.append(v.path)
        return False

    def _sniffed(self, table: pa.Table) -> pa.Table:
        """``--no-check``: the rows whose first bytes are media (a ranged read each, ``read_threads`` at once)."""
        store, policy = self.store, self.bucket.policy
        quiet_store_retries(store.fs, store.scheme)

        def head(obj: Obj) -> tuple[int, str]:
            try:
                data = retried(
                    lambda: store.fs.cat_file(store.path(obj.rel), start=0, end=formats.SNIFF_BYTES), obj.rel, policy
                )
            except Exception as exc:
                return -1, classify(obj.rel, exc).reason
            real = formats.sniff(data)
            return (KIND_CODE[formats.kind_of(real)], "") if real else (-1, reasons.NOT_MEDIA)

        keep = np.zeros(table.num_rows, bool)
        kinds = table.column("kind").to_numpy().copy()
        with ThreadPoolExecutor(max(1, self.bucket.read_threads)) as pool:
            for start in range(0, table.num_rows, CHECK_OBJECTS):
                objs = _objs(table.slice(start, CHECK_OBJECTS))
                self.summary.checked += len(objs)
                for i, (code, reason) in enumerate(pool.map(head, objs)):
                    if code >= 0:
                        keep[start + i], kinds[start + i] = True, code
                    elif reason == reasons.NOT_MEDIA:
                        self.summary.not_media += 1
                    else:
                        self.summary.unreadable += 1
        table = table.set_column(table.schema.get_field_index("kind"), "kind", pa.array(kinds, pa.int8()))
        return table.filter(pa.array(keep))


def _objs(table: pa.Table) -> list[Obj]:
    """The rows of a small slice of :data:`LIST_SCHEMA` as listing objects (sizes and times -1: unknown)."""
    return [
        Obj(os.fsdecode(p), s if s >= 0 else None, None, m if m >= 0 else None)
        for p, s, m in zip(
            table.column("path").to_pylist(), table.column("size").to_pylist(), table.column("mtime_ns").to_pylist()
        )
    ]
