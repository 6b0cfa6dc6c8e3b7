"""Quarantine in a bucket: copy to the quarantine prefix, verify the copy, delete the original; journaled.

The write-ahead journal is the local quarantine's (:mod:`dsclean.scanning.quarantine.journal`), kept in
the state folder of the quarantine URL (``<state>/urls/<hash>/manifest.jsonl``; never in the bucket)::

    0. check: the source is the checked object, nothing is at the destination key
    1. append {"op": "move", "id", "root": URL, "src": key, "qroot": URL, "dst": key, "size", "etag",
       "dst_free": true}, fsync  (a refused check: "dst_free": false, then at once an abort with why)
    2. the destination checked free again, copy src -> dst (server side), check the copy's size (and ETag,
       when single-part) against what was checked; on Azure, whose Copy Blob may answer before the copy is
       done, first wait until the copy's ``x-ms-copy-status`` is ``success`` (failed, aborted: not whole)
    3. delete src
    4. append {"op": "done", "id"} (or {"op": "abort", "id", "error"})

``dst_free`` is the journal's promise that the destination key was empty when the intent was written:
an object found there later is this move's copy. A kill -9 between any two steps leaves an intent without
outcome; :func:`recover` (run by every bucket scan and restore first, and by ``dsclean recover URL``)
finishes it (the copy is whole: delete the original, if it is still the checked object) or reverts it
(no whole copy: delete the partial copy, the original stays), so every object ends in exactly one place.
It never deletes or overwrites an object dsclean did not write: an intent without ``dst_free`` (refused,
or an older journal's) leaves whatever is at the destination alone. A restore is the same steps the
other way (op ``"restore"``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

from .. import locations
from ..errors import UserError
from ..scanning.quarantine.journal import (
    Journal,
    JournalState,
    RecoveryReport,
    fold_journal,
    in_quarantine,
    journal_tags,
    locked_journal,
    manifest_path,
    safe_rel,
)
from .fs import BACKENDS, Store
from .listing import MAX_KEY, key_bytes
from .reads import ReadPolicy, describe, http_status, retried

log = logging.getLogger("dsclean.storage.quarantine")


def journal_dir(qurl: str, state_dir: str | None = None) -> str:
    """The local folder of a bucket quarantine's journal."""
    return locations.url_state_dir(qurl, state_dir)


def _fault(step: str) -> None:
    """Test-only kill points (inert unless DSCLEAN_TEST_FAULTS=1): ``DSCLEAN_TEST_KILL_AT=copied:N`` kills
    this process with SIGKILL right after the N-th verified copy (the crash-consistency test)."""
    if os.environ.get("DSCLEAN_TEST_FAULTS") != "1":
        return
    at = os.environ.get("DSCLEAN_TEST_KILL_AT", "")
    name, _, count = at.partition(":")
    if name == step:
        _fault_counts[step] = _fault_counts.get(step, 0) + 1
        if str(_fault_counts[step]) == count:
            os.kill(os.getpid(), signal.SIGKILL)


_fault_counts: dict[str, int] = {}


class MoveError(Exception):
    """A move that did not happen (the original stays); the journal says abort with this message."""


@dataclass
class ObjInfo:
    size: int | None
    etag: str | None


def _info(store: Store, rel: str, policy: ReadPolicy) -> ObjInfo | None:
    fs = store.fs
    try:
        info = retried(lambda: fs.info(store.path(rel)), rel, policy)
    except FileNotFoundError:
        return None
    if info.get("type") not in (None, "file"):
        return None
    # S3's (single-part) ETag is the content's MD5: a copy has the same. GCS's and Azure's are per write (a
    # copy gets a new one): there the size alone says whether a copy is whole
    etag = (info.get("ETag") or info.get("etag")) if store.scheme in ("s3", "s3a") else None
    return ObjInfo(info.get("size"), etag.strip('"') if isinstance(etag, str) else None)


def same_object(a: ObjInfo | None, size: Any, etag: Any) -> bool:
    """Whether ``a`` is the journaled object: same size, and same ETag unless either is multipart
    (a multipart ETag depends on the part size: a copy may get another one)."""
    if a is None or a.size != size:
        return False
    if isinstance(etag, str) and a.etag and "-" not in etag and "-" not in a.etag:
        return a.etag == etag
    return True


