"""Re-scans of an unchanged bucket: an object whose key, ETag, size and last-modified time are those of
an ``ok`` verdict of the previous scan (same check options) is not read again; its row is reused.

Each scan leaves, beside its results, ``object_ids.npy``: one 64-bit identity (BLAKE2b of key, ETag,
size, last-modified) per results row, in row order (0 for rows never reused: not ok, or an object
without an ETag or time), and ``bucket_scan.json`` naming both and the check options. A re-scan sorts
the previous ``ok`` identities (8 bytes an object), skips listed objects found there (remembering their
identity, 8 bytes each), and at the end streams the previous results once, a batch at a time, taking the
rows of the skipped objects. No per-object Python object is kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import TYPE_CHECKING, Iterator

from .. import reasons as R
from ..atomic import atomic_output
from .listing import Obj

if TYPE_CHECKING:
    import numpy as np


log = logging.getLogger("dsclean.storage.reuse")
IDS_FILE = "object_ids.npy"
RECORD_FILE = "bucket_scan.json"
BATCH = 65_536


def identity(obj: Obj) -> int:
    """The 64-bit identity of an object as listed (0: not enough known to ever reuse it)."""
    if not obj.etag or obj.size is None or obj.mtime_ns is None:
        return 0
    raw = f"{obj.rel}\0{obj.etag}\0{obj.size}\0{obj.mtime_ns}".encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") or 1


class IdsWriter:
    """The identities of the results rows, in row order, appended as rows are written; published at close."""

    def __init__(self, folder: str, tag: str = "") -> None:
        import numpy as np

        from .. import locations

        self._np = np
        self.path = os.path.join(folder, locations.tagged(IDS_FILE, tag))  # a part's: object_ids.part-I-of-N.npy
        self._parts: list[np.ndarray] = []
        self._buf: list[int] = []
        self._raw = self.path + ".raw.tmp"
        self._f = open(self._raw, "wb")
        self.rows = 0

    def add(self, ident: int) -> None:
        self._buf.append(ident)
        if len(self._buf) >= BATCH:
            self._flush()

    def add_array(self, ids: np.ndarray) -> None:
        self._flush()
        self._f.write(ids.astype("<u8", copy=False).tobytes())
        self.rows += len(ids)

    def _flush(self) -> None:
        if self._buf:
            self._f.write(self._np.asarray(self._buf, dtype="<u8").tobytes())
            self.rows += len(self._buf)
            self._buf = []

    def close(self) -> None:
        """Publish ``object_ids.npy`` (the raw identities behind an .npy header), atomically."""
        np = self._np
        self._flush()
        self._f.close()
        try:
            with atomic_output(self.path) as tmp:
                header = np.lib.format.header_data_from_array_1_0(np.zeros(0, dtype="<u8"))
                header["shape"] = (self.rows,)
                with open(tmp, "wb") as out, open(self._raw, "rb") as raw:
                    np.lib.format.write_array_header_1_0(out, header)
                    while chunk := raw.read(1 << 20):
                        out.write(chunk)
        finally:
            os.unlink(self._raw)

    def discard(self) -> None:
        self._f.close()
        if os.path.exists(self._raw):
            os.unlink(self._raw)


class Previous:
    """The previous scan's ``ok`` identities, for :meth:`unchanged`, and its rows, for :meth:`reused_rows`."""

    def __init__(self, results: str, ids_path: str) -> None:
        import numpy as np

        self._np = np
        self.results, self.ids = results, np.load(ids_path, mmap_mode="r")
        self.ok = np.unique(self.ids[self.ids != 0])  # sorted
        self._taken: list[np.ndarray] = []
        self.count = 0

    @classmethod
    def open(cls, folder: str, options_key: str, url: str) -> "Previous | None":
        """The previous scan of ``url`` recorded in ``folder`` with the same check options, or None."""
        try:
            with open(os.path.join(folder, RECORD_FILE), encoding="utf-8") as f:
                record = json.load(f)
            if record.get("options") != options_key or record.get("url") != url:
                return None
            prev = cls(record["results"], os.path.join(folder, IDS_FILE))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.debug("no previous bucket scan to reuse in %s: %s", folder, exc)
            return None
        import pyarrow.parquet as pq

        try:
            rows = pq.ParquetFile(prev.results).metadata.num_rows
        except Exception:  # the results file is gone or damaged: check everything
            return None
        return prev if rows == len(prev.ids) else None

    def unchanged(self, objs: list[Obj]) -> tuple[list[Obj], list[int]]:
        """``objs`` split: (to check, identities of the unchanged ones, which are remembered)."""
        np = self._np
        idents = np.fromiter((identity(o) for o in objs), dtype="<u8", count=len(objs))
        pos = np.searchsorted(self.ok, idents)
        pos[pos >= len(self.ok)] = 0
        hit = (idents != 0) & (self.ok[pos] == idents) if len(self.ok) else np.zeros(len(objs), bool)
        if hit.any():
            self._taken.append(idents[hit])
            self.count += int(hit.sum())
        return [o for o, h in zip(objs, hit) if not h], [int(i) for i in idents[~hit]]

    def reused_rows(self) -> Iterator[tuple]:
        """``(rows as an Arrow batch, their identities)`` of the unchanged objects, from the previous results."""
        np = self._np
        if not self._taken:
            return
        import pyarrow.parquet as pq

        taken = np.unique(np.concatenate(self._taken))
        self._taken = []
        start = 0
        for batch in pq.ParquetFile(self.results).iter_batches(batch_size=BATCH):
            ids = np.asarray(self.ids[start : start + batch.num_rows])
            start += batch.num_rows
            mask = np.isin(ids, taken)
            if mask.any():
                yield batch.filter(mask), ids[mask]


def write_record(folder: str, url: str, results: str, options_key: str) -> None:
    with atomic_output(os.path.join(folder, RECORD_FILE)) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump({"url": url, "results": os.path.abspath(results), "options": options_key}, f)


def reusable(status: str) -> bool:
    return status == R.OK


def last_results(url: str, state_dir: str | None = None) -> str | None:
    """The results file of the last scan of ``url`` recorded in its state folder, if it still exists."""
    from .. import locations

    try:
        with open(os.path.join(locations.url_state_dir(url, state_dir), RECORD_FILE), encoding="utf-8") as f:
            results = json.load(f).get("results")
    except (OSError, ValueError, AttributeError):
        return None
    return results if isinstance(results, str) and os.path.isfile(results) else None
