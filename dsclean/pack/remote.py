"""A pack in a bucket: ``dsclean pack ... -o s3://BUCKET/SHARDS`` and ``dsclean verify s3://BUCKET/SHARDS``.

Writing: the local packer builds the pack in a staging folder (the output URL's local state folder,
:func:`dsclean.locations.url_state_dir`, never the bucket); each shard is uploaded whole as soon as it is
finished (a PUT is atomic per object; s3fs uploads a big one in parts, completed at once) and its local
copy removed (:class:`BucketShards`, the packer's ``shard_sink``); then the packed index, the shard list
and, LAST, ``pack.json``, so a reader never finds a ``pack.json`` naming shards that are not there yet.
A killed pack is resumed by the same command: the shards in the bucket are read back instead of written
again, a shard left in the staging folder is uploaded (not if the bucket has the same bytes: size and MD5
ETag), the rest is written. Nothing is written outside the output prefix; the staging folder is removed
once the bucket holds the whole pack.

Verifying: the set's metadata is downloaded into a temp folder, then the shards, ``jobs`` at a time, each
checked by the local :func:`.verify.verify_shards` and removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from typing import Any, Callable

from .. import locations
from ..atomic import atomic_output
from ..errors import UserError
from ..storage.fs import Store
from ..storage.reads import ReadPolicy, classify, quiet_store_retries, retried
from ..storage.urls import is_url, normalize

log = logging.getLogger("dsclean.pack.remote")

#: the set's own files, uploaded after the shards in this order (``pack.json`` last)
METADATA = (
    locations.DENYLIST_FILE,
    locations.PACKED_INDEX_FILE,
    locations.SHARD_LIST_FILE,
    locations.PACK_STATE_FILE,
)
STAGING = "pack-staging"
#: beside the staging folder: the names this pack put (or was putting) in the bucket, each journaled before
#: its upload; with no ``pack.json`` in the prefix yet, only these objects are this pack's (a killed run's)
UPLOADED = "pack-uploaded.txt"
PROBE = ".dsclean-write-check"  # an empty object a fresh pack writes and removes: the prefix is writable


def staging_folder(url: str, state_dir: str | None = None) -> str:
    """Where a pack to ``url`` is built before it is uploaded (the URL's local state folder)."""
    return os.path.join(locations.url_state_dir(normalize(url), state_dir), STAGING)


def uploaded_record(staging: str) -> str:
    """The journal of the names this pack put in the bucket (:data:`UPLOADED`)."""
    return os.path.join(os.path.dirname(staging), UPLOADED)


def _our_uploads(staging: str) -> set[str]:
    try:
        with open(uploaded_record(staging), encoding="utf-8") as f:
            return {line.rstrip("\n") for line in f if line.strip()}
    except FileNotFoundError:
        return set()


def _journal_upload(staging: str, name: str) -> None:
    """Record ``name`` as this pack's before it is uploaded (a kill after the PUT leaves it recorded)."""
    with open(uploaded_record(staging), "a", encoding="utf-8") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())


def bucket_of(store: Store) -> str:
    """The bucket (container) part of the store's root."""
    return store.root.split("/", 1)[0]


def require_bucket(store: Store) -> None:
    """A clear error naming the URL when the bucket does not exist (or cannot be looked up)."""
    bucket = bucket_of(store)
    try:
        there = retried(lambda: store.fs.exists(bucket), bucket, ReadPolicy())
    except Exception as exc:
        raise UserError(
            f"{store.url_of('')}: cannot reach the bucket {bucket}: {classify(bucket, exc).detail}"
        ) from None
    if not there:
        raise UserError(
            f"{store.url_of('')}: no such bucket ({bucket}); check the URL and --storage-option endpoint_url"
        )


def list_prefix(store: Store) -> dict[str, int | None]:
    """The names directly under the prefix: an object's size, None for a "folder" (the listing's error named)."""
    cut = len(store.root) + 1
    try:
        found = retried(lambda: store.fs.ls(store.root, detail=True, refresh=True), "list", ReadPolicy())
    except FileNotFoundError:
        return {}
    except Exception as exc:
        if classify("", exc).reason != "vanished":
            raise _fail(store, "", exc, "list the prefix") from None
        return {}
    out: dict[str, int | None] = {}
    for i in found:
        name = str(i["name"]).rstrip("/")[cut:]
        if name:
            out[name] = int(i.get("size") or 0) if i.get("type") == "file" else None
    return out