class BucketQuarantine:
    """Journaled moves from a scanned prefix to a quarantine prefix; open it as a context manager."""

    def __init__(
        self,
        source: Store,
        quarantine: Store,
        state_dir: str | None = None,
        policy: ReadPolicy = ReadPolicy(),
        tag: str = "",
    ) -> None:
        if source.scheme != quarantine.scheme:
            raise UserError(f"--quarantine {quarantine.url}: must be on the same storage as {source.url}")
        self.source, self.q, self.policy = source, quarantine, policy
        self.tag = tag  # a job array's part ('.part-0003-of-0016') has a journal of its own, as a local part has
        self.dir = journal_dir(quarantine.url, state_dir)
        self._stack = contextlib.ExitStack()
        self.journal: Journal | None = None
        self.recovery = RecoveryReport()
        self.moved_ids: set[str] = set()  # moves of this run (the problems file lists earlier ones apart)
        self.moved_keys: set[str] = set()  # their keys: a manifest naming a key twice moves it once

    def __enter__(self) -> "BucketQuarantine":
        os.makedirs(self.dir, exist_ok=True)
        self.journal = self._lock_own()
        self.recovery = recover_locked(self.journal, self.dir, self.q, self.policy, self._store_of, self.tag)
        for tag in _tags(self.dir):  # the other journals (a whole scan's, job-array parts') that no run holds now:
            if tag == self.tag:  # a killed run's half-done moves are finished or reverted by the next run of any
                continue
            with _gate(self.dir, tag) as held:
                if not held:  # that part is starting (or another part recovers it): never waited for
                    continue
                try:
                    with locked_journal(self.dir, tag) as journal:
                        self.recovery.add(recover_locked(journal, self.dir, self.q, self.policy, self._store_of, tag))
                except UserError:  # in use by a running part: its own run recovers it
                    continue
        return self

    def _lock_own(self) -> Journal:
        """This part's journal, locked until exit. A sibling part recovering it holds its gate and its lock for a
        while: wait for it (up to :data:`RECOVERY_WAIT`). Holding the gate, a lock held elsewhere is another run
        of this part (recoveries take the gate first): refused at once, "in use"."""
        deadline = time.monotonic() + RECOVERY_WAIT
        while True:
            with _gate(self.dir, self.tag) as held:
                if held or time.monotonic() > deadline:
                    return self._stack.enter_context(locked_journal(self.dir, self.tag))
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _store_of(self, url: str) -> Store:
        return self.source if url == self.source.url else Store(url, self.source.options)

    def move(self, rel: str, size: int | None, etag: str | None, **why: str | None) -> str:
        """Move object ``rel`` (checked with this size and ETag) to the quarantine; returns its new URL.
        Raises :class:`MoveError` (journaled as abort) when it did not move."""
        assert self.journal is not None
        if safe_rel(rel) is None:
            raise MoveError(f"{rel!r} is not a key below the prefix")
        if self.q.scheme in ("s3", "s3a") and key_bytes(self.q.path(rel).partition("/")[2]) > MAX_KEY:
            raise MoveError(
                f"{self.source.url_of(rel)}: its quarantine key would be over S3's {MAX_KEY:,} bytes: not moved "
                "(a shorter --quarantine prefix, or --denylist)"
            )
        ident = uuid.uuid4().hex
        entry = {
            "op": "move",
            "id": ident,
            "root": self.source.url,
            "src": rel,
            "qroot": self.q.url,
            "dst": rel,
            "size": size,
            "etag": etag,
            **{k: v for k, v in why.items() if k in ("kind", "reason", "detail") and v},
        }
        journaled_transfer(self.journal, entry, self.source, rel, self.q, rel, self.policy)
        self.moved_ids.add(ident)
        self.moved_keys.add(rel)
        return self.q.url_of(rel)


def _precheck(src: Store, srel: str, dst: Store, drel: str, size: Any, etag: Any, policy: ReadPolicy):
    """The source is the checked object and the destination is free (else MoveError); the source's info."""
    now = _info(src, srel, policy)
    if now is None:
        raise MoveError(f"{src.url_of(srel)} is gone: nothing to move")
    if size is not None and not same_object(now, size, etag):
        raise MoveError(f"{src.url_of(srel)} changed since it was checked (size or ETag differ): not moved")
    if _info(dst, drel, policy) is not None:
        raise MoveError(f"{dst.url_of(drel)} already exists: not overwritten, {src.url_of(srel)} not moved")
    return now


