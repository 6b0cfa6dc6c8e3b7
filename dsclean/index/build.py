"""Stage 5: build a compact, memory-mapped index of the files that survived the scan.

The build streams, so its memory does not grow with the number of files:
:func:`dsclean.scanning.discover.iter_media` becomes record batches of at most
``CHUNK_ROWS`` rows (no Python list of all paths); those and the scan results (read
a record batch at a time, every part of a job array) are sorted by path in runs
spilled to disk (:mod:`dsclean.index.spill`) and joined window by window; files the
scan did not cover are checked in chunks; the kept rows are sorted into index order
the same way and streamed column by column into the one-batch Arrow file
(:mod:`dsclean.index.columns`), written through :func:`dsclean.atomic.atomic_output`
(temp + rename). The format itself is :mod:`dsclean.index.store`.

Labels and sample order (torchvision ``ImageFolder``'s, or a CSV) are in :mod:`dsclean.index.labels`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import stat
import struct
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import formats, locations, reasons
from ..atomic import atomic_output, output_target
from ..errors import UserError
from ..loaders.profiles import PROFILES, require
from ..loaders.profiles import normalize as normalize_profiles
from ..scanning.cache import options_from_key, options_key
from ..scanning.check import CheckOptions
from ..scanning.discover import DiscoverStats, iter_media, symlink_mode
from ..scanning.results import SCHEMA as RESULTS_SCHEMA
from .columns import ColumnSink, write_npy_columns, write_one_batch
from .labels import CsvLabels, folder_classes, read_labels_csv, sort_key
from .spill import Sorter, aligned, make_spill_folder
from .store import (
    FACTS,
    KIND_CODE,
    LARGE_PATH_BYTES,
    META_KEY,
    index_schema,
    NPY_META,
    disk_size,
    make_meta,
    one_chunk,
    resolve_format,
    write_arrow,
    write_npy,
)

logger = logging.getLogger("dsclean.index")

#: rows per record batch while streaming the build (bounded memory)
CHUNK_ROWS = 65_536
#: the file rules of ``--files``: dsclean's (media it can check; hidden and AppleDouble files skipped)
#: or torchvision ImageFolder's (IMG_EXTENSIONS, hidden files included, symlinks followed)
FILE_RULES = ("dsclean", "imagefolder")
#: bad paths kept for the summary (all of them are counted)
MAX_LISTED = 1000


@dataclass
class IndexSummary:
    """What a build did: written rows and everything left out, with the reason."""

    output: str
    format: str
    rows: int = 0
    classes: int = 0
    labels: str = "folder"  # folder / csv / none
    files: str = "dsclean"  # the file rule: dsclean / imagefolder
    symlinks: str = "none"
    excluded_bad: int = 0  # marked bad by the scan results
    checked: int = 0  # files without a current verdict, checked by the index itself
    checked_from_cache: int = 0  # ... of which the scan cache already knew (unchanged since an earlier check)
    checked_bad: int = 0  # ... found bad and left out
    checked_bad_reasons: dict[str, int] = field(default_factory=dict)
    bad_paths: list[str] = field(default_factory=list)  # the first MAX_LISTED files left out as bad by the check
    not_media: int = 0  # --no-check: magic bytes do not match any media format
    unreadable: int = 0  # could not be stat'ed or read while indexing
    not_regular: int = 0  # a FIFO, socket or device named like media (the scan's warn/not_regular): never opened
    unlabeled: int = 0  # no class: a file directly in the root (folder labels) or not in the CSV
    unscanned: int = 0  # not in the scan results
    changed_since_scan: int = 0  # size or mtime differ from the scan's
    rechecked: int = 0  # unchanged, but the scan's verdict judged the moment, not the file (too_large, timeout, ...)
    warned: int = 0  # left out: a warn verdict of a reason in reasons.LEFT_OUT_WARNINGS (not judged, or --lenient)
    warned_reasons: dict[str, int] = field(default_factory=dict)
    warned_paths: list[str] = field(default_factory=list)  # the first MAX_LISTED of them
    include_warn: list[str] = field(default_factory=list)  # --include-warn: such reasons shipped anyway
    exclude_warn: list[str] = field(default_factory=list)  # --exclude-warn: warnings otherwise shipped, left out
    duplicates: int = 0  # --dedup: exact duplicates left out (the first by path order kept)
    hashed: int = 0  # --dedup: files hashed here because the scan results had no current content_hash
    scan_results: str | None = None
    results_source: str = ""  # which step of the lookup rule found the scan results
    media_bytes: int = 0
    index_bytes: int = 0
    large_paths: bool = False
    elapsed: float = 0.0
    discovery: DiscoverStats = field(default_factory=DiscoverStats)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- build


def build_index(
    root: str,
    output: str,
    *,
    format: str | None = None,
    labels_csv: str | None = None,
    no_labels: bool = False,
    scan_results: str | Sequence[str] | None = None,
    exclude: Iterable[str] = (),
    progress: bool = False,
    large_path_bytes: int | None = None,
    check: bool = True,
    jobs: int = 0,
    files: str = "dsclean",
    symlinks: str | None = None,
    state_dir: str | None = None,
    allow_inside_root: bool = False,
    dedup: bool = False,
    root_moved: bool = False,
    facts: bool = False,
    include_warn: Iterable[str] = (),
    exclude_warn: Iterable[str] = (),
    loaders: Iterable[str] = ("pillow",),
) -> IndexSummary:
    """Index the media files under ``root`` into ``output`` (Arrow file or npy folder).

    Scan results are found by :func:`dsclean.locations.find_results` (``scan_results``,
    ``state_dir``, the root's last-scan pointer, a legacy ``ROOT/.dsclean``). Files the
    scan marked bad are left out; files without a current verdict (never scanned,
    changed since, restored) are checked here with the scan's recorded options on
    ``jobs`` processes, their verdicts go into the scan cache, and bad ones are left
    out. ``check=False`` (``--no-check``) confirms such files by magic bytes only.

    ``files``: ``"dsclean"`` (default) or ``"imagefolder"`` (torchvision's exact file
    rule). ``symlinks``: ``"none"``/``"inside"``/``"all"`` (default: none; all for
    the imagefolder rule). An index that would be empty is refused.

    ``progress=True`` (the CLI) shows progress on stderr; notes are logged on the
    ``dsclean.index`` logger (the CLI prints them; a program's logging config decides). ``large_path_bytes`` overrides
    the 2 GiB threshold for 64-bit path offsets (for tests). ``dedup=True`` leaves
    out exact duplicates (same content hash), keeping the first in index order.
    ``facts=True`` (``--facts``) copies the scan's facts columns (``store.FACTS``: media
    facts, content hash, quality facts) into the index; without it there are none.

    A file whose verdict is a ``warn`` of a reason in :data:`dsclean.reasons.LEFT_OUT_WARNINGS`
    (not judged: past the default memory ceiling, changed while checked; or damage
    ``scan --lenient`` accepted) is left out and listed, unless its reason is in
    ``include_warn`` (``--include-warn``): ``scan && index`` never ships a file silently
    that the scan could not judge, or that the default loader cannot read. ``exclude_warn``
    (``--exclude-warn``) leaves out warnings that are otherwise shipped, e.g. ``cmyk``, ``grayscale``.

    ``loaders`` (``--loader``): the loader profiles (:mod:`dsclean.loaders.profiles`) training will use; each file is
    judged with them too (a file one fails on, ``loader_fails``, is left out), and the index records them
    (``meta["loaders"]``): :class:`~dsclean.data.dataset.IndexedDataset` refuses to open it with another loader.
    Scan results made for other profiles are no verdicts for these: every file is checked again here.
    """
    t0 = time.monotonic()
    fmt = resolve_format(output, format)
    _check_root(root)
    _check_output(output, fmt)
    exclude = _check_exclude(root, exclude)
    if files not in FILE_RULES:
        raise UserError(f"unknown file rule {files!r}: use {' or '.join(FILE_RULES)}")
    if labels_csv is not None and no_labels:
        raise UserError("--labels and --no-labels cannot be used together: pick one way to label")
    if facts and fmt == "npy":
        raise UserError(f"{output}: --facts needs an arrow index (the facts include hashes and lists, "
                        "which an npy folder of numbers cannot hold)")
    if not allow_inside_root and locations.is_inside(output, root):
        raise UserError(f"the index {output} is inside the dataset root {root}: it would become part of the data "
                        "(an npy folder is one more class for ImageFolder). Write it outside ROOT, or pass "
                        "--allow-inside-root to accept that")
    state = locations.root_state_dir(root, state_dir)
    if check and not allow_inside_root and locations.is_inside(state, root):
        raise UserError(f"the state folder {state} (--state-dir / DSCLEAN_STATE_DIR) is inside the dataset root "
                        f"{root}: the scan cache would become part of the data. Choose one outside ROOT, or pass "
                        "--allow-inside-root to accept that")
    include_warn = _check_include_warn(include_warn)
    exclude_warn = _check_exclude_warn(exclude_warn)
    mode = "csv" if labels_csv is not None else "none" if no_labels else "folder"
    links = symlink_mode(symlinks if symlinks is not None else ("all" if files == "imagefolder" else None))
    summary = IndexSummary(output=output, format=fmt, labels=mode, files=files, symlinks=links,
                           include_warn=include_warn, exclude_warn=exclude_warn)
    csv_labels = read_labels_csv(labels_csv) if labels_csv is not None else None  # fail before the walk

    found = locations.find_scan(root, scan_results, state_dir, root_moved)
    results_paths, summary.results_source = found.paths, found.source
    partial = found.partial is not None  # only the parts of a job array that ran: the others' files are checked here
    if partial:
        summary.results_source += ": the files of the missing parts are checked here (run those parts to reuse " \
                                  "their verdicts)"
    _note(summary, f"scan results: {summary.results_source}", progress)
    if results_paths and scan_results is None:  # the last scan, found through the state folder
        for _, judged in locations.interrupted_scans(root, state_dir):
            _note(summary, f"the last scan of {root} was interrupted after {judged:,} files: the files it did not "
                  f"reach are checked here; run dsclean scan {root} to finish it (it reuses what it judged)", progress)
    results_columns, check_options = _results_info(results_paths, partial) if results_paths else ([], CheckOptions())
    profiles = profile_names(loaders)
    wanted = tuple(n for n in profiles if not PROFILES[n].reference)
    if tuple(check_options.loaders) != wanted:
        if results_paths and check:
            _note(summary, f"the scan results were made for the loaders {_loader_list(check_options.loaders)}, not "
                  f"{_loader_list(wanted)}: every file is checked here (scan with the same --loader to reuse its "
                  "verdicts)", progress)
            results_paths, results_columns = [], []
        check_options = dataclasses.replace(check_options, loaders=wanted)
    summary.scan_results = ", ".join(results_paths) or None
    if facts and results_paths and not check_options.facts:
        _note(summary, "the scan results hold no facts (the scan ran with --facts none): the index's content_hash "
              "and quality facts columns are null (media facts such as width and duration are there); re-scan "
              "with --facts all to fill them", progress)
    if not results_paths and not check:
        _note(summary, f"no scan results found for {root}; --no-check: indexing by extension/magic bytes only "
              "(no decoding)", progress)

    exclude = (*exclude, output)  # an npy index written inside the root is not a class folder
    classes = folder_classes(root, exclude, include_hidden=files == "imagefolder") if mode == "folder" else []
    if csv_labels is not None:
        classes = csv_labels.classes
    spill, spill_lock = make_spill_folder(os.path.dirname(os.path.abspath(output)))
    try:
        rows = _Rows(spill, by_label=mode == "folder", facts=facts, csv_labels=csv_labels, classes=len(classes))
        fingerprint = _collect(root, exclude, classes, results_paths, results_columns, check_options, rows, summary,
                               check=check, jobs=jobs, state_dir=state_dir, progress=progress)
        if csv_labels is not None:
            _check_unlisted_csv_paths(root, csv_labels, rows.csv_seen, results_paths, summary, progress)
            if len(csv_labels.paths) and not rows.csv_seen.any():
                example = os.fsdecode(csv_labels.paths[0].as_py())
                raise UserError(f"{csv_labels.source}: none of its {len(csv_labels.paths):,} paths names a file "
                                f"being indexed under {root} (e.g. line 2: {example!r}); paths must be relative "
                                "to the root, like cats/x.jpg; an index of 0 rows is not written")
        if rows.order.rows == 0:
            raise UserError(_empty_message(root, summary))
        threshold = LARGE_PATH_BYTES if large_path_bytes is None else large_path_bytes
        summary.large_paths = rows.path_bytes > threshold
        schema = index_schema(classes=len(classes), max_size=rows.max_size, large=summary.large_paths, facts=facts)
        meta = make_meta(root, classes, mode, rows.order.rows, summary.scan_results)
        meta.update(files=files, symlinks=links, extensions=list(_extensions(files)), checked=check,
                    check_options=options_key(check_options), tree=fingerprint, include_warn=include_warn,
                    exif=getattr(check_options, "exif", "ignore"),  # scan --exif apply: IndexedDataset turns images
                    loaders=list(profiles))
        if dedup:  # in memory (16 bytes of hash a row and the table): --dedup is not a default option
            table = _finalize(pa.concat_tables(rows.order.sorted()), schema)
            table = _drop_exact_duplicates(root, table, results_paths, summary)
            summary.rows, summary.media_bytes = table.num_rows, int(pc.sum(table.column("size")).as_py() or 0)
            counts = np.bincount(table.column("label").to_numpy().astype(np.int64) + 1, minlength=len(classes) + 1)
            meta["rows"] = table.num_rows
            writer = write_arrow if fmt == "arrow" else write_npy
            with atomic_output(output, directory=fmt == "npy") as tmp:
                writer(table, tmp, meta)
        else:
            counts = _write_streamed(output, fmt, rows, schema, meta, summary, len(classes))
    finally:
        shutil.rmtree(spill, ignore_errors=True)
        os.close(spill_lock)
    summary.classes = len(classes)
    _empty_class_notes(summary, counts[1:], classes, mode, progress)
    summary.index_bytes = disk_size(output)
    summary.elapsed = round(time.monotonic() - t0, 3)
    for note in _discovery_notes(summary.discovery, files):
        _note(summary, note, progress)
    if summary.unscanned and results_paths and not check:
        _note(summary, f"{summary.unscanned} files are not in the scan results {summary.scan_results} "
              "(new since the scan?); --no-check: they were checked by magic bytes only", progress)
    return summary


#: rows checked at once when the scan did not cover them (one worker pool per chunk)
STALE_ROWS = 262_144


class _Rows:
    """The rows the index keeps, on their way to a :class:`Sorter` in index order; counts for the schema."""

    def __init__(self, spill: str, *, by_label: bool, facts: bool, csv_labels: CsvLabels | None,
                 classes: int) -> None:
        self.order = Sorter(spill, "order", "order")
        self.by_label, self.facts, self.csv_labels = by_label, facts, csv_labels
        self.csv_seen = np.zeros(len(csv_labels.paths), bool) if csv_labels is not None else None
        self.path_bytes = self.max_size = 0
        self.unlabeled = 0

    def add(self, table: pa.Table, summary: IndexSummary) -> None:
        if not table.num_rows:
            return
        drop = [n for n in table.column_names if n in FACTS and not self.facts]
        table = table.drop_columns(drop)
        if self.csv_labels is not None:
            where = pc.index_in(table.column("path"), value_set=self.csv_labels.paths)
            hit = where.to_numpy(zero_copy_only=False)
            self.csv_seen[hit[~np.isnan(hit)].astype(np.int64) if hit.dtype.kind == "f" else hit] = True
            col = self.csv_labels.ids.take(where)
            listed = pc.is_valid(col)
            summary.unlabeled += int(pc.sum(pc.invert(listed)).as_py() or 0)
            table = table.set_column(table.schema.get_field_index("label"), "label", col).filter(listed)
            if not table.num_rows:
                return
        if self.facts:  # every facts column, null where the results have none: one schema for every block
            for name, typ in FACTS.items():
                if name not in table.column_names:
                    table = table.append_column(pa.field(name, typ), pa.nulls(table.num_rows, typ))
        names = [*_BUILD_SCHEMA.names, *(FACTS if self.facts else ())]
        table = table.select(names).cast(pa.schema([*_BUILD_SCHEMA, *(pa.field(n, FACTS[n]) for n in FACTS
                                                                       if self.facts)]))
        key = table.column("key")
        if self.by_label:  # ImageFolder order: class, then walk order; a 4-byte big-endian label sorts first
            labels = np.ascontiguousarray(table.column("label").to_numpy().astype(">u4"))
            n = len(labels)
            prefix = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.arange(0, 4 * n + 1, 4, np.int32)),
                                                             pa.py_buffer(labels.tobytes())])
            key = pc.binary_join_element_wise(prefix, key, pa.scalar(b"", pa.binary()))
        table = table.drop_columns(["key"]).append_column("order", key)
        self.path_bytes += int(pc.sum(pc.binary_length(table.column("path"))).as_py() or 0)
        self.max_size = max(self.max_size, int(pc.max(table.column("size")).as_py() or 0))
        self.order.add(table)


def _collect(root: str, exclude: Iterable[str], classes: list[str], results_paths: list[str],
             results_columns: list[str], options: CheckOptions, rows: _Rows, summary: IndexSummary, *,
             check: bool, jobs: int, state_dir: str | None, progress: bool) -> dict:
    """Walk, join with the scan results window by window, check what they do not cover; rows go to ``rows``."""
    prints = Fingerprint()
    walk = _walk(root, exclude, classes, sniff_all=not results_paths and not check, summary=summary,
                 progress=progress, prints=prints)
    spill = rows.order.folder

    def judge_unscanned(batches) -> None:
        for chunk in _rechunk(batches, STALE_ROWS):
            rows.add(_judge(root, chunk, None, options, summary, jobs=jobs, state_dir=state_dir,
                            progress=progress), summary)

    if not results_paths:
        if not check:
            for batch in walk:
                rows.add(pa.Table.from_batches([batch]), summary)
            return prints.to_json()
        files = Sorter(spill, "unscanned", "path")
        for batch in walk:
            files.add(batch)
        _note(summary, f"{root} was never scanned: checking every file ({files.rows:,}) the way dsclean scan "
              "would (verdicts go to the scan cache, so a later scan reuses them); --no-check skips this", progress)
        judge_unscanned(files.sorted())
        return prints.to_json()
    files = Sorter(spill, "files", "path")
    for batch in walk:
        files.add(batch)
    results = Sorter(spill, "results", "path")
    for batch in _results_batches(results_paths, results_columns):
        results.add(batch)
    stale = Sorter(spill, "stale", "path")
    empty = None
    last: list = [None]
    for here, res in aligned([files.sorted(), results.sorted()], "path"):
        if res is not None and len(results_paths) > 1:
            _refuse_overlap(res, last)
        if here is None or not here.num_rows:
            continue
        if res is None:  # past the last result: nothing here was scanned
            if empty is None:
                types = {n: (FACTS[n] if n in FACTS else RESULTS_SCHEMA.field(n).type) for n in results_columns}
                empty = pa.table({n: pa.array([], t) for n, t in types.items()})
            res = empty
        if not check:
            rows.add(_apply_results(root, here, res, summary), summary)
            continue
        where = pc.index_in(here.column("path"), value_set=one_chunk(res.column("path")))
        scanned = pc.is_valid(where)
        current = pc.fill_null(pc.and_(pc.equal(res.column("size").take(where), here.column("size")),
                                       pc.equal(res.column("mtime_ns").take(where), here.column("mtime_ns"))), False)
        summary.unscanned += int(pc.sum(pc.invert(scanned)).as_py() or 0)
        summary.changed_since_scan += int(pc.sum(pc.and_(scanned, pc.invert(current))).as_py() or 0)
        stale.add(here.filter(pc.invert(current)))
        rows.add(_judge(root, here.filter(current), res, options, summary, jobs=jobs, state_dir=state_dir,
                        progress=progress), summary)
    judge_unscanned(stale.sorted())
    return prints.to_json()


def _rechunk(tables, rows: int):
    """Tables of about ``rows`` rows out of a stream of smaller ones."""
    pending, n = [], 0
    for t in tables:
        pending.append(t)
        n += t.num_rows
        if n >= rows:
            yield pa.concat_tables(pending)
            pending, n = [], 0
    if pending:
        yield pa.concat_tables(pending)


def _refuse_overlap(res: pa.Table, last: list) -> None:
    """Job-array parts overlap when a path appears twice in their merged, sorted results."""
    paths = res.column("path")
    if not len(paths):
        return
    first = paths[0].as_py()
    dup = first if first == last[0] else None
    if dup is None and len(paths) > 1:
        same = pc.equal(paths.slice(1), paths.slice(0, len(paths) - 1))
        hits = np.flatnonzero(same.to_numpy(zero_copy_only=False))
        dup = paths[int(hits[0])].as_py() if len(hits) else None
    if dup is not None:
        raise UserError(f"{os.fsdecode(dup)} appears in more than one part's results: overlapping parts "
                        "(did the tree change between the tasks?); re-run the parts")
    last[0] = paths[-1].as_py()


def _check_unlisted_csv_paths(root: str, labels: CsvLabels, seen: np.ndarray, results_paths: list[str],
                              summary: IndexSummary, progress: bool) -> None:
    """Every CSV path must name a file under the root, or one its scan found bad (quarantined since:
    a labels CSV made before the scan lists those too); only paths matching no indexed file are looked at."""
    missing: list[int] = []
    for row in np.flatnonzero(~seen):  # files excluded as bad, hidden, ... are fine; nonexistent ones are checked
        rel = os.fsdecode(labels.paths[int(row)].as_py())
        if os.path.isabs(rel) or ".." in rel.split("/") or not os.path.isfile(os.path.join(root, rel)):
            missing.append(int(row))
    if not missing:
        return
    wanted = labels.paths.take(pa.array(missing, pa.int64()))
    found_bad = np.zeros(len(missing), bool)
    if results_paths:
        for batch in _results_batches(results_paths, ["path", "status"]):
            hit = pc.is_in(wanted, value_set=batch.column(0).filter(pc.equal(batch.column(1), reasons.BAD)))
            found_bad |= hit.to_numpy(zero_copy_only=False)
    for row, bad in zip(missing, found_bad):
        if not bad:
            rel = os.fsdecode(labels.paths[row].as_py())
            raise UserError(f"{labels.source}: line {row + 2}: {rel!r} is not a file under {root} "
                            "(paths must be relative to the root, with /)")
    _note(summary, f"{labels.source}: {len(missing):,} paths name files the scan found bad (quarantined or "
          f"removed since), e.g. {os.fsdecode(wanted[0].as_py())!r}: left out", progress)


def _write_streamed(output: str, fmt: str, rows: _Rows, schema: pa.Schema, meta: dict, summary: IndexSummary,
                    classes: int) -> np.ndarray:
    """Stream the sorted rows into column temp files, then write the index; returns label counts (-1 first)."""
    folder = os.path.join(rows.order.folder, "columns")
    os.makedirs(folder)
    sinks = [ColumnSink(folder, f.name, f.type) for f in schema]
    counts = np.zeros(classes + 1, np.int64)
    bare = pa.schema(list(schema))
    try:
        for table in rows.order.sorted():
            table = table.select(bare.names).cast(bare)
            for sink, col in zip(sinks, table.columns):
                for chunk in col.chunks:
                    sink.append(chunk)
            counts += np.bincount(table.column("label").to_numpy().astype(np.int64) + 1, minlength=classes + 1)
            summary.media_bytes += int(pc.sum(table.column("size")).as_py() or 0)
        for sink in sinks:
            sink.finish()
        summary.rows = sinks[0].length
        with atomic_output(output, directory=fmt == "npy") as tmp:
            if fmt == "arrow":
                write_one_batch(tmp, schema.with_metadata({META_KEY: json.dumps(meta).encode("ascii")}), sinks)
            else:
                write_npy_columns(tmp, {s.name: s for s in sinks},
                                  {"labels": "label", "kinds": "kind", "sizes": "size", "mtimes": "mtime_ns"})
                with open(os.path.join(tmp, NPY_META), "w", encoding="ascii") as f:
                    json.dump(meta, f, indent=1)
    finally:
        for sink in sinks:
            sink.close()
    return counts


def _extensions(files: str) -> tuple[str, ...]:
    """The file extensions an index of this rule takes (``IndexedDataset.extensions``)."""
    return formats.IMAGEFOLDER_EXTENSIONS if files == "imagefolder" else tuple(sorted(formats.MEDIA_EXTENSIONS))


def discover(root: str, exclude: Iterable[str], files: str, symlinks: str, stats: DiscoverStats):
    """The media files an index of this file rule takes: ``(rel, format)`` from :func:`iter_media`."""
    imagefolder = files == "imagefolder"
    return iter_media(root, exclude=exclude, include_hidden=imagefolder, symlinks=symlinks, stats=stats,
                      extensions=frozenset(formats.IMAGEFOLDER_EXTENSIONS) if imagefolder else None)


def _empty_message(root: str, s: IndexSummary) -> str:
    """Why nothing is left to index, from the counts."""
    d = s.discovery
    why = [f"{n:,} {what}" for n, what in (
        (s.excluded_bad + s.checked_bad, "bad"), (s.not_media, "not media"), (s.unreadable, "unreadable"),
        (s.not_regular, "not a regular file"),
        (s.warned, "warnings left out (not judged, or accepted by --lenient; --include-warn ships them)"),
        (s.unlabeled, "without a label (files directly in ROOT have no class folder)" if s.labels == "folder"
         else "not in the labels CSV"),
        (d.symlinks, "symlinks not followed (--symlinks inside|all)"),
        (d.outside_links, "symlinks leading outside ROOT (--symlinks all follows them)"),
        (d.hidden, "hidden files skipped"), (d.ignored, "files with other extensions")) if n]
    return f"{root}: the index would be empty, refusing to write {s.output}: " + (
        "; ".join(why) if why else "no media files found") + "."


def _empty_class_notes(s: IndexSummary, counts: np.ndarray, classes: list[str], mode: str, progress: bool) -> None:
    """ImageFolder refuses a class folder without files (unless allow_empty=True); say which ones."""
    if mode != "folder" or not classes:
        return
    empty = [c for c, n in zip(classes, counts) if n == 0]
    if empty:
        _note(s, f"{len(empty)} class folders have no files in the index ({', '.join(empty[:5])}"
              f"{', ...' if len(empty) > 5 else ''}): they keep their label (like ImageFolder(allow_empty=True)); "
              "ImageFolder without allow_empty refuses them", progress)


def _discovery_notes(d: DiscoverStats, files: str) -> list[str]:
    notes = []
    if d.outside_links:
        notes.append(f"{d.outside_links:,} symlinks lead outside ROOT and were not followed (--symlinks all)")
    if d.loops:
        notes.append(f"{d.loops:,} linked folders were already visited (a loop or a second link) and were skipped")
    if d.excluded_dirs and files == "imagefolder":
        notes.append(f"{d.excluded_dirs} dsclean folders (a quarantine, or a legacy .dsclean) were left out; "
                     "torchvision's ImageFolder would list them as classes")
    return notes


def _check_root(root: str) -> None:
    if not os.path.exists(root):
        raise UserError(f"{root}: no such folder")
    if not os.path.isdir(root):
        raise UserError(f"{root}: not a folder (dsclean index takes the dataset's root folder)")


def _check_exclude(root: str, exclude: Iterable[str]) -> tuple[str, ...]:
    """``--exclude``: each must be an existing folder under ``root`` (a path as given: relative to the current
    folder, like ROOT itself); a typo or a folder elsewhere would silently leave nothing out."""
    checked = []
    for d in exclude:
        if not os.path.isdir(d):
            what = "is not a folder" if os.path.exists(d) else "does not exist"
            hint = os.path.join(root, d)
            if not os.path.isabs(d) and os.path.isdir(hint):
                what += f" (relative to the current folder, like ROOT; did you mean --exclude {hint}?)"
            raise UserError(f"--exclude {d}: {what}; nothing was written")
        if os.path.realpath(d) == os.path.realpath(root):
            raise UserError(f"--exclude {d}: is the root {root} itself (it would leave everything out); "
                            "nothing was written")
        lexical = os.path.abspath(d).startswith(os.path.join(os.path.abspath(root), ""))
        if not (lexical or locations.is_inside(d, root)):
            raise UserError(f"--exclude {d}: not a folder under the root {root} (it would leave nothing out); "
                            "nothing was written")
        checked.append(d)
    return tuple(checked)


def _check_output(output: str, fmt: str) -> None:
    """Refuse to replace something that is not an index of the same format (checked before any work)."""
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UserError(f"{output}: the folder {parent} does not exist")
    if fmt == "arrow" and os.path.isdir(output):
        raise UserError(f"{output}: is a folder; an arrow index is a single file (use --format npy for a folder)")
    target = output_target(output, directory=fmt == "npy")  # devices, FIFOs, sockets: refused; links: their target
    if fmt == "arrow" and os.path.isfile(target) and os.path.getsize(target) > 0:
        with open(target, "rb") as f:
            if f.read(6) != b"ARROW1":
                raise UserError(f"{output}: exists and is not an Arrow index (no Arrow file signature); "
                                "refusing to replace it: choose another output path")
    if fmt == "npy" and os.path.lexists(output):
        if not os.path.isdir(output):
            raise UserError(f"{output}: exists and is not a folder; an npy index is a folder")
        if os.listdir(output) and not os.path.isfile(os.path.join(output, NPY_META)):
            raise UserError(f"{output}: exists, is not empty and is not a dsclean npy index; "
                            "refusing to replace it")


def _note(summary: IndexSummary, message: str, progress: bool) -> None:
    """A note for the user: kept in the summary and logged (the CLI prints it as ``note: ...``)."""
    summary.notes.append(message)
    logger.warning(message)


_BUILD_SCHEMA = pa.schema(
    [
        ("path", pa.binary()),
        ("key", pa.binary()),
        ("label", pa.int64()),
        ("kind", pa.int8()),
        ("size", pa.int64()),
        ("mtime_ns", pa.int64()),
    ]
)


def _walk(root: str, exclude: Iterable[str], classes: list[str], *, sniff_all: bool,
          summary: IndexSummary, progress: bool, prints: "Fingerprint") -> Iterator[pa.RecordBatch]:
    """Stream discovery into record batches of compact columns; Python lists never exceed a chunk.

    Also adds every discovered media file's path, size and mtime to ``prints`` (the tree's
    fingerprint), so :func:`dsclean.index.folder.index_folder` can tell an up-to-date index.
    """
    class_to_idx = {c: i for i, c in enumerate(classes)}
    folder_labels = summary.labels == "folder"
    stats = summary.discovery
    cols: dict[str, list] = {name: [] for name in _BUILD_SCHEMA.names}
    seen = 0
    for rel, fmt in discover(root, exclude, summary.files, summary.symlinks, stats):
        seen += 1
        if progress and seen % 100_000 == 0:
            print(f"\rindexing: {seen} files", end="", file=sys.stderr, flush=True)
        full = os.path.join(root, rel)
        try:
            st = os.stat(full)
        except OSError:
            prints.add(rel, -1, -1)
            summary.unreadable += 1
            continue
        prints.add(rel, st.st_size, st.st_mtime_ns)
        if not stat.S_ISREG(st.st_mode):  # a FIFO/socket/device named like media: never opened (could block)
            summary.not_regular += 1
            continue
        label = -1
        if folder_labels:
            cls, sep, _ = rel.partition("/")
            if not sep or cls not in class_to_idx:
                summary.unlabeled += 1
                continue
            label = class_to_idx[cls]
        kind = KIND_CODE[formats.kind_of(fmt)] if fmt else KIND_CODE[formats.IMAGE]
        if sniff_all:
            kind = _sniff_kind(full, summary)
            if kind < 0:
                continue
        cols["path"].append(os.fsencode(rel))
        cols["key"].append(sort_key(rel))
        cols["label"].append(label)
        cols["kind"].append(kind)
        cols["size"].append(st.st_size)
        cols["mtime_ns"].append(st.st_mtime_ns)
        if len(cols["path"]) >= CHUNK_ROWS:
            yield pa.RecordBatch.from_pydict(cols, schema=_BUILD_SCHEMA)
            cols = {name: [] for name in _BUILD_SCHEMA.names}
    if cols["path"]:
        yield pa.RecordBatch.from_pydict(cols, schema=_BUILD_SCHEMA)
    if progress and seen >= 100_000:
        print(file=sys.stderr)
    summary.unreadable += stats.dir_errors


class Fingerprint:
    """An order-independent digest of a tree's media files: count and sum of per-file hashes (mod 2**64)."""

    def __init__(self) -> None:
        self.files, self.total = 0, 0

    def add(self, rel: str, size: int, mtime_ns: int) -> None:
        h = hashlib.blake2b(os.fsencode(rel) + b"\0" + struct.pack("<qq", size, mtime_ns), digest_size=8)
        self.total = (self.total + int.from_bytes(h.digest(), "little")) & 0xFFFF_FFFF_FFFF_FFFF
        self.files += 1

    def to_json(self) -> dict:
        return {"files": self.files, "fingerprint": f"{self.total:016x}"}