def check_output_prefix(store: Store, staging: str) -> None:
    """Before anything is packed: the bucket exists and the prefix is empty, holds a dsclean pack
    (``pack.json``), or holds only objects this pack uploaded (a killed run's, :data:`UPLOADED`), as a
    local ``-o`` folder must be empty or a pack to resume. The user's objects are never written over."""
    require_bucket(store)
    there = list_prefix(store)
    if locations.PACK_STATE_FILE in there:
        return  # a pack: refuse_other_pack / the packer's pack.json check decide
    ours = _our_uploads(staging)
    others = sorted(n for n in there if n not in ours)
    if others:
        raise UserError(
            f"{store.url_of('')}: is not empty ({len(others)} entries, e.g. {others[0]!r}) and holds no "
            "dsclean pack (no pack.json); -o must be an empty prefix or a pack to resume"
        )
    if not there:
        _probe_write(store, staging)


def _probe_write(store: Store, staging: str) -> None:
    """A fresh pack: an empty object written (journaled first) and removed, so credentials that cannot
    write the prefix are an error before a shard is packed, not after."""
    _journal_upload(staging, PROBE)
    try:
        retried(lambda: store.fs.pipe_file(store.path(PROBE), b""), PROBE, ReadPolicy())
    except Exception as exc:
        raise UserError(
            f"{store.url_of('')}: cannot write to the prefix: {classify(store.url_of(PROBE), exc).detail}"
        ) from None
    try:
        retried(lambda: store.fs.rm_file(store.path(PROBE)), PROBE, ReadPolicy())
    except Exception as exc:  # (journaled as this pack's: it blocks nothing; verify ignores it)
        log.warning("%s: could not remove the write check: %s", store.url_of(PROBE), classify(PROBE, exc).detail)


def open_store(url: str, options: dict) -> Store:
    store = Store(url, options)
    quiet_store_retries(store.fs, store.scheme)
    return store


def _fail(store: Store, rel: str, exc: BaseException, doing: str) -> UserError:
    return UserError(f"{store.url_of(rel)}: cannot {doing}: {classify(store.url_of(rel), exc).detail}")


def refuse_other_pack(store: Store, staging: str) -> None:
    """A prefix holding another pack (its ``pack.json`` records another source or layout) is refused, as
    a local folder holding another pack is."""
    try:
        there = retried(lambda: store.fs.cat_file(store.path(locations.PACK_STATE_FILE)), "pack.json", ReadPolicy())
    except FileNotFoundError:
        return
    except Exception as exc:
        if classify("", exc).reason == "vanished":
            return
        raise _fail(store, locations.PACK_STATE_FILE, exc, "read it") from None
    try:
        theirs = json.loads(there)
        with open(os.path.join(staging, locations.PACK_STATE_FILE), encoding="utf-8") as f:
            ours = json.load(f)
    except (OSError, ValueError):
        return  # nothing staged yet (a pack of --from) or an unreadable one: the upload replaces it
    same = isinstance(theirs, dict) and all(theirs.get(k) == ours.get(k) for k in ("source", "layout") if k in ours)
    if not same:
        raise UserError(
            f"{store.url_of(locations.PACK_STATE_FILE)}: the prefix holds another pack (another source or "
            "options); give an empty prefix, or the same source and options to resume"
        )


def upload_pack(staging: str, store: Store) -> tuple[int, int]:
    """Upload the pack in ``staging`` to ``store``'s prefix, ``pack.json`` last; ``(uploaded, already there)``."""
    names = sorted(
        e.name
        for e in os.scandir(staging)
        if e.is_file(follow_symlinks=False) and not e.name.startswith(".") and not e.name.startswith("pack.part-")
    )
    shards = [n for n in names if n not in METADATA]
    meta = [n for n in METADATA if n in names]
    uploaded = skipped = 0
    for name in shards + meta:
        local = os.path.join(staging, name)
        if name in shards and _same_object(store, name, local):
            skipped += 1
            continue
        _journal_upload(staging, name)
        try:
            retried(lambda: store.fs.put_file(local, store.path(name)), name, ReadPolicy())  # noqa: B023
        except Exception as exc:
            raise _fail(store, name, exc, "upload it") from None
        uploaded += 1
        log.debug("uploaded %s", store.url_of(name))
    return uploaded, skipped