def journaled_transfer(
    journal: Journal, entry: dict, src: Store, srel: str, dst: Store, drel: str, policy: ReadPolicy
) -> None:
    """Check, journal the intent ``entry`` (saying whether the destination was free), then copy, verify,
    delete; the outcome journaled. Raises :class:`MoveError` (journaled as abort) when nothing moved."""
    ident, size, etag = entry["id"], entry.get("size"), entry.get("etag")
    try:
        try:
            now = _precheck(src, srel, dst, drel, size, etag, policy)
        except MoveError:
            raise
        except Exception as exc:  # the store would not say (403 on a HEAD, past the retries): no move
            raise MoveError(f"cannot check {src.url_of(srel)} and {dst.url_of(drel)}: {describe(exc)}") from exc
    except MoveError as exc:  # refused before anything happened: the attempt and why, for the record
        journal.append({**entry, "dst_free": False})
        _fault("journaled")
        journal.append({"op": "abort", "id": ident, "error": str(exc)})
        raise
    if size is None:  # checked without a size (a manifest's key): the journal names the object found
        entry = {**entry, "size": now.size, "etag": now.etag}
    journal.append({**entry, "dst_free": True})
    _fault("journaled")
    try:
        note = _transfer(src, srel, dst, drel, now, policy)
    except MoveError as exc:
        journal.append({"op": "abort", "id": ident, "error": str(exc)})
        raise
    except Exception as exc:  # the store failed mid-move past its retries: the intent stays for recovery
        raise MoveError(
            f"moving {src.url_of(srel)} failed midway ({describe(exc)}): the next scan or "
            "`dsclean recover` finishes or reverts it"
        ) from exc
    journal.append({"op": "done", "id": ident, **({"note": note} if note else {})})


def _transfer(src: Store, srel: str, dst: Store, drel: str, now: ObjInfo, policy: ReadPolicy) -> str | None:
    """copy, verify, delete: the object ends at ``dst`` only if the copy there is the checked object.
    Returns a note for the journal's ``done`` when the move went through in an unusual way."""
    if _info(dst, drel, policy) is not None:  # again at copy time: what appeared since the check is not ours
        raise MoveError(f"{dst.url_of(drel)} appeared since the check: not overwritten, {src.url_of(srel)} not moved")
    fs = src.fs
    try:
        retried(lambda: fs.copy(src.path(srel), dst.path(drel)), srel, policy)
    except Exception as exc:
        raise MoveError(f"copy of {src.url_of(srel)} to {dst.url_of(drel)} failed: {describe(exc)}") from exc
    status = _settled_copy(dst, drel, policy)  # Azure: done copying (the size is checked after)
    copied = _info(dst, drel, policy)
    if status not in (None, "success") or not same_object(copied, now.size, now.etag):
        _remove(dst, drel, policy)  # our own copy, not whole: the original is still there
        how = f" (copy status: {status})" if status not in (None, "success") else ""
        raise MoveError(f"the copy at {dst.url_of(drel)} does not match {src.url_of(srel)}{how}: not moved")
    _fault("copied")
    try:
        retried(lambda: fs.rm_file(src.path(srel)), srel, policy)
    except Exception as exc:
        if _info(src, srel, policy) is None:  # the delete went through and only its answer was lost: moved
            return f"the delete's answer was lost ({describe(exc)}); the original is gone: moved"
        _remove(dst, drel, policy)  # the original is still there: our copy goes
        raise MoveError(f"could not delete {src.url_of(srel)} after copying it: {describe(exc)}") from exc
    return None


#: seconds an Azure copy may stay ``pending`` before the move is given up (the original stays)
COPY_WAIT = 600.0


def _copy_status(store: Store, rel: str) -> str | None:
    """Azure: the ``x-ms-copy-status`` of the blob ``rel`` (pending, success, failed, aborted; None: not made by a
    copy, or gone). adlfs's ``info`` does not show it: one HEAD through its own blob service client."""
    from fsspec.asyn import sync

    fs = store.fs
    container, blob, _ = fs.split_path(store.path(rel))

    async def head() -> Any:
        async with fs.service_client.get_blob_client(container=container, blob=blob) as bc:
            return await bc.get_blob_properties()

    try:
        props = sync(fs.loop, head)
    except Exception as exc:
        if type(exc).__name__ == "ResourceNotFoundError" or http_status(exc) == 404:
            return None
        raise
    status = getattr(getattr(props, "copy", None), "status", None)
    return str(status) if status else None


