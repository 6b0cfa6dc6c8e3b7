"""``dsclean pack s3://BUCKET/PREFIX``: the media objects of a bucket prefix as an index pack can take.

The prefix is listed (streamed, :mod:`dsclean.storage.listing`) and written as an Arrow index in the
prefix's local state folder (:func:`dsclean.locations.url_state_dir`), never in the bucket; its root is
the URL (no storage option: those come again from the environment or the caller). The objects the
prefix's last bucket scan found bad are left out, as a local index leaves out a scan's bad files. The
index's bytes depend only on the listing and the scan: the same prefix gives the same index, so a
killed pack resumes into the same folder (:func:`dsclean.pack.packer._identity`).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import locations
from .. import reasons as R
from ..atomic import atomic_output
from ..errors import UserError
from ..formats import format_of_name, kind_of
from ..index.store import KINDS, index_schema, make_meta, write_arrow
from ..storage.fs import Store
from ..storage.listing import ListingStats, iter_objects, probe
from ..storage.reads import classify
from ..storage.reuse import last_results
from ..storage.urls import normalize

log = logging.getLogger("dsclean.pack.bucketsource")

#: the index of a prefix, in its state folder
SOURCE_INDEX = "pack-source.arrow"
_CHUNK = 65_536  # listed objects per Arrow chunk


def bad_keys(url: str, state_dir: str | None) -> tuple[pa.Array, str]:
    """The keys the prefix's last bucket scan found bad, or warned about with a reason a local index leaves
    out by default (:data:`dsclean.reasons.LEFT_OUT_WARNINGS`), as an Arrow array; and where they came from."""
    results = last_results(url, state_dir)
    if results is None:
        return pa.array(
            [], pa.string()
        ), f"no bucket scan of {url} recorded: no object left out (dsclean scan it first)"
    bad = []
    warned = pa.array(sorted(R.LEFT_OUT_WARNINGS), pa.string())  # as a local index leaves them out by default
    for batch in pq.ParquetFile(results).iter_batches(batch_size=_CHUNK, columns=["path", "status", "reason"]):
        status, reason = batch.column("status"), batch.column("reason")
        out = pc.or_(
            pc.equal(status, R.BAD),
            pc.and_(pc.equal(status, R.WARN), pc.fill_null(pc.is_in(reason, value_set=warned), False)),
        )
        bad.append(pc.filter(batch.column("path"), pc.fill_null(out, False)).cast(pa.string()))
    return (pa.concat_arrays(bad) if bad else pa.array([], pa.string())), results


def bucket_index(url: str, storage_options: dict, state_dir: str | None = None) -> tuple[str, dict]:
    """Write the index of the media objects under ``url`` (less the last scan's bad ones); its path and
    what was left out (``{"bad": n, "results": where, "objects": n}``). A :class:`UserError` when the
    prefix cannot be listed or holds no media object."""
    url = normalize(url)
    store = Store(url, storage_options)
    try:
        probe(store)
    except UserError:
        raise
    except Exception as exc:
        err = classify(url, exc)
        raise UserError(f"{url}: cannot list the prefix: {err.detail}") from None
    denied, results = bad_keys(url, state_dir)
    stats = ListingStats()
    paths, sizes, mtimes, kinds, folders = [], [], [], [], set()
    left_out = 0
    chunk: list = []
    try:
        for obj in iter_objects(store, stats=stats):
            chunk.append(obj)
            if len(chunk) >= _CHUNK:
                left_out += _add(chunk, denied, paths, sizes, mtimes, kinds, folders)
                chunk = []
        left_out += _add(chunk, denied, paths, sizes, mtimes, kinds, folders)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"{url}: cannot list the prefix: {classify(url, exc).detail}") from None
    rows = sum(len(p) for p in paths)
    if not rows:
        raise UserError(f"{url}: no media object to pack under the prefix ({stats.objects} objects listed)")
    path = pa.concat_arrays(paths) if paths else pa.array([], pa.binary())
    # ImageFolder labels when every object is in a top-level "folder" (as a local index labels a root)
    tops = pc.list_element(pc.split_pattern(path.cast(pa.string()), "/", max_splits=1), 0)
    has_folder = pc.all(pc.match_substring(path.cast(pa.string()), "/")).as_py()
    classes = sorted(folders) if has_folder else []
    label = (
        pc.index_in(tops, pa.array(classes, pa.string())).cast(pa.int64())
        if classes
        else pa.array(np.full(rows, -1, np.int64))
    )
    size = np.concatenate(sizes)
    schema = index_schema(classes=len(classes), max_size=int(size.max()), large=False, facts=False)
    table = pa.table(
        [path, label, np.concatenate(kinds), size, np.concatenate(mtimes)], names=[f.name for f in schema]
    ).cast(schema)
    meta = make_meta("/", classes, "folder" if classes else "none", rows, results if results.startswith("/") else None)
    meta["root"] = url  # the objects' prefix: a URL, never its options
    folder = locations.url_state_dir(url, state_dir)
    os.makedirs(folder, exist_ok=True)
    out = os.path.join(folder, SOURCE_INDEX)
    meta.pop("created", None)  # the same listing gives the same bytes: the pack's identity, for resuming
    with atomic_output(out) as tmp:
        write_arrow(table, tmp, meta)
    log.info("%s: %d objects indexed for packing, %d left out as bad", url, rows, left_out)
    return out, {"bad": left_out, "results": results, "objects": stats.objects}


def _add(chunk: list, denied: pa.Array, paths, sizes, mtimes, kinds, folders: set) -> int:
    """Append a chunk of listed objects (less the denied) to the columns; the count left out."""
    if not chunk:
        return 0
    rel = pa.array([o.rel for o in chunk], pa.string())
    keep = pc.invert(pc.is_in(rel, value_set=denied)) if len(denied) else pa.array(np.ones(len(chunk), bool))
    kept = [o for o, k in zip(chunk, keep.to_pylist()) if k]
    for o in kept:
        if o.size is None or o.mtime_ns is None:  # a listing without sizes: the check against the index needs them
            raise UserError(f"{o.rel}: the listing gives no size or time for this object; pack cannot check it")
        top, sep, _ = o.rel.partition("/")
        if sep:
            folders.add(top)
    paths.append(pa.array([o.rel.encode("utf-8", "surrogateescape") for o in kept], pa.binary()))
    sizes.append(np.array([o.size for o in kept], np.int64))
    mtimes.append(np.array([o.mtime_ns for o in kept], np.int64))
    kinds.append(np.array([KINDS.index(kind_of(format_of_name(o.rel) or "")) for o in kept], np.int8))
    return len(chunk) - len(kept)
