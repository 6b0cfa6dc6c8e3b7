"""Stage 5: build a compact, memory-mapped index of the files that survived the scan.

:func:`build_index` checks what it is asked (:class:`~dsclean.index.options.IndexOptions`), finds the
scan results, then streams, so its memory does not grow with the number of files:

- the walk (:mod:`.walk`): the tree's media files as record batches of at most ``CHUNK_ROWS``
  rows (no Python list of all paths);
- the judging (:mod:`.judge`): those and the scan results (read a record batch at a time, every
  part of a job array) are sorted by path in runs spilled to disk (:mod:`dsclean.index.spill`)
  and joined window by window (:func:`_collect`, here); files the scan did not cover are
  checked in chunks; bad ones are left out;
- the writing (:mod:`.write`): the kept rows are sorted into index order the same way and
  streamed column by column into the one-batch Arrow file (:mod:`dsclean.index.columns`),
  written through :func:`dsclean.atomic.atomic_output` (temp + rename).

What it did is an :class:`~dsclean.index.summary.IndexSummary`. The format itself is
:mod:`dsclean.index.store`; labels and sample order (torchvision ``ImageFolder``'s, or a CSV)
are in :mod:`dsclean.index.labels`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import locations, reasons
from ..errors import UserError
from ..loaders.profiles import PROFILES
from ..scanning.cache import options_key
from ..scanning.check import CheckOptions
from ..scanning.discover import symlink_mode
from ..scanning.results import SCHEMA as RESULTS_SCHEMA
from ..splits import split_folders
from .judge import (
    apply_results,
    check_exclude_warn,
    check_include_warn,
    drop_exact_duplicates,
    judge,
    loader_list,
    profile_names,
    results_batches,
    results_info,
)
from .labels import CsvLabels, folder_classes, read_labels_csv
from .options import FILE_RULES, IndexOptions, with_overrides
from .spill import Sorter, aligned, make_spill_folder
from .store import FACTS, LARGE_PATH_BYTES, disk_size, index_schema, make_meta, one_chunk, resolve_format
from .summary import IndexSummary, discovery_notes, empty_class_notes, empty_message, note
from .walk import Fingerprint, extensions, walk
from .write import KeptRows, check_output, sorted_table, write_streamed, write_table

#: rows checked at once when the scan did not cover them (one worker pool per chunk)
STALE_ROWS = 262_144


def build_index(root: str, output: str, options: IndexOptions = IndexOptions(), **overrides: Any) -> IndexSummary:
    """Index the media files under ``root`` into ``output`` (Arrow file or npy folder), as ``options`` say.

    ``options``: an :class:`~dsclean.index.options.IndexOptions`, whose fields may also be given as keyword
    arguments (they override it); the fields are named below.

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
    options = with_overrides(options, overrides, "build_index")
    t0 = time.monotonic()
    fmt = resolve_format(output, options.format)
    _check_root(root)
    check_output(output, fmt)
    exclude = _check_exclude(root, options.exclude)
    if options.files not in FILE_RULES:
        raise UserError(f"unknown file rule {options.files!r}: use {' or '.join(FILE_RULES)}")
    if options.labels_csv is not None and options.no_labels:
        raise UserError("--labels and --no-labels cannot be used together: pick one way to label")
    if options.facts and fmt == "npy":
        raise UserError(
            f"{output}: --facts needs an arrow index (the facts include hashes and lists, "
            "which an npy folder of numbers cannot hold)"
        )
    if not options.allow_inside_root and locations.is_inside(output, root):
        raise UserError(
            f"the index {output} is inside the dataset root {root}: it would become part of the data "
            "(an npy folder is one more class for ImageFolder). Write it outside ROOT, or pass "
            "--allow-inside-root to accept that"
        )
    state = locations.root_state_dir(root, options.state_dir)
    if options.check and not options.allow_inside_root and locations.is_inside(state, root):
        raise UserError(
            f"the state folder {state} (--state-dir / DSCLEAN_STATE_DIR) is inside the dataset root "
            f"{root}: the scan cache would become part of the data. Choose one outside ROOT, or pass "
            "--allow-inside-root to accept that"
        )
    include_warn = check_include_warn(options.include_warn)
    exclude_warn = check_exclude_warn(options.exclude_warn)
    mode = "csv" if options.labels_csv is not None else "none" if options.no_labels else "folder"
    links = symlink_mode(
        options.symlinks if options.symlinks is not None else ("all" if options.files == "imagefolder" else None)
    )
    summary = IndexSummary(
        output=output,
        format=fmt,
        labels=mode,
        files=options.files,
        symlinks=links,
        include_warn=include_warn,
        exclude_warn=exclude_warn,
    )
    if mode == "folder" and options.classes is None:
        _refuse_split_root(root, options.split_names)
    csv_labels = read_labels_csv(options.labels_csv) if options.labels_csv is not None else None  # fail before the walk

    found = locations.find_scan(root, options.scan_results, options.state_dir, options.root_moved)
    results_paths, summary.results_source = found.paths, found.source
    partial = found.partial is not None  # only the parts of a job array that ran: the others' files are checked here
    if partial:
        summary.results_source += (
            ": the files of the missing parts are checked here (run those parts to reuse their verdicts)"
        )
    note(summary, f"scan results: {summary.results_source}", options.progress)
    if results_paths and options.scan_results is None:  # the last scan, found through the state folder
        scanned = found.scanned_root or root
        for _, judged in locations.interrupted_scans(scanned, options.state_dir):
            note(
                summary,
                f"the last scan of {scanned} was interrupted after {judged:,} files: the files it did not "
                f"reach are checked here; run dsclean scan {scanned} to finish it (it reuses what it judged)",
                options.progress,
            )
    results_columns, check_options = results_info(results_paths, partial) if results_paths else ([], CheckOptions())
    profiles = profile_names(options.loaders)
    wanted = tuple(n for n in profiles if not PROFILES[n].reference)
    if tuple(check_options.loaders) != wanted:
        if results_paths and options.check:
            note(
                summary,
                f"the scan results were made for the loaders {loader_list(check_options.loaders)}, not "
                f"{loader_list(wanted)}: every file is checked here (scan with the same --loader to reuse its "
                "verdicts)",
                options.progress,
            )
            results_paths, results_columns = [], []
        check_options = dataclasses.replace(check_options, loaders=wanted)
    summary.scan_results = ", ".join(results_paths) or None
    if options.facts and results_paths and not check_options.facts:
        note(
            summary,
            "the scan results hold no facts (the scan ran with --facts none): the index's content_hash "
            "and quality facts columns are null (media facts such as width and duration are there); re-scan "
            "with --facts all to fill them",
            options.progress,
        )
    if not results_paths and not options.check:
        note(
            summary,
            f"no scan results found for {root}; --no-check: indexing by extension/magic bytes only (no decoding)",
            options.progress,
        )

    exclude = (*exclude, output)  # an npy index written inside the root is not a class folder
    classes = folder_classes(root, exclude, include_hidden=options.files == "imagefolder") if mode == "folder" else []
    if mode == "folder" and options.classes is not None:  # a split set's classes: the same list in every split
        classes = list(options.classes)
    if csv_labels is not None:
        classes = csv_labels.classes
    spill, spill_lock = make_spill_folder(os.path.dirname(os.path.abspath(output)))
    try:
        rows = KeptRows(
            spill, by_label=mode == "folder", facts=options.facts, csv_labels=csv_labels, classes=len(classes)
        )
        fingerprint = _collect(
            root,
            exclude,
            classes,
            results_paths,
            results_columns,
            check_options,
            rows,
            summary,
            check=options.check,
            jobs=options.jobs,
            state_dir=options.state_dir,
            progress=options.progress,
            prefix=found.prefix,
        )
        if csv_labels is not None:
            _check_unlisted_csv_paths(
                root, csv_labels, rows.csv_seen, results_paths, summary, options.progress, found.prefix
            )
            if len(csv_labels.paths) and not rows.csv_seen.any():
                example = os.fsdecode(csv_labels.paths[0].as_py())
                raise UserError(
                    f"{csv_labels.source}: none of its {len(csv_labels.paths):,} paths names a file "
                    f"being indexed under {root} (e.g. line 2: {example!r}); paths must be relative "
                    "to the root, like cats/x.jpg; an index of 0 rows is not written"
                )
        if rows.order.rows == 0:
            raise UserError(empty_message(root, summary))
        threshold = LARGE_PATH_BYTES if options.large_path_bytes is None else options.large_path_bytes
        summary.large_paths = rows.path_bytes > threshold
        schema = index_schema(
            classes=len(classes), max_size=rows.max_size, large=summary.large_paths, facts=options.facts
        )
        meta = make_meta(root, classes, mode, rows.order.rows, summary.scan_results)
        meta.update(
            files=options.files,
            symlinks=links,
            extensions=list(extensions(options.files)),
            checked=options.check,
            check_options=options_key(check_options),
            tree=fingerprint,
            include_warn=include_warn,
            exif=getattr(check_options, "exif", "ignore"),  # scan --exif apply: IndexedDataset turns images
            loaders=list(profiles),
        )
        if options.dedup:  # in memory (16 bytes of hash a row and the table): --dedup is not a default option
            table = drop_exact_duplicates(root, sorted_table(rows, schema), results_paths, summary, found.prefix)
            counts = write_table(output, fmt, table, meta, summary, len(classes))
        else:
            counts = write_streamed(output, fmt, rows, schema, meta, summary, len(classes))
    finally:
        shutil.rmtree(spill, ignore_errors=True)
        os.close(spill_lock)
    summary.classes = len(classes)
    empty_class_notes(summary, counts[1:], classes, mode, options.progress)
    summary.index_bytes = disk_size(output)
    summary.elapsed = round(time.monotonic() - t0, 3)
    for text in discovery_notes(summary.discovery, options.files):
        note(summary, text, options.progress)
    if summary.unscanned and results_paths and not options.check:
        note(
            summary,
            f"{summary.unscanned} files are not in the scan results {summary.scan_results} "
            "(new since the scan?); --no-check: they were checked by magic bytes only",
            options.progress,
        )
    return summary