def _settled_copy(store: Store, rel: str, policy: ReadPolicy) -> str | None:
    """The copy status of ``rel`` once it is no longer ``pending`` (Azure's Copy Blob may answer before the copy
    is done); ``"pending"`` if it still is after :data:`COPY_WAIT`. Other stores copy before answering: None."""
    if BACKENDS.get(store.scheme) != "adlfs":
        return None
    deadline, delay = time.monotonic() + COPY_WAIT, 0.1
    while True:
        status = retried(lambda: _copy_status(store, rel), rel, policy)
        if status != "pending" or time.monotonic() >= deadline:
            return status
        log.info("%s: the copy is pending; waiting %.1f s", store.url_of(rel), delay)
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def _remove(store: Store, rel: str, policy: ReadPolicy) -> None:
    with contextlib.suppress(FileNotFoundError):
        retried(lambda: store.fs.rm_file(store.path(rel)), rel, policy)


def _endpoints(entry: dict, qstore: Store, store_of: Any) -> tuple[Store, str, Store, str] | None:
    """(from store, key, to store, key) of a journaled move or restore, or None if the entry is unsafe."""
    root, qroot = entry.get("root"), entry.get("qroot")
    src, dst = safe_rel(entry.get("src")), safe_rel(entry.get("dst"))
    if not isinstance(root, str) or qroot != qstore.url or src is None or dst is None:
        return None
    original = store_of(root)
    return (original, src, qstore, dst) if entry["op"] == "move" else (qstore, dst, original, src)


def recover_locked(
    journal: Journal, folder: str, qstore: Store, policy: ReadPolicy, store_of: Any, tag: str = ""
) -> RecoveryReport:
    """Finish or revert every intent of the journal of part ``tag`` without an outcome (a killed run's)."""
    report = RecoveryReport()
    state = fold_journal(manifest_path(folder, tag), report)
    for ident, entry in state.intents.items():
        if ident in state.outcome:
            continue
        ends = _endpoints(entry, qstore, store_of)
        if ends is None:
            report.refused.append(f"journal entry {ident}: unsafe or foreign paths, not followed")
            continue
        try:
            _recover_one(journal, report, state, ident, entry, ends, policy)
        except Exception as exc:  # the store would not answer (403, 5xx past the retries): the intent stays open
            report.refused.append(f"journal entry {ident}: {describe(exc)}: left for the next recovery")
    return report


def _recover_one(
    journal: Journal,
    report: RecoveryReport,
    state: JournalState,
    ident: str,
    entry: dict,
    ends: tuple[Store, str, Store, str],
    policy: ReadPolicy,
) -> None:
    """Finish or revert one intent without an outcome (see :func:`recover_locked`)."""
    frm, frel, to, trel = ends
    size, etag = entry.get("size"), entry.get("etag")
    if entry["op"] == "restore":
        moved = state.intents.get(str(entry.get("of")), {})
        size, etag = moved.get("size"), moved.get("etag")
    at_from, at_to = _info(frm, frel, policy), _info(to, trel, policy)
    ours = entry.get("dst_free") is True  # the destination was empty when the intent was written
    if entry.get("dst_free") is False:  # refused at its check: nothing was copied, nothing is touched
        journal.append({"op": "abort", "id": ident, "error": "refused at its check; nothing moved"})
        report.reverted += 1
        return
    # whole: ours and the checked object; not known to be ours (an older journal): the very bytes (ETag)
    same = ours or (isinstance(etag, str) and at_to is not None and at_to.etag == etag)
    if at_to is not None and _settled_copy(to, trel, policy) not in (None, "success"):
        same = False  # Azure: a copy that failed, was aborted or is still pending is not whole
    if at_to is not None and same and (same_object(at_to, size, etag) if size is not None else ours):
        if at_from is not None and (size is None or same_object(at_from, size, etag)):
            _remove(frm, frel, policy)  # the copy is whole: the original goes, as the move intended
        elif at_from is not None:
            report.refused.append(
                f"journal entry {ident}: {frm.url_of(frel)} changed since it was copied: left in place"
            )
        journal.append({"op": "done", "id": ident, "recovered": True})
        report.completed += 1
    elif at_from is not None:
        if at_to is not None and ours:
            _remove(to, trel, policy)  # a partial copy of ours; the original stays
        elif at_to is not None:  # not known to be ours (an older journal): left alone
            report.refused.append(f"journal entry {ident}: {to.url_of(trel)} not known to be ours: left in place")
        journal.append({"op": "abort", "id": ident, "error": "interrupted before the copy was whole; reverted"})
        report.reverted += 1
    else:
        report.refused.append(f"journal entry {ident}: {frm.url_of(frel)} and {to.url_of(trel)} both missing")


