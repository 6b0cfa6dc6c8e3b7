"""``dsclean pack s3://BUCKET/PREFIX``: the media objects of a bucket prefix as an index pack can take.

The prefix is listed (streamed, :mod:`dsclean.storage.listing`) and written as an Arrow index in the
prefix's local state folder (:func:`dsclean.locations.url_state_dir`), never in the bucket; its root is
the URL (no storage option: those come again from the environment or the caller). The objects the
prefix's last bucket scan found bad are left out, as a local index leaves out a scan's bad files. The
index's bytes depend only on the listing and the scan: the same prefix gives the same index, so a
killed pack resumes into the same folder (:func:`dsclean.pack.packer._identity`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import locations
from .. import reasons as R
from ..atomic import atomic_output
from ..errors import UserError
from ..formats import format_of_name, kind_of
from ..index.columns import ColumnSink, write_one_batch
from ..index.store import KIND_CODE, META_KEY, index_schema, make_meta
from ..storage.fs import Store
from ..storage.listing import ListingStats, iter_objects, probe
from ..storage.reads import classify
from ..storage.reuse import last_results
from ..storage.urls import normalize

log = logging.getLogger("dsclean.pack.bucketsource")

#: the index of a prefix, in its state folder
SOURCE_INDEX = "pack-source.arrow"
_CHUNK = 65_536  # listed objects per Arrow chunk
#: past this many distinct first folders they are not classes (an ``<id>/img.jpg`` layout): no labels, and no
#: Python entry kept per folder
MAX_CLASSES = 100_000


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
    prefix cannot be listed or holds no media object.

    Streamed: each page of the listing goes to the columns' temp files (:class:`dsclean.index.columns.ColumnSink`)
    and the index is written from them as one record batch; memory holds a chunk of keys, never the listing.
    """
    url = normalize(url)
    store = Store(url, storage_options)
    try:
        probe(store)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"{url}: cannot list the prefix: {classify(url, exc).detail}") from None
    denied, results = bad_keys(url, state_dir)
    folder = locations.url_state_dir(url, state_dir)
    os.makedirs(folder, exist_ok=True)
    # wide types (an index's readers take any of them): the label count and the largest size are not known yet
    schema = index_schema(classes=1 << 20, max_size=1 << 40, large=True, facts=False)
    work = tempfile.mkdtemp(prefix=".pack-source-", dir=folder)
    sinks = {f.name: ColumnSink(work, f.name, f.type) for f in schema}
    try:
        listed = _List(os.path.join(work, "labels.i32"))
        try:
            chunk: list = []
            for obj in iter_objects(store, stats=listed.stats):
                chunk.append(obj)
                if len(chunk) >= _CHUNK:
                    listed.add(chunk, denied, sinks)
                    chunk = []
            listed.add(chunk, denied, sinks)
        except UserError:
            raise
        except Exception as exc:
            raise UserError(f"{url}: cannot list the prefix: {classify(url, exc).detail}") from None
        if not listed.rows:
            raise UserError(f"{url}: no media object to pack under the prefix ({listed.stats.objects} objects listed)")
        classes = listed.labels_into(sinks["label"])
        for sink in sinks.values():
            sink.finish()
        # no local path in it (the scan results' is in the summary's note): the same listing gives the same
        # bytes on any machine, so a pack to a bucket is resumed from anywhere (its identity)
        meta = make_meta("/", classes, "folder" if classes else "none", listed.rows, None)
        meta["root"] = url  # the objects' prefix: a URL, never its options
        meta.pop("created", None)
        out = os.path.join(folder, SOURCE_INDEX)
        with atomic_output(out) as tmp:
            write_one_batch(
                tmp, schema.with_metadata({META_KEY: json.dumps(meta).encode("ascii")}), list(sinks.values())
            )
    finally:
        for sink in sinks.values():
            sink.close()
        shutil.rmtree(work, ignore_errors=True)
    log.info("%s: %d objects indexed for packing, %d left out", url, listed.rows, listed.left_out)
    return out, {"bad": listed.left_out, "results": results, "objects": listed.stats.objects}


class _List:
    """The listing as it streams into the column files; labels kept aside (4 bytes an object) until the
    class list is known: ImageFolder labels (the first "folder" of each key) when every object is in one."""

    def __init__(self, labels_path: str) -> None:
        self.stats = ListingStats()
        self.rows = self.left_out = 0
        self.classes: dict[str, int] = {}  # first "folder" -> label, in the order seen (few: they are classes)
        self.in_folders = True
        self.labels_path = labels_path
        self.labels = open(labels_path, "wb")  # noqa: SIM115 (closed in labels_into)

    def add(self, chunk: list, denied: pa.Array, sinks: dict) -> None:
        """A chunk of listed objects, less the denied, to the columns."""
        if not chunk:
            return
        rel = pa.array([o.rel for o in chunk], pa.string())
        keep = pc.invert(pc.is_in(rel, value_set=denied)).to_pylist() if len(denied) else [True] * len(chunk)
        kept = [o for o, k in zip(chunk, keep) if k]
        self.left_out += len(chunk) - len(kept)
        labels = np.empty(len(kept), np.int32)
        for i, o in enumerate(kept):
            if o.size is None or o.mtime_ns is None:  # the check against the index needs them
                raise UserError(f"{o.rel}: the listing gives no size or time for this object; pack cannot check it")
            top, sep, _ = o.rel.partition("/")
            if not sep:
                self.in_folders = False
                self.classes.clear()
            if not self.in_folders:  # no labels: no more classes kept (memory bounded whatever the layout)
                labels[i] = -1
                continue
            labels[i] = self.classes.setdefault(top, len(self.classes))
            if len(self.classes) > MAX_CLASSES:
                log.warning(
                    "more than %d first folders (e.g. an <id>/file layout): they are not classes; no labels",
                    MAX_CLASSES,
                )
                self.in_folders = False
                self.classes.clear()
        sinks["path"].append(pa.array([o.rel.encode("utf-8", "surrogateescape") for o in kept], pa.large_binary()))
        sinks["kind"].append(pa.array([KIND_CODE[kind_of(format_of_name(o.rel) or "")] for o in kept], pa.int8()))
        sinks["size"].append(pa.array([o.size for o in kept], sinks["size"].type))
        sinks["mtime_ns"].append(pa.array([o.mtime_ns for o in kept], pa.int64()))
        self.labels.write(labels.tobytes())
        self.rows += len(kept)

    def labels_into(self, sink) -> list[str]:
        """Append the label column (class ids in sorted class order, or -1 everywhere); the class list."""
        self.labels.close()
        names = sorted(self.classes) if self.in_folders else []
        remap = np.full(len(self.classes) + 1, -1, np.int32)  # (index -1: an object outside any folder)
        for label, name in enumerate(names):
            remap[self.classes[name]] = label
        ids = np.memmap(self.labels_path, np.int32, "r") if self.rows and names else np.zeros(0, np.int32)
        for lo in range(0, self.rows, _CHUNK):
            n = min(_CHUNK, self.rows - lo)
            sink.append(pa.array(remap[np.asarray(ids[lo : lo + n])] if names else np.full(n, -1, np.int32), sink.type))
        del ids
        return names