def tree_fingerprint(root: str, files: str, symlinks: str, exclude: Iterable[str] = ()) -> dict:
    """The fingerprint :func:`build_index` records for ``root`` under this file rule (a stat per file)."""
    prints = Fingerprint()
    for rel, _ in discover(root, exclude, files, symlinks, DiscoverStats()):
        try:
            st = os.stat(os.path.join(root, rel))
            prints.add(rel, st.st_size, st.st_mtime_ns)
        except OSError:
            prints.add(rel, -1, -1)
    return prints.to_json()


def _sniff_kind(full: str, summary: IndexSummary) -> int:
    """Kind code from the first bytes of the file, or -1 (counted) if it is not media or unreadable."""
    try:
        with open(full, "rb") as f:
            head = f.read(formats.SNIFF_BYTES)
    except OSError:
        summary.unreadable += 1
        return -1
    real = formats.sniff(head)
    if real is None:
        summary.not_media += 1
        return -1
    return KIND_CODE[formats.kind_of(real)]


def _results_info(paths: list[str], partial: bool = False) -> tuple[list[str], CheckOptions]:
    """The columns to read from one scan's results, or from the N parts of a job array (validated), and its options.

    ``partial``: some parts of a job array only (:func:`dsclean.locations.find_scan`): they must be parts of one scan."""
    import pyarrow.parquet as pq

    from ..scanning.merge import check_parts
    from ..scanning.results import read_results_meta

    for path in paths:
        if not os.path.exists(path):
            raise UserError(f"{path}: scan results not found")
    try:
        if partial:
            metas = [read_results_meta(p) for p in paths]
            for path, meta in zip(paths, metas):
                if not meta.get("shard") or meta["shard"][1] != metas[0]["shard"][1] or \
                        any(meta.get(k) != metas[0].get(k) for k in ("root", "options")):
                    raise UserError(f"{path} and {paths[0]} are not parts of one scan; pass --scan-results")
        elif len(paths) > 1:
            check_parts(paths)
        have = set.intersection(*(set(pq.read_schema(p).names) for p in paths))
        meta = read_results_meta(paths[0])
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
        raise UserError(f"{', '.join(paths)}: cannot read scan results ({exc})") from exc
    needed = ["path", "kind", "status", "reason", "size", "mtime_ns"]
    missing = [n for n in needed if n not in have]
    if missing:
        raise UserError(f"{', '.join(paths)}: not scan results (no {', '.join(missing)} column)")
    return needed + [n for n in FACTS if n in have], options_from_key(meta.get("options"))