def _collect(
    root: str,
    exclude: Iterable[str],
    classes: list[str],
    results_paths: list[str],
    results_columns: list[str],
    options: CheckOptions,
    rows: KeptRows,
    summary: IndexSummary,
    *,
    check: bool,
    jobs: int,
    state_dir: str | None,
    progress: bool,
    prefix: bytes = b"",
) -> dict:
    """Walk, join with the scan results window by window, check what they do not cover; rows go to ``rows``.

    ``prefix``: the results are a scanned ancestor's; only their rows below it count (paths made relative)."""
    prints = Fingerprint()
    walked = walk(
        root,
        exclude,
        classes,
        sniff_all=not results_paths and not check,
        summary=summary,
        progress=progress,
        prints=prints,
    )
    spill = rows.order.folder

    def judge_unscanned(batches) -> None:
        for chunk in _rechunk(batches, STALE_ROWS):
            rows.add(
                judge(root, chunk, None, options, summary, jobs=jobs, state_dir=state_dir, progress=progress), summary
            )

    if not results_paths:
        if not check:
            for batch in walked:
                rows.add(pa.Table.from_batches([batch]), summary)
            return prints.to_json()
        files = Sorter(spill, "unscanned", "path")
        for batch in walked:
            files.add(batch)
        note(
            summary,
            f"{root} was never scanned: checking every file ({files.rows:,}) the way dsclean scan "
            "would (verdicts go to the scan cache, so a later scan reuses them); --no-check skips this",
            progress,
        )
        judge_unscanned(files.sorted())
        return prints.to_json()
    files = Sorter(spill, "files", "path")
    for batch in walked:
        files.add(batch)
    results = Sorter(spill, "results", "path")
    for batch in results_batches(results_paths, results_columns, prefix):
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
            rows.add(apply_results(root, here, res, summary), summary)
            continue
        where = pc.index_in(here.column("path"), value_set=one_chunk(res.column("path")))
        scanned = pc.is_valid(where)
        current = pc.fill_null(
            pc.and_(
                pc.equal(res.column("size").take(where), here.column("size")),
                pc.equal(res.column("mtime_ns").take(where), here.column("mtime_ns")),
            ),
            False,
        )
        summary.unscanned += int(pc.sum(pc.invert(scanned)).as_py() or 0)
        summary.changed_since_scan += int(pc.sum(pc.and_(scanned, pc.invert(current))).as_py() or 0)
        stale.add(here.filter(pc.invert(current)))
        rows.add(
            judge(root, here.filter(current), res, options, summary, jobs=jobs, state_dir=state_dir, progress=progress),
            summary,
        )
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
        raise UserError(
            f"{os.fsdecode(dup)} appears in more than one part's results: overlapping parts "
            "(did the tree change between the tasks?); re-run the parts"
        )
    last[0] = paths[-1].as_py()