def _same_object(store: Store, name: str, local: str) -> bool:
    """The object ``name`` holds the bytes of ``local`` (same size and, for a single-part upload, MD5)."""
    try:
        info = retried(lambda: store.fs.info(store.path(name)), name, ReadPolicy())
    except FileNotFoundError:
        return False
    except Exception as exc:
        if classify(name, exc).reason == "vanished":
            return False
        raise _fail(store, name, exc, "look it up") from None
    if info.get("size") != os.path.getsize(local):
        return False
    etag = str(info.get("ETag") or "").strip('"')
    if not etag or "-" in etag:  # a multipart upload's ETag is not an MD5: the size has to do
        return True
    h = hashlib.md5(usedforsecurity=False)
    with open(local, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest() == etag


class BucketShards:
    """The packer's shard sink for a bucket prefix (``PackOptions.shard_sink``): each finished shard is
    uploaded whole and its local copy removed, so the staging folder holds the shards being written only.
    Before the first shard goes up, a prefix holding another pack is refused."""

    def __init__(self, store: Store, staging: str) -> None:
        self.store, self.staging = store, staging
        self._there: dict[str, int] | None = None

    def _listing(self) -> dict[str, int]:
        """The prefix's objects that are this pack's: all of them under its ``pack.json``, else those the
        local journal says this pack uploaded (:data:`UPLOADED`); never a foreign object of the same name."""
        if self._there is None:
            refuse_other_pack(self.store, self.staging)
            found = list_prefix(self.store)
            ours = None if locations.PACK_STATE_FILE in found else _our_uploads(self.staging)
            self._there = {n: s for n, s in found.items() if s is not None and (ours is None or n in ours)}
        return self._there

    def has(self, name: str) -> bool:
        """A shard of this pack is already in the bucket (a killed run uploaded it; a PUT is whole or absent)."""
        return name in self._listing()

    def put(self, path: str, name: str) -> None:
        self._listing()
        _journal_upload(self.staging, name)
        try:
            retried(lambda: self.store.fs.put_file(path, self.store.path(name)), name, ReadPolicy())
        except Exception as exc:
            raise _fail(self.store, name, exc, "upload it") from None
        log.debug("uploaded %s", self.store.url_of(name))

    def get(self, name: str, path: str) -> None:
        try:
            retried(lambda: self.store.fs.get_file(self.store.path(name), path), name, ReadPolicy())
        except Exception as exc:
            raise _fail(self.store, name, exc, "read it back") from None


def pack_to_bucket(run: Callable[[str, Any], Any], url: str, storage_options: dict, state_dir: str | None = None):
    """``run(staging, sink)`` packs into the staging folder (each finished shard handed to ``sink``, a
    :class:`BucketShards`) and returns its summary; then what is left in the staging folder is uploaded
    (``pack.json`` last) and the folder removed. The summary's ``output`` becomes the URL."""
    url = normalize(url)
    store = open_store(url, storage_options)
    staging = staging_folder(url, state_dir)
    os.makedirs(os.path.dirname(staging), exist_ok=True)
    check_output_prefix(store, staging)
    adopted = _adopt_record(store, staging)
    _refuse_orphan_uploads(staging, url, adopted)
    try:
        summary = run(staging, BucketShards(store, staging))
    except UserError as exc:
        if adopted:  # the bucket's pack is not this one: its record does not stay here to block another
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(staging, locations.PACK_STATE_FILE))
        put = sorted(_our_uploads(staging) - {PROBE})
        killed = put or any(
            os.path.exists(os.path.join(staging, n)) for n in (locations.PACK_STATE_FILE, locations.REPACK_STATE_FILE)
        )
        if adopted or not killed:
            raise UserError(str(exc).replace(staging, url)) from None
        if not put:  # nothing of it is in the bucket: its staging folder is all there is
            raise UserError(  # a killed run's staging folder, of another source (the prefix changed) or options
                f"{str(exc).replace(staging, url)} (the unfinished pack's local staging folder {staging}: remove it "
                "to start this pack over)"
            ) from None
        raise UserError(  # a killed run's local state and objects, of another source or options
            f"{str(exc).replace(staging, url)} (the unfinished pack's local staging folder {staging}; "
            f"{uploaded_record(staging)} lists the {len(put)} objects it put at {url}: to start this pack over, "
            f"remove those objects from the bucket, then the folder {os.path.dirname(staging)}; removing the "
            "staging folder alone is not enough)"
        ) from None
    if (
        getattr(summary, "complete", True)
        and not getattr(summary, "failures", None)
        and not getattr(summary, "signal", 0)
    ):
        refuse_other_pack(store, staging)
        uploaded, skipped = upload_pack(staging, store)
        if hasattr(summary, "notes"):
            summary.notes.append(
                f"uploaded to {url}: the shards as they were written, then {uploaded} files "
                f"({skipped} shards were already there), pack.json last"
            )
        shutil.rmtree(staging)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(uploaded_record(staging))  # the bucket's pack.json vouches for its objects from now on
    summary.output = url
    return summary