def recover(
    qurl: str, options: dict, state_dir: str | None = None, policy: ReadPolicy = ReadPolicy()
) -> RecoveryReport:
    """``dsclean recover s3://...``: finish or revert the moves a killed run left half-done."""
    q = Store(qurl, options)
    folder = _existing(q.url, state_dir)
    report = RecoveryReport()
    for tag in _tags(folder):  # a whole scan's journal and each job-array part's
        with locked_journal(folder, tag) as journal:
            report.add(recover_locked(journal, folder, q, policy, lambda url: Store(url, options), tag))
    return report


def _existing(qurl: str, state_dir: str | None) -> str:
    folder = journal_dir(qurl, state_dir)
    if not _tags(folder):
        raise UserError(f"{qurl} is not a dsclean bucket quarantine known here (no journal in {folder}; --state-dir?)")
    return folder


#: seconds a starting part waits for sibling parts recovering its journal before it is "in use"
RECOVERY_WAIT = 30.0


@contextlib.contextmanager
def _gate(folder: str, tag: str) -> Iterator[bool]:
    """The recovery gate of part ``tag``'s journal: held by this block (True), or by another (False, not
    waited for). A part takes it to lock its own journal, a sibling to recover that journal."""
    path = os.path.join(folder, locations.tagged(locations.RECOVERY_GATE_FILE, tag))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise UserError(f"quarantine journal folder {folder} is not writable: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = True
        except BlockingIOError:
            held = False
        yield held
    finally:
        os.close(fd)  # releases the lock


def _tags(folder: str) -> list[str]:
    """The journals of a bucket quarantine: '' (a whole scan's) and one per job-array part that moved here."""
    try:
        return journal_tags(folder)
    except UserError:  # no journal at all
        return []


def restore(
    qurl: str, options: dict, state_dir: str | None = None, policy: ReadPolicy = ReadPolicy()
) -> RecoveryReport:
    """``dsclean restore s3://...``: move every quarantined object back to its key (journaled as restores)."""
    q = Store(qurl, options)
    folder = _existing(q.url, state_dir)
    stores: dict[str, Store] = {}

    def store_of(url: str) -> Store:
        return stores.setdefault(url, Store(url, options))

    report = RecoveryReport()
    for tag in _tags(folder):  # each journal's moves restored in that journal (a part's restores in its own)
        with locked_journal(folder, tag) as journal:
            report.add(recover_locked(journal, folder, q, policy, store_of, tag))
            state: JournalState = fold_journal(manifest_path(folder, tag), report)
            for ident, entry in in_quarantine(state):
                ends = _endpoints(entry, q, store_of)
                if ends is None:
                    report.refused.append(f"journal entry {ident}: unsafe or foreign paths, not restored")
                    continue
                original, src, qstore, dst = ends
                rid = uuid.uuid4().hex
                intent = {"op": "restore", "id": rid, "of": ident, "root": original.url, "src": src, "qroot": q.url}
                intent.update(dst=dst, size=entry.get("size"), etag=entry.get("etag"))
                try:
                    journaled_transfer(journal, intent, qstore, dst, original, src, policy)
                except MoveError as exc:
                    report.failed.append(str(exc))
                    continue
                report.restored += 1
    return report


def held(qurl: str, state_dir: str | None = None) -> Iterator[dict]:
    """The journal's move entries of the objects the quarantine holds now."""
    folder = journal_dir(qurl, state_dir)
    for tag in _tags(folder) or [""]:
        state = fold_journal(manifest_path(folder, tag), RecoveryReport())
        for _ident, entry in in_quarantine(state):
            yield entry


def status(qurl: str, state_dir: str | None = None):
    """``dsclean status s3://...``: what a bucket quarantine holds, by its local journal."""
    from ..scanning.quarantine.status import Status, quarantine_state
    from .urls import normalize

    url = normalize(qurl)
    st = quarantine_state(_existing(url, state_dir))
    st.quarantine = url
    return Status(url, "quarantine", quarantine=st)