def _results_batches(paths: list[str], columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The results' rows, a record batch at a time (never the whole table), typed as the results schema."""
    import pyarrow.parquet as pq

    types = {n: (FACTS[n] if n in FACTS else RESULTS_SCHEMA.field(n).type) for n in columns}
    schema = pa.schema([pa.field(n, t) for n, t in types.items()])
    for path in paths:
        if os.path.isdir(path):
            path = os.path.join(path, locations.RESULTS_FILE)
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=CHUNK_ROWS, columns=columns):
                yield pa.Table.from_batches([batch]).cast(schema).to_batches()[0] if batch.num_rows else batch
        except (pa.ArrowException, OSError) as exc:
            raise UserError(f"{path}: cannot read scan results ({exc})") from exc


def _judge(root: str, table: pa.Table, results: pa.Table | None, options: CheckOptions, summary: IndexSummary,
           *, jobs: int, state_dir: str | None, progress: bool) -> pa.Table:
    """Keep what has a current good verdict; check the rest here (cache, then workers); drop what is bad.

    A verdict is current when the scan saw the file with the same size and mtime.
    Facts come from the current verdict. Vectorized joins on the path column; no
    Python set of paths.
    """
    n = table.num_rows
    paths, sizes, mtimes = table.column("path"), table.column("size"), table.column("mtime_ns")
    if results is not None:
        where = pc.index_in(paths, value_set=one_chunk(results.column("path")))
        scanned = pc.is_valid(where)
        same = pc.and_(pc.equal(results.column("size").take(where), sizes),
                       pc.equal(results.column("mtime_ns").take(where), mtimes))
        # a verdict about the moment (changed, vanished, timeout, ...) is no verdict about the file: check again
        momentary = pc.is_in(results.column("reason").take(where), value_set=_NOT_JUDGED)
        same = pc.fill_null(same, False)
        current = pc.and_(same, pc.invert(pc.fill_null(momentary, False)))
        summary.unscanned += int(pc.sum(pc.invert(scanned)).as_py() or 0)
        summary.changed_since_scan += int(pc.sum(pc.and_(scanned, pc.invert(same))).as_py() or 0)
        summary.rechecked += int(pc.sum(pc.and_(same, pc.invert(current))).as_py() or 0)
    else:
        where = pa.nulls(n, pa.int32())
        current = pa.array(np.zeros(n, dtype=bool))
    stale = pc.invert(current)
    checked = int(pc.sum(stale).as_py() or 0)
    summary.checked += checked
    fresh = None
    if checked:
        from ..scanning.scanner import usable_cores
        from .checking import check_rows, open_cache

        cache = open_cache(os.path.join(locations.make_root_state_dir(root, state_dir), locations.CACHE_FILE)
                           if _state_writable(root, state_dir) else None, options)
        try:
            fresh, from_cache = check_rows(
                root, one_chunk(paths.filter(stale)), sizes.filter(stale).to_numpy(),
                mtimes.filter(stale).to_numpy(), options, jobs=jobs or usable_cores(), cache=cache, progress=progress)
        finally:
            if cache is not None:
                cache.close()
        summary.checked_from_cache += from_cache
    fwhere = pc.index_in(paths, value_set=one_chunk(fresh.column("path"))) if fresh is not None \
        else pa.nulls(n, pa.int32())

    def pick(name: str) -> pa.ChunkedArray | pa.Array:
        """Column ``name`` of the current scan verdict, else of the fresh check, per row (null if neither has it)."""
        typ = FACTS[name] if name in FACTS else RESULTS_SCHEMA.field(name).type
        has_old = results is not None and name in results.column_names
        has_new = fresh is not None and name in fresh.column_names
        old = results.column(name).take(where) if has_old else pa.nulls(n, typ)
        new = fresh.column(name).take(fwhere) if has_new else pa.nulls(n, typ)
        return pc.if_else(current, old.cast(typ), new.cast(typ))

    status = pick("status")
    bad = pc.or_(pc.fill_null(pc.equal(status, reasons.BAD), False), pc.is_null(status))
    gone = pc.fill_null(pc.equal(pick("reason"), reasons.VANISHED), False)
    summary.excluded_bad += int(pc.sum(pc.and_(bad, current)).as_py() or 0)
    checked_bad = pc.and_(bad, stale)
    n_bad = int(pc.sum(checked_bad).as_py() or 0)
    summary.checked_bad += n_bad
    if n_bad:
        reasons_col = pc.fill_null(pick("reason"), "unchecked").filter(checked_bad)
        for r in pc.value_counts(reasons_col).to_pylist():
            summary.checked_bad_reasons[r["values"]] = summary.checked_bad_reasons.get(r["values"], 0) + r["counts"]
        room = MAX_LISTED - len(summary.bad_paths)
        summary.bad_paths += [os.fsdecode(p) for p in paths.filter(checked_bad).slice(0, max(room, 0)).to_pylist()]
    summary.unreadable += int(pc.sum(pc.and_(gone, pc.invert(bad))).as_py() or 0)
    checked_kind = pick("kind")
    warned = _left_out_warnings(status, pick("reason"), paths, summary, _kind_changed(table.column("kind"), checked_kind))
    for name, typ in FACTS.items():
        table = table.append_column(pa.field(name, typ), pick(name).cast(typ))
    # A checked file's kind is what its content is (a WAV named .jpg is audio), whether the scan or this run
    # checked it; the extension's guess stays only where no check says otherwise.
    if checked_kind.null_count < n:
        kinds = table.column("kind")
        for name in (formats.IMAGE, formats.AUDIO):
            kinds = pc.if_else(pc.fill_null(pc.equal(checked_kind, name), False), pa.scalar(KIND_CODE[name], pa.int8()),
                               kinds)
        table = table.set_column(table.schema.get_field_index("kind"), "kind", kinds)
    return table.filter(pc.invert(pc.or_(pc.or_(bad, gone), warned)))