def _refuse_orphan_uploads(staging: str, url: str, adopted: bool) -> None:
    """A killed run's uploads whose local state is gone (its staging folder removed by hand): what options and
    source made them is no longer known, so they are not reused as this run's shards; the way to start over."""
    if adopted or any(
        os.path.exists(os.path.join(staging, n)) for n in (locations.PACK_STATE_FILE, locations.REPACK_STATE_FILE)
    ):
        return
    put = sorted(_our_uploads(staging) - {PROBE})
    if put:
        raise UserError(
            f"{url}: an unfinished pack put {len(put)} objects there (listed in {uploaded_record(staging)}), but its "
            f"record of what they hold ({locations.PACK_STATE_FILE} or {locations.REPACK_STATE_FILE} in the staging "
            f"folder {staging}) is gone: they may hold other samples or options than this run's, so they are not "
            f"reused. To start this pack over, remove those objects from the bucket, then the folder "
            f"{os.path.dirname(staging)}"
        )


def pack_url(index: str, output: str, options: Any, pack: Callable[..., Any]) -> Any:
    """:func:`.packer.pack_shards` (``pack``) with a bucket prefix as the source or the output (or both)."""
    from dataclasses import replace

    from .bucketsource import bucket_index

    storage, state_dir = options.storage_options, options.state_dir
    remote_out = is_url(output) and not output.startswith("file://")
    if remote_out and options.part is not None:
        raise UserError("--part and --finish write a pack in a shared folder: a pack to a bucket is one command")
    note = None
    if is_url(index) and not index.startswith("file://"):
        _refuse_inside(output, normalize(index), index)
        source = normalize(index)
        index, left = bucket_index(index, storage, state_dir)
        options = replace(options, source_name=source)  # pack.json records the URL, not the local listing index
        note = (
            f"{left['bad']} objects left out: found bad by the last scan of the prefix, or warned about with a "
            f"reason an index leaves out ({left['results']})"
        )
    else:
        _refuse_inside(output, _recorded_root(index), index)
    if remote_out:
        summary = pack_to_bucket(
            lambda staging, sink: pack(index, staging, replace(options, shard_sink=sink)), output, storage, state_dir
        )
    else:
        summary = pack(index, output, options)
    if note:
        summary.notes.insert(0, note)
    return summary


def _recorded_root(index: str) -> str | None:
    """The root an index records (a URL for an index of a bucket prefix), None if it cannot be read here
    (the packer names that error)."""
    from ..index.store import read_meta

    try:
        return str(read_meta(os.path.abspath(index))["root"])
    except (UserError, OSError, KeyError, ValueError, TypeError):
        return None


def _refuse_inside(output: str, root: str | None, source: str) -> None:
    """dsclean never writes into the data it packs: ``output`` inside ``root`` (a URL, or a ``file://`` root
    against a local ``-o``) is refused before anything is read or written."""
    if not root:
        return
    if is_url(root) and not root.startswith("file://"):
        if not (is_url(output) and not output.startswith("file://")):
            return
        out, base = normalize(output), normalize(root)
    else:
        base = root[len("file://") :] if root.startswith("file://") else root
        out = output[len("file://") :] if output.startswith("file://") else output
        if is_url(out):
            return
        base, out = os.path.abspath(base), os.path.abspath(out)
    if out == base or out.startswith(base.rstrip("/") + "/"):
        raise UserError(
            f"{output}: is inside the prefix {root} that {source} packs; dsclean never writes into the data it "
            "packs: choose a prefix outside it"
        )


