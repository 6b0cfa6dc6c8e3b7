"""A bucket scan's report: its results found by the prefix's URL, and the shown objects' bytes for thumbnails.

``dsclean report s3://BUCKET/PREFIX`` reports on the prefix's last scan (the results it recorded locally,
:func:`dsclean.storage.reuse.last_results`). The objects it shows are read from the store with the
scan's storage options (its non-secret ones, recorded in its results' metadata: ``public_options``) and
the ones given again (``--storage-option``: secrets never recorded), each read retried like the
scan's (:mod:`dsclean.storage.reads`) and bounded: an object larger than the thumbnail byte limit (by
the results' size, then by the read itself, a ranged GET of at most that many bytes) is not read.
The bytes are decoded in the thumbnail workers (:mod:`.thumbs`), never here. An object the scan's
quarantine moved is read from the quarantine prefix, where its journal (local) says it is; one gone
since the scan (404) or refused (403) gets a placeholder naming its key and why. Nothing is written
to the bucket.
"""

from __future__ import annotations

import logging
import threading

from .. import reasons as R
from ..errors import UserError
from ..storage.fs import Store
from ..storage.reads import ReadPolicy, classify, http_status, quiet_store_retries, retried
from ..storage.urls import is_url, normalize, public_options, scrub
from .source import safe_rel

log = logging.getLogger("dsclean.report.remote")

#: reads in a row that failed past their retries (not a 404 or 403) after which the store is not asked again
GIVE_UP_AFTER = 3


def last_bucket_results(url: str, state_dir: str | None) -> str:
    """The results file of the last scan of the storage URL ``url`` recorded here, or a UserError."""
    from ..storage.reuse import last_results

    found = last_results(normalize(url), state_dir)
    if found is None:
        raise UserError(f"no scan of {url} is recorded here (dsclean scan {url} first; --state-dir?)")
    return found


def merged_options(recorded: object, given: dict) -> dict:
    """The scan's recorded (non-secret) storage options, with the ones given now on top (nested groups merged)."""
    base = public_options(recorded) if isinstance(recorded, dict) else {}
    return _merge(base, given)


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class BucketObjects:
    """Where each shown object of a bucket scan is now (in place, or in the scan's quarantine), and a bounded
    read of its bytes (:data:`dsclean.report.thumbs.Fetch`)."""

    def __init__(
        self,
        url: str,
        options: dict,
        quarantine: str | None,
        state_dir: str | None,
        max_bytes: int,
        policy: ReadPolicy = ReadPolicy(),
    ) -> None:
        self.store = Store(url, dict(options))
        self.quarantine = normalize(quarantine) if isinstance(quarantine, str) and is_url(quarantine) else None
        self.state_dir, self.max_bytes, self.policy = state_dir, max_bytes, policy
        self._where: dict[str, tuple[Store, str, str]] = {}  # source URL -> (store, key in it, the object's key)
        self._stores: dict[str, Store] = {self.store.url: self.store}
        self._lock = threading.Lock()
        self._failing: list[str] = []  # the last reads in a row that failed past their retries (why)

    def locate(self, rels: set[str]) -> dict[str, str]:
        """The URL to read each of ``rels`` (keys relative to the scanned prefix) from: the quarantine's copy
        for an object the journal says was moved there (and not restored), else the object itself."""
        moved = self._quarantined(rels)
        found: dict[str, str] = {}
        for rel in rels:
            if not safe_rel(rel):
                continue
            store, key = moved.get(rel, (self.store, rel))
            source = store.url_of(key)
            self._where[source] = (store, key, rel)
            found[rel] = source
        return found

    def _quarantined(self, rels: set[str]) -> dict[str, tuple[Store, str]]:
        """Objects of ``rels`` the scan's bucket quarantine holds now, by its local journal."""
        if self.quarantine is None or not rels:
            return {}
        from ..storage.quarantine import held

        out: dict[str, tuple[Store, str]] = {}
        try:
            for entry in held(self.quarantine, self.state_dir):
                src, dst, qroot = entry.get("src"), entry.get("dst"), entry.get("qroot")
                if entry.get("root") != self.store.url or src not in rels or not safe_rel(dst):
                    continue
                if not (isinstance(qroot, str) and is_url(qroot)) or normalize(qroot) != self.quarantine:
                    continue
                out[src] = (self._store(self.quarantine), dst)
        except OSError as exc:  # an unreadable journal: the objects are looked for in place only
            log.warning("quarantine journal of %s not read: %s", self.quarantine, exc)
        return out

    def _store(self, url: str) -> Store:
        if url not in self._stores:
            self._stores[url] = Store(url, self.store.options)
        return self._stores[url]

    def fetch(self, source: str, size: int | None) -> tuple[bytes | None, str]:
        """The object's bytes and a note (empty, or what changed since the scan); or None and why not."""
        store, key, rel = self._where[source]
        moved = store is not self.store
        where = f"{rel} (in the quarantine {store.url})" if moved else rel
        if size is not None and size > self.max_bytes:
            return None, f"not read for a thumbnail: {size:,} bytes, over the {self.max_bytes:,}-byte limit"
        with self._lock:
            if len(self._failing) >= GIVE_UP_AFTER:  # an unreachable store: do not spend the retries on every object
                return None, f"{where}: not read: the {GIVE_UP_AFTER} reads before it failed ({self._failing[-1]})"
        try:
            fs = store.fs
            quiet_store_retries(fs, store.scheme)
            path, end = store.path(key), self.max_bytes + 1
            extra = {"max_concurrency": 1} if store.scheme in ("s3", "s3a") else {}
            data = retried(lambda: fs.cat_file(path, start=0, end=end, **extra), key, self.policy)
        except UserError as exc:
            return None, f"{where}: not read: {exc}"
        except Exception as exc:
            err = classify(key, exc)
            if err.reason == R.VANISHED:
                return None, f"{where}: not found in the bucket (404): deleted or moved since the scan"
            why = scrub(err.detail, store.options)
            if http_status(exc) not in (401, 403):
                with self._lock:
                    self._failing.append(why[:200])
            return None, f"{where}: not read: {why}"
        with self._lock:
            self._failing.clear()
        if len(data) > self.max_bytes:
            return (
                None,
                f"not read for a thumbnail: over the {self.max_bytes:,}-byte limit now (changed since the scan)",
            )
        notes = [f"read from the quarantine {store.url}"] if moved else []
        if size is not None and len(data) != size:
            notes.append(f"the object changed since the scan: {len(data):,} bytes now, {size:,} when scanned")
        return data, "; ".join(notes)