#: the reasons whose verdict judged the moment, not the file: such a verdict is checked again
_NOT_JUDGED = pa.array(sorted(reasons.NOT_JUDGED), pa.string())


def profile_names(loaders: Iterable[str]) -> tuple[str, ...]:
    """The ``--loader`` names, known and importable (a missing library: UserError naming the extra)."""
    names = normalize_profiles(loaders) or ("pillow",)
    require(names)
    return names


def _loader_list(names) -> str:
    return ", ".join(["pillow/soundfile", *names]) if names else "pillow/soundfile (the default)"


def _check_include_warn(include_warn: Iterable[str]) -> list[str]:
    """``--include-warn``: reason codes of warnings to ship anyway; each must be one the index leaves out."""
    chosen = sorted({r.strip() for item in include_warn for r in item.split(",") if r.strip()})
    unknown = [r for r in chosen if r not in reasons.LEFT_OUT_WARNINGS]
    if unknown:
        raise UserError(f"--include-warn {', '.join(unknown)}: not a warning the index leaves out; use one or more "
                        f"of {', '.join(sorted(reasons.LEFT_OUT_WARNINGS))} (other warnings are always indexed)")
    return chosen


def _check_exclude_warn(exclude_warn: Iterable[str]) -> list[str]:
    """``--exclude-warn``: reason codes of warnings the index ships by default, to leave out."""
    chosen = sorted({r.strip() for item in exclude_warn for r in item.split(",") if r.strip()})
    shipped = sorted(set(reasons.REASONS) - set(reasons.LEFT_OUT_WARNINGS) - set(reasons.NOT_JUDGED))
    unknown = [r for r in chosen if r not in shipped]
    if unknown:
        raise UserError(f"--exclude-warn {', '.join(unknown)}: not a warning the index ships; use one or more of "
                        f"{', '.join(shipped)}")
    return chosen