def _adopt_record(store: Store, staging: str) -> bool:
    """A pack already in the bucket and no staging folder (it finished, or another machine ran it): its
    ``pack.json`` becomes the staging folder's, so the same command resumes that pack (its recorded seed
    and names) and a different one is refused, as a local folder's ``pack.json`` does. True if adopted."""
    if os.path.exists(os.path.join(staging, locations.PACK_STATE_FILE)):
        return False
    try:
        data = retried(lambda: store.fs.cat_file(store.path(locations.PACK_STATE_FILE)), "pack.json", ReadPolicy())
    except Exception as exc:
        if isinstance(exc, FileNotFoundError) or classify("", exc).reason == "vanished":
            return False
        raise _fail(store, locations.PACK_STATE_FILE, exc, "read it") from None
    os.makedirs(staging, exist_ok=True)
    with atomic_output(os.path.join(staging, locations.PACK_STATE_FILE)) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return True


def has_pack(url: str, storage_options: dict) -> bool:
    """Whether the prefix ``url`` holds a dsclean pack (its ``pack.json``, packed index or shard list)."""
    store = open_store(url, storage_options)
    for name in (locations.PACK_STATE_FILE, locations.SHARD_LIST_FILE, locations.PACKED_INDEX_FILE):
        try:
            if retried(lambda: store.fs.exists(store.path(name)), name, ReadPolicy()):  # noqa: B023
                return True
        except Exception as exc:
            raise _fail(store, name, exc, "look it up") from None
    require_bucket(store)  # "no such bucket", not "not a shard set"
    return False


class _Fetcher:
    """Brings one shard of the prefix into the local folder at a time (:func:`.verify.verify_shards`)."""

    def __init__(self, store: Store, folder: str) -> None:
        self.store, self.folder = store, folder

    def get(self, name: str) -> None:
        if "/" in name or name.startswith("."):
            return  # a shard list naming a path outside the prefix: never fetched (verify reports it missing)
        try:
            retried(
                lambda: self.store.fs.get_file(self.store.path(name), os.path.join(self.folder, name)),
                name,
                ReadPolicy(),
            )
        except Exception as exc:
            if classify(name, exc).reason == "vanished":
                return  # verify reports the shard missing
            raise _fail(self.store, name, exc, "read the shard") from None

    def drop(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.folder, name))

    def names(self) -> list[str]:
        """The names directly under the prefix (at most the shards and the set's files)."""
        cut = len(self.store.root) + 1
        try:
            found = retried(lambda: self.store.fs.ls(self.store.root, detail=False, refresh=True), "list", ReadPolicy())
        except Exception as exc:
            raise _fail(self.store, "", exc, "list the prefix") from None
        return sorted(str(p)[cut:] for p in found if str(p)[cut:] and "/" not in str(p)[cut:])


def verify_bucket(url: str, storage_options: dict, verify_shards: Callable[..., Any], *, jobs: int = 1, decode=None):
    """``verify_shards`` (:func:`.verify.verify_shards`) of the dsclean pack under the prefix ``url``;
    ``report.folder`` is the URL."""
    url = normalize(url)
    store = open_store(url, storage_options)
    folder = tempfile.mkdtemp(prefix="dsclean-verify-")
    try:
        for name in METADATA:
            try:
                retried(lambda: store.fs.get_file(store.path(name), os.path.join(folder, name)), name, ReadPolicy())  # noqa: B023
            except Exception as exc:
                if classify(name, exc).reason != "vanished":
                    raise _fail(store, name, exc, "read it") from None
        report = verify_shards(folder, jobs=jobs, decode=decode, fetch=_Fetcher(store, folder))
        report.folder = url
        if report.denylist:
            report.denylist["path"] = store.url_of(locations.DENYLIST_FILE)
        report.notes = [n.replace(folder, url) for n in report.notes]
        report.problems = [p.replace(folder, url) for p in report.problems]
        return report
    finally:
        shutil.rmtree(folder, ignore_errors=True)
