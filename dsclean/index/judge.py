"""The judging of an index build: which walked files go in, from the scan's verdicts or a check made here.

A file goes in when the scan (or the check of :mod:`.checking`, for what the scan did not cover:
never scanned, changed since, restored, or a verdict about the moment) found it good, and its
verdict is not a warning the index leaves out (:data:`dsclean.reasons.LEFT_OUT_WARNINGS`,
``--include-warn``, ``--exclude-warn``). ``--no-check``: what the scan did not cover is
confirmed by magic bytes only. ``--dedup``: exact copies are left out. The scan results
are read here too, a record batch at a time (:func:`results_info`, :func:`results_batches`).
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import formats, locations, reasons
from ..errors import UserError
from ..loaders.profiles import normalize as normalize_profiles
from ..loaders.profiles import require
from ..scanning.cache import options_from_key
from ..scanning.check import CheckOptions
from ..scanning.results import SCHEMA as RESULTS_SCHEMA
from .store import FACTS, KIND_CODE, one_chunk
from .summary import MAX_LISTED, IndexSummary
from .walk import CHUNK_ROWS, sniff_kind


def results_info(paths: list[str], partial: bool = False) -> tuple[list[str], CheckOptions]:
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
                if (
                    not meta.get("shard")
                    or meta["shard"][1] != metas[0]["shard"][1]
                    or any(meta.get(k) != metas[0].get(k) for k in ("root", "options"))
                ):
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


def results_batches(paths: list[str], columns: list[str], prefix: bytes = b"") -> Iterator[pa.RecordBatch]:
    """The results' rows, a record batch at a time (never the whole table), typed as the results schema.

    ``prefix`` (:attr:`dsclean.locations.Found.prefix`, results of a scanned ancestor): only the rows
    below it, their paths made relative to the subfolder being indexed."""
    import pyarrow.parquet as pq

    types = {n: (FACTS[n] if n in FACTS else RESULTS_SCHEMA.field(n).type) for n in columns}
    schema = pa.schema([pa.field(n, t) for n, t in types.items()])
    for path in paths:
        if os.path.isdir(path):
            path = os.path.join(path, locations.RESULTS_FILE)
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=CHUNK_ROWS, columns=columns):
                batch = locations.subtree_rows(batch, prefix)
                yield pa.Table.from_batches([batch]).cast(schema).to_batches()[0] if batch.num_rows else batch
        except (pa.ArrowException, OSError) as exc:
            raise UserError(f"{path}: cannot read scan results ({exc})") from exc


def judge(
    root: str,
    table: pa.Table,
    results: pa.Table | None,
    options: CheckOptions,
    summary: IndexSummary,
    *,
    jobs: int,
    state_dir: str | None,
    progress: bool,
) -> pa.Table:
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
        same = pc.and_(
            pc.equal(results.column("size").take(where), sizes),
            pc.equal(results.column("mtime_ns").take(where), mtimes),
        )
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
        from ..scanning.cores import usable_cores
        from .checking import check_rows, open_cache

        cache = open_cache(
            os.path.join(locations.make_root_state_dir(root, state_dir), locations.CACHE_FILE)
            if _state_writable(root, state_dir)
            else None,
            options,
        )
        try:
            fresh, from_cache = check_rows(
                root,
                one_chunk(paths.filter(stale)),
                sizes.filter(stale).to_numpy(),
                mtimes.filter(stale).to_numpy(),
                options,
                jobs=jobs or usable_cores(),
                cache=cache,
                progress=progress,
            )
        finally:
            if cache is not None:
                cache.close()
        summary.checked_from_cache += from_cache
    fwhere = (
        pc.index_in(paths, value_set=one_chunk(fresh.column("path"))) if fresh is not None else pa.nulls(n, pa.int32())
    )

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
    warned = left_out_warnings(
        status, pick("reason"), paths, summary, _kind_changed(table.column("kind"), checked_kind)
    )
    for name, typ in FACTS.items():
        table = table.append_column(pa.field(name, typ), pick(name).cast(typ))
    # A checked file's kind is what its content is (a WAV named .jpg is audio), whether the scan or this run
    # checked it; the extension's guess stays only where no check says otherwise.
    if checked_kind.null_count < n:
        kinds = table.column("kind")
        for name in (formats.IMAGE, formats.AUDIO):
            kinds = pc.if_else(
                pc.fill_null(pc.equal(checked_kind, name), False), pa.scalar(KIND_CODE[name], pa.int8()), kinds
            )
        table = table.set_column(table.schema.get_field_index("kind"), "kind", kinds)
    return table.filter(pc.invert(pc.or_(pc.or_(bad, gone), warned)))


#: the reasons whose verdict judged the moment, not the file: such a verdict is checked again
_NOT_JUDGED = pa.array(sorted(reasons.NOT_JUDGED), pa.string())


def profile_names(loaders: Iterable[str]) -> tuple[str, ...]:
    """The ``--loader`` names, known and importable (a missing library: UserError naming the extra)."""
    names = normalize_profiles(loaders) or ("pillow",)
    require(names)
    return names


def loader_list(names) -> str:
    return ", ".join(["pillow/soundfile", *names]) if names else "pillow/soundfile (the default)"


def check_include_warn(include_warn: Iterable[str]) -> list[str]:
    """``--include-warn``: reason codes of warnings to ship anyway; each must be one the index leaves out."""
    chosen = sorted({r.strip() for item in include_warn for r in item.split(",") if r.strip()})
    unknown = [r for r in chosen if r not in reasons.LEFT_OUT_WARNINGS]
    if unknown:
        raise UserError(
            f"--include-warn {', '.join(unknown)}: not a warning the index leaves out; use one or more "
            f"of {', '.join(sorted(reasons.LEFT_OUT_WARNINGS))} (other warnings are always indexed)"
        )
    return chosen


def check_exclude_warn(exclude_warn: Iterable[str]) -> list[str]:
    """``--exclude-warn``: reason codes of warnings the index ships by default, to leave out."""
    chosen = sorted({r.strip() for item in exclude_warn for r in item.split(",") if r.strip()})
    shipped = sorted(set(reasons.REASONS) - set(reasons.LEFT_OUT_WARNINGS) - set(reasons.NOT_JUDGED))
    unknown = [r for r in chosen if r not in shipped]
    if unknown:
        raise UserError(
            f"--exclude-warn {', '.join(unknown)}: not a warning the index ships; use one or more of "
            f"{', '.join(shipped)}"
        )
    return chosen


def left_out_warnings(status, reason, paths, summary: IndexSummary, kind_changed=None) -> pa.Array:
    """Rows whose verdict is a warning the index leaves out (:data:`dsclean.reasons.LEFT_OUT_WARNINGS`, minus
    ``--include-warn``); counted by reason and the first paths listed. ``kind_changed``: per row, whether the
    content's kind differs from the extension's (the reasons of :data:`~dsclean.reasons.KIND_CHANGE_ONLY`
    leave out only those rows; none if not given)."""
    codes = sorted((set(reasons.LEFT_OUT_WARNINGS) - set(summary.include_warn)) | set(summary.exclude_warn))
    warned = pc.fill_null(
        pc.and_(pc.equal(status, reasons.WARN), pc.is_in(reason, value_set=pa.array(codes, pa.string()))), False
    )
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


def apply_results(root: str, table: pa.Table, results: pa.Table, summary: IndexSummary) -> pa.Table:
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
    warned = left_out_warnings(
        status,
        results.column("reason").take(where),
        table.column("path"),
        summary,
        None if checked_kind is None else _kind_changed(table.column("kind"), checked_kind),
    )
    same_size = pc.fill_null(
        pc.and_(
            pc.equal(results.column("size").take(where), table.column("size")),
            pc.equal(results.column("mtime_ns").take(where), table.column("mtime_ns")),
        ),
        True,
    )
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


def _sniff_rows(
    root: str, table: pa.Table, rows: np.ndarray, keep: pa.ChunkedArray, summary: IndexSummary
) -> tuple[pa.Array, pa.Array]:
    """Magic-byte check of the rows flagged in ``rows``; returns the updated keep mask and kinds."""
    keep_np = keep.to_numpy(zero_copy_only=False).copy()
    kinds = table.column("kind").to_numpy().copy()
    positions = np.flatnonzero(rows)
    paths = table.column("path").filter(pa.array(rows))
    done = 0
    for chunk in paths.chunks:
        for start in range(0, len(chunk), CHUNK_ROWS):  # only one slice becomes Python objects at a time
            for raw in chunk.slice(start, CHUNK_ROWS).to_pylist():
                code = sniff_kind(os.path.join(root, os.fsdecode(raw)), summary)
                pos = positions[done]
                done += 1
                if code < 0:
                    keep_np[pos] = False
                else:
                    kinds[pos] = code
    return pa.array(keep_np), pa.array(kinds, pa.int8())


def drop_exact_duplicates(
    root: str, table: pa.Table, results_paths: list[str], summary: IndexSummary, prefix: bytes = b""
) -> pa.Table:
    """Keep the first row (index order) of each content hash: from the scan results where current, else hashed here."""
    from ..hashing import DIGEST_SIZE, content_hash_file
    from ..scanning.results import read_results

    n = table.num_rows
    digests = np.zeros((n, DIGEST_SIZE), dtype=np.uint8)
    known = np.zeros(n, dtype=bool)
    for path in results_paths:
        try:
            res = locations.subtree_rows(
                read_results(path, columns=["path", "size", "mtime_ns", "content_hash"]), prefix
            )
        except (KeyError, pa.ArrowInvalid):  # results written before content hashes were recorded
            continue
        where = pc.index_in(table.column("path").cast(pa.binary()), value_set=one_chunk(res.column("path")))
        # current = same size AND mtime: an edit in place of an uncompressed file (BMP, WAV, PGM) keeps its size
        same = pc.and_(
            pc.equal(res.column("size").take(where), table.column("size")),
            pc.equal(res.column("mtime_ns").take(where), table.column("mtime_ns")),
        )
        hit = pc.and_(pc.is_valid(where), pc.fill_null(same, False))
        hashes = res.column("content_hash").take(where).cast(pa.binary(DIGEST_SIZE)).combine_chunks()
        hit = pc.and_(hit, pc.is_valid(hashes)).to_numpy(zero_copy_only=False) & ~known
        if not hit.any():
            continue
        data = np.frombuffer(hashes.buffers()[1], np.uint8)[hashes.offset * DIGEST_SIZE :]
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