def _left_out_warnings(status, reason, paths, summary: IndexSummary, kind_changed=None) -> pa.Array:
    """Rows whose verdict is a warning the index leaves out (:data:`dsclean.reasons.LEFT_OUT_WARNINGS`, minus
    ``--include-warn``); counted by reason and the first paths listed. ``kind_changed``: per row, whether the
    content's kind differs from the extension's (the reasons of :data:`~dsclean.reasons.KIND_CHANGE_ONLY`
    leave out only those rows; none if not given)."""
    codes = sorted((set(reasons.LEFT_OUT_WARNINGS) - set(summary.include_warn)) | set(summary.exclude_warn))
    warned = pc.fill_null(pc.and_(pc.equal(status, reasons.WARN),
                                  pc.is_in(reason, value_set=pa.array(codes, pa.string()))), False)
    only_kind = pc.fill_null(pc.is_in(reason, value_set=pa.array(sorted(reasons.KIND_CHANGE_ONLY), pa.string())), False)
    changed = pa.array(np.zeros(len(status), dtype=bool)) if kind_changed is None else pc.fill_null(kind_changed, False)
    warned = pc.and_(warned, pc.or_(pc.invert(only_kind), changed))
    n = int(pc.sum(warned).as_py() or 0)
    if n:
        summary.warned += n
        for r in pc.value_counts(reason.filter(warned)).to_pylist():
            summary.warned_reasons[r["values"]] = summary.warned_reasons.get(r["values"], 0) + r["counts"]
        room = MAX_LISTED - len(summary.warned_paths)
        summary.warned_paths += [os.fsdecode(p) for p in paths.filter(warned).slice(0, max(room, 0)).to_pylist()]
    return warned