def _check_unlisted_csv_paths(
    root: str,
    labels: CsvLabels,
    seen: np.ndarray,
    results_paths: list[str],
    summary: IndexSummary,
    progress: bool,
    prefix: bytes = b"",
) -> None:
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
        for batch in results_batches(results_paths, ["path", "status"], prefix):
            hit = pc.is_in(wanted, value_set=batch.column(0).filter(pc.equal(batch.column(1), reasons.BAD)))
            found_bad |= hit.to_numpy(zero_copy_only=False)
    for row, bad in zip(missing, found_bad):
        if not bad:
            rel = os.fsdecode(labels.paths[row].as_py())
            raise UserError(
                f"{labels.source}: line {row + 2}: {rel!r} is not a file under {root} "
                "(paths must be relative to the root, with /)"
            )
    note(
        summary,
        f"{labels.source}: {len(missing):,} paths name files the scan found bad (quarantined or "
        f"removed since), e.g. {os.fsdecode(wanted[0].as_py())!r}: left out",
        progress,
    )


def _refuse_split_root(root: str, names) -> None:
    """Folder labels on a split root would make classes named ``train`` and ``val``: refused, saying what to do."""
    splits = split_folders(root, names)
    if splits:
        first = os.path.join(root, splits[0])
        raise UserError(
            f"{root} is a split root: its folders {', '.join(splits)} are splits, not classes. Index one "
            f"split (dsclean index {first} -o {splits[0]}.arrow; IndexedDataset.from_folder({first!r})), or "
            f"every split at once with --splits -o DIR (one index per split, the same classes in each); "
            "--split-names says what splits are called"
        )


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
            raise UserError(
                f"--exclude {d}: is the root {root} itself (it would leave everything out); nothing was written"
            )
        lexical = os.path.abspath(d).startswith(os.path.join(os.path.abspath(root), ""))
        if not (lexical or locations.is_inside(d, root)):
            raise UserError(
                f"--exclude {d}: not a folder under the root {root} (it would leave nothing out); nothing was written"
            )
        checked.append(d)
    return tuple(checked)