def _kind_changed(extension_kinds, content_kinds) -> pa.Array:
    """Per row: the content's kind (``"image"``/``"audio"``, null if unknown) is not the extension's (a kind code)."""
    changed = pa.array(np.zeros(len(extension_kinds), dtype=bool))
    for name in (formats.IMAGE, formats.AUDIO):
        other = pc.not_equal(extension_kinds, pa.scalar(KIND_CODE[name], pa.int8()))
        changed = pc.or_(changed, pc.fill_null(pc.and_(pc.equal(content_kinds, name), other), False))
    return changed


def _state_writable(root: str, state_dir: str | None) -> bool:
    try:
        locations.make_root_state_dir(root, state_dir)
        return True
    except OSError:
        return False


def _apply_results(root: str, table: pa.Table, results: pa.Table, summary: IndexSummary) -> pa.Table:
    """``--no-check``: drop files the scan marked bad and copy its facts, with one vectorized lookup.

    ``index_in`` hashes the results' path column once; no Python set of paths.
    Files missing from the results, and files changed since the scan (size or mtime), are checked by
    magic bytes, like a build without results.
    """
    where = pc.index_in(table.column("path"), value_set=one_chunk(results.column("path")))
    status = results.column("status").take(where)
    bad = pc.fill_null(pc.equal(status, reasons.BAD), False)
    summary.excluded_bad += int(pc.sum(bad).as_py() or 0)
    checked_kind = results.column("kind").take(where) if "kind" in results.column_names else None
    warned = _left_out_warnings(status, results.column("reason").take(where), table.column("path"), summary,
                                None if checked_kind is None else _kind_changed(table.column("kind"), checked_kind))
    same_size = pc.fill_null(pc.and_(pc.equal(results.column("size").take(where), table.column("size")),
                                     pc.equal(results.column("mtime_ns").take(where), table.column("mtime_ns"))),
                             True)
    for name, typ in FACTS.items():
        if name not in results.column_names:
            continue
        values = results.column(name).take(where).cast(typ)
        values = pc.if_else(same_size, values, pa.scalar(None, typ))
        table = table.append_column(pa.field(name, typ), values)
    scanned = pc.is_valid(where)
    changed = pc.and_(scanned, pc.invert(same_size))
    summary.changed_since_scan += int(pc.sum(changed).as_py() or 0)
    keep = pc.invert(pc.or_(bad, warned))
    unscanned = pc.invert(scanned).to_numpy(zero_copy_only=False)
    summary.unscanned += int(unscanned.sum())
    # the scan's "ok" says nothing of a file changed since (e.g. a good JPEG replaced by an HTML error page):
    # changed files get the magic-byte check of never-scanned ones (a file bad at the scan stays out)
    uncovered = unscanned | pc.and_(changed, keep).to_numpy(zero_copy_only=False)
    if uncovered.any():
        keep, kinds = _sniff_rows(root, table, uncovered, keep, summary)
        table = table.set_column(table.schema.get_field_index("kind"), "kind", kinds)
    return table.filter(keep)


def _sniff_rows(root: str, table: pa.Table, rows: np.ndarray, keep: pa.ChunkedArray,
                summary: IndexSummary) -> tuple[pa.Array, pa.Array]:
    """Magic-byte check of the rows flagged in ``rows``; returns the updated keep mask and kinds."""
    keep_np = keep.to_numpy(zero_copy_only=False).copy()
    kinds = table.column("kind").to_numpy().copy()
    positions = np.flatnonzero(rows)
    paths = table.column("path").filter(pa.array(rows))
    done = 0
    for chunk in paths.chunks:
        for start in range(0, len(chunk), CHUNK_ROWS):  # only one slice becomes Python objects at a time
            for raw in chunk.slice(start, CHUNK_ROWS).to_pylist():
                code = _sniff_kind(os.path.join(root, os.fsdecode(raw)), summary)
                pos = positions[done]
                done += 1
                if code < 0:
                    keep_np[pos] = False
                else:
                    kinds[pos] = code
    return pa.array(keep_np), pa.array(kinds, pa.int8())


def _finalize(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Index order is the ``order`` column's (already sorted); the index schema, one chunk per column."""
    for f in schema:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.select(schema.names).cast(schema).combine_chunks()


def _drop_exact_duplicates(root: str, table: pa.Table, results_paths: list[str], summary: IndexSummary) -> pa.Table:
    """Keep the first row (index order) of each content hash: from the scan results where current, else hashed here."""
    from ..hashing import DIGEST_SIZE, content_hash_file
    from ..scanning.results import read_results

    n = table.num_rows
    digests = np.zeros((n, DIGEST_SIZE), dtype=np.uint8)
    known = np.zeros(n, dtype=bool)
    for path in results_paths:
        try:
            res = read_results(path, columns=["path", "size", "mtime_ns", "content_hash"])
        except (KeyError, pa.ArrowInvalid):  # results written before content hashes were recorded
            continue
        where = pc.index_in(table.column("path").cast(pa.binary()), value_set=one_chunk(res.column("path")))
        # current = same size AND mtime: an edit in place of an uncompressed file (BMP, WAV, PGM) keeps its size
        same = pc.and_(pc.equal(res.column("size").take(where), table.column("size")),
                       pc.equal(res.column("mtime_ns").take(where), table.column("mtime_ns")))
        hit = pc.and_(pc.is_valid(where), pc.fill_null(same, False))
        hashes = res.column("content_hash").take(where).cast(pa.binary(DIGEST_SIZE)).combine_chunks()
        hit = pc.and_(hit, pc.is_valid(hashes)).to_numpy(zero_copy_only=False) & ~known
        if not hit.any():
            continue
        data = np.frombuffer(hashes.buffers()[1], np.uint8)[hashes.offset * DIGEST_SIZE:]
        digests[hit] = data[: n * DIGEST_SIZE].reshape(n, DIGEST_SIZE)[hit]
        known |= hit
    for i in np.flatnonzero(~known):
        rel = os.fsdecode(table.column("path")[int(i)].as_py())
        try:
            digests[i] = np.frombuffer(content_hash_file(os.path.join(root, rel)), np.uint8)
        except OSError:
            continue  # unreadable now: kept, it cannot be shown to be a copy
        summary.hashed += 1
        known[i] = True
    keys = np.ascontiguousarray(digests).view(np.dtype((np.void, DIGEST_SIZE))).ravel()
    _, first = np.unique(keys, return_index=True)
    keep = ~known
    keep[first] = True
    summary.duplicates = int(n - keep.sum())
    return table.filter(pa.array(keep)).combine_chunks() if summary.duplicates else table
