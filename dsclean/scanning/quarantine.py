"""Stage 4: move bad files aside. Nothing is ever deleted, and every move is journaled.

The journal is ``<quarantine>/manifest.jsonl``. A move is three steps::

    1. append {"op": "move", "id": ..., "root": ..., "src": ..., "dst": ...}  and fsync
    2. move the file without ever replacing one: link the new name, unlink the
       old (across file systems: copy to the temp name the entry records, created
       exclusively, fsync, link into place, then remove the original)
    3. append {"op": "done", "id": ...}  and fsync

A move whose source cannot be removed afterwards (a read-only tree, another
process that moved it first) removes its own copy again: the file stays in one
place and the journal says ``abort`` with the error. Right before a move the
source's identity (size, mtime, inode, device) is compared with what was
checked: a file replaced since is not moved (:class:`ChangedError`).
A quarantine folder is bound to one root (``quarantine.json``); restore refuses
entries naming another root.

A kill -9 between any two instructions leaves the file in exactly one place
(between link and unlink: one inode, two names), or (mid cross-device copy)
the original in place plus a partial copy or a full copy. :func:`recover` looks at the disk for each move without an outcome and
finishes or reverts it: original only -> "abort" (the journaled temp copy goes);
copy only -> "done"; both, byte-identical -> remove the original, "done".
:func:`restore` moves files back with the same journaled protocol
(op "restore"), refusing entries that would land outside their root.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import filecmp
import json
import os
import shutil
import stat
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator

from .. import locations
from ..atomic import fsync_dir, remove_stale_temps
from ..errors import UserError
from .discover import QUARANTINE_MARKER

PARTIAL_SUFFIX = ".dsclean-partial"
#: in a quarantine folder: the root its files came from (one root per folder)
BINDING_FILE = "quarantine.json"

#: (size, mtime_ns, inode, device) of a file as it was checked; None fields are not compared
Identity = tuple


class ChangedError(OSError):
    """The file is no longer the one that was checked (replaced or rewritten): it is not moved."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(errno.ESTALE, f"changed since it was checked ({what}); not moved", path)


def temp_name(ident: str) -> str:
    """The temp name of move ``ident`` (beside its target): hidden, unique, journaled before it exists."""
    return f".{ident}{PARTIAL_SUFFIX}"


def _journaled_temp(entry: dict, target: str) -> str | None:
    """The temp copy a journal entry says its move may have created, or None (older entries: none proven)."""
    name = entry.get("tmp")
    if isinstance(name, str) and name == temp_name(str(entry.get("id"))):
        return os.path.join(os.path.dirname(target), name)
    return None


@dataclass
class RecoveryReport:
    """What :func:`recover` / :func:`restore` found and did."""

    completed: int = 0  # half-done moves finished
    reverted: int = 0  # moves that had not happened, marked aborted
    restored: int = 0  # files moved back by restore
    refused: list[str] = field(default_factory=list)  # entries not followed, with the reason
    failed: list[str] = field(default_factory=list)  # moves back that failed (I/O error), with the error
    bad_lines: list[str] = field(default_factory=list)  # manifest lines that could not be parsed


def _safe_rel(rel: object) -> str | None:
    """``rel`` if it is a relative path that stays below its base, else None."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or "\x00" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return rel


def _inside(path: str, base: str) -> bool:
    """True if ``path`` (after resolving symlinks in its folders) lies below ``base``."""
    real_base = os.path.realpath(base)
    real_parent = os.path.realpath(os.path.dirname(path))
    return real_parent == real_base or real_parent.startswith(real_base.rstrip(os.sep) + os.sep)


class Journal:
    """Append-only JSONL journal; each line is fsynced before the step it announces."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        size = os.fstat(self._fd).st_size
        if size > 0:
            with open(path, "rb") as r:
                r.seek(-1, os.SEEK_END)
                if r.read(1) != b"\n":
                    # A crash cut the last line short: start a fresh line, keep the fragment for the record.
                    self._write(b"\n")

    def _write(self, data: bytes) -> None:
        """Append ``data`` whole or not at all: a short write (a full disk) is cut off again."""
        end = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
        except OSError as exc:
            os.ftruncate(self._fd, end)  # this process holds the lock: nobody else appends
            if exc.filename is None:
                raise OSError(exc.errno, exc.strerror, self.path) from exc
            raise

    def append(self, entry: dict) -> None:
        # ensure_ascii: non-UTF-8 names (lone surrogates) become \udcXX escapes, lossless
        self._write(json.dumps(entry).encode("ascii") + b"\n")
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def read_journal(path: str, report: RecoveryReport | None = None) -> Iterator[dict]:
    """Parsed manifest entries; unparseable lines are recorded in ``report.bad_lines``."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
                if not isinstance(entry, dict) or "op" not in entry or "id" not in entry:
                    raise ValueError("not a manifest entry")
            except ValueError as exc:
                if report is not None:
                    report.bad_lines.append(f"{path}:{number}: {exc}")
                continue
            yield entry


@dataclass
class _State:
    """The journal folded into: moves with their outcome, and which moves were restored."""

    intents: dict[str, dict] = field(default_factory=dict)
    outcome: dict[str, str] = field(default_factory=dict)  # id -> "done" / "abort"
    errors: dict[str, str] = field(default_factory=dict)  # id -> why the move failed (aborts with an error)


def _in_quarantine(state: _State) -> list[tuple[str, dict]]:
    """``(id, move entry)`` of every file the journal says is in the quarantine now (moved, not restored)."""
    restored = {str(e.get("of")) for i, e in state.intents.items()
                if e["op"] == "restore" and state.outcome.get(i) == "done"}
    return [(i, e) for i, e in state.intents.items()
            if e["op"] == "move" and state.outcome.get(i) == "done" and i not in restored]


def _fold(path: str, report: RecoveryReport) -> _State:
    state = _State()
    for e in read_journal(path, report):
        op, ident = e["op"], str(e["id"])
        if op in ("move", "restore"):
            state.intents.setdefault(ident, e)  # a duplicated line changes nothing
        elif op in ("done", "abort"):
            state.outcome[ident] = op
            if op == "abort" and e.get("error"):
                state.errors[ident] = str(e["error"])
    return state


def _endpoints(entry: dict, qdir: str, root: str | None = None) -> tuple[str, str] | None:
    """(from, to) absolute paths of a journaled move (``root`` overrides the recorded one), or None if unsafe."""
    root = root or entry.get("root")
    src, dst = _safe_rel(entry.get("src")), _safe_rel(entry.get("dst"))
    if not isinstance(root, str) or not os.path.isabs(root) or src is None or dst is None:
        return None
    original, quarantined = os.path.join(root, src), os.path.join(qdir, dst)
    return (original, quarantined) if entry["op"] == "move" else (quarantined, original)


def _same_file(a: str, b: str) -> bool:
    return os.path.samefile(a, b) or filecmp.cmp(a, b, shallow=False)


def _drop_temp(temp: str | None) -> None:
    """Remove a move's own journaled temp copy, if it is there (once the target exists it is a second link or stale)."""
    if temp is not None and os.path.lexists(temp):
        os.unlink(temp)


def _recover_one(entry: dict, qdir: str, journal: Journal, report: RecoveryReport) -> None:
    ends = _endpoints(entry, qdir)
    if ends is None:
        report.refused.append(f"entry {entry['id']}: path is absolute or leaves its folder; not followed")
        return
    source, target = ends
    temp = _journaled_temp(entry, target)  # only a temp name the journal proves this move chose is removed
    has_source, has_target = os.path.lexists(source), os.path.lexists(target)
    if has_source and not has_target:
        _drop_temp(temp)  # an unfinished copy; the original is intact
        journal.append({"op": "abort", "id": entry["id"]})
        report.reverted += 1
    elif has_target and not has_source:
        _drop_temp(temp)
        journal.append({"op": "done", "id": entry["id"]})
        report.completed += 1
    elif has_source and has_target:
        if _same_file(source, target):
            try:
                os.unlink(source)  # the copy is complete and fsynced: finish the move
            except OSError as exc:  # the source cannot go (read-only now): undo the copy instead
                os.unlink(target)
                _drop_temp(temp)
                journal.append({"op": "abort", "id": entry["id"], "error": exc.strerror or str(exc)})
                report.reverted += 1
                return
            fsync_dir(os.path.dirname(source))
            _drop_temp(temp)
            journal.append({"op": "done", "id": entry["id"]})
            report.completed += 1
        else:
            report.refused.append(f"entry {entry['id']}: both {source} and {target} exist and differ; left as is")
    else:
        report.refused.append(f"entry {entry['id']}: neither {source} nor {target} exists; left as is")


def _verify(path: str, expect: Identity | None) -> None:
    """Raise :class:`ChangedError` unless ``path`` still has the identity it was checked with."""
    if not expect or all(x is None for x in expect):  # nothing was seen (a broken symlink): nothing to compare
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ChangedError(path, "it is gone") from None
    seen = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    for name, want, got in zip(("size", "mtime", "inode", "device"), expect, seen):
        if want is not None and want != got:
            raise ChangedError(path, f"{name} {want} -> {got}")


def _link_then_unlink(source: str, target: str, expect: Identity | None = None) -> None:
    """Rename that fails with FileExistsError instead of replacing ``target``; undone if the source stays.

    ``os.rename`` silently replaces; a hard link cannot. Link then unlink the
    old name (between the two, both names are the same inode: recovery sees
    them as one file). The linked inode is compared with ``expect`` before the
    old name goes; if it differs, or the old name cannot be removed, the new
    name is removed again. File systems without hard links fall back to check+rename.
    """
    try:
        os.link(source, target, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "refusing to overwrite", target) from None
        _verify(source, expect)
        os.rename(source, target)
        return
    try:
        if stat.S_ISLNK(os.lstat(target).st_mode):
            _verify_link(source, target, expect)
        else:
            _verify(target, expect)
        _unlink_source(source)
    except BaseException:
        os.unlink(target)  # one copy only: the source stays where it was
        raise


def _verify_link(source: str, target: str, expect: Identity | None) -> None:
    """A symlink being moved: a relative one resolves from its folder, so its new name may point nowhere.

    Check the link where it still is (the identity it was checked with is the file it points to),
    and that the new name is the same link entry as the old one (nothing was renamed over it).
    """
    _verify(source, expect)
    try:
        same = os.path.samestat(os.lstat(source), os.lstat(target))
    except FileNotFoundError:
        raise ChangedError(source, "it is gone") from None
    if not same:
        raise ChangedError(source, "replaced by another entry while it was moved")


_rename_no_replace = _link_then_unlink  # the older name


def _unlink_source(source: str) -> None:
    """Remove a moved file's old name; gone already means another process moved it first (ChangedError)."""
    try:
        os.unlink(source)
    except FileNotFoundError:
        raise ChangedError(source, "it is gone: another process moved or removed it") from None


def _copy_new(source: str, temp: str) -> None:
    """Copy ``source`` (a symlink as a link) to ``temp``, which must not exist (O_EXCL), with its times; fsynced.

    An existing ``temp`` raises FileExistsError and is left alone; a copy that fails
    half-way (a full disk) is removed before the error is raised.
    """
    if os.path.islink(source):
        os.symlink(os.readlink(source), temp)
        return
    with open(source, "rb") as src:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            with open(fd, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
                dst.flush()
                os.fsync(dst.fileno())
            shutil.copystat(source, temp)
        except BaseException:
            os.unlink(temp)  # created above by this call: never a user's file
            raise


def move_file(source: str, target: str, temp: str | None = None, expect: Identity | None = None) -> None:
    """Move without ever overwriting: link + unlink, or across devices copy to ``temp`` + fsync + link + unlink.

    ``temp`` (a name beside ``target``, journaled by the caller) is created
    exclusively, so it can never be a user's file; without it a cross-device
    move is refused. Whatever fails, the file ends up in exactly one place:
    a copy whose source cannot be removed is removed again.
    """
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, "refusing to overwrite", target)
    _verify(source, expect)
    try:
        _link_then_unlink(source, target, expect)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        if temp is None:
            raise
        _copy_new(source, temp)  # an existing temp name: FileExistsError, nothing touched
        try:
            _verify(source, expect)  # rewritten while it was copied?
            _link_then_unlink(temp, target)
            fsync_dir(os.path.dirname(target))
        except BaseException:
            if os.path.lexists(temp):
                os.unlink(temp)  # created by _copy_new above: never a user's file
            raise
        try:
            _verify(source, expect)
            _unlink_source(source)
        except BaseException:
            os.unlink(target)  # the source stays: remove the copy, one place only
            fsync_dir(os.path.dirname(target))
            raise
    fsync_dir(os.path.dirname(target))
    fsync_dir(os.path.dirname(source))


class Quarantine:
    """An open, locked quarantine folder that bad files can be moved into.

    Opening recovers any half-done move from an earlier run. Only one process
    may hold a quarantine folder at a time, except that each part of a
    job-array scan (``tag``, see :func:`dsclean.locations.part_tag`) has a
    journal and a lock of its own: parts move disjoint sets of files.
    """

    def __init__(self, qdir: str, root: str, tag: str = "") -> None:
        self.qdir = os.path.abspath(qdir)
        self.root = os.path.abspath(root)
        _check_placement(self.qdir, self.root)
        self._lock_fd = lock_folder(self.qdir, tag)
        try:
            bind_root(self.qdir, self.root)
            self.journal = Journal(os.path.join(self.qdir, locations.tagged(locations.MANIFEST_FILE, tag)))
            self.recovery = recover_open(self.qdir, self.journal)
        except BaseException:
            os.close(self._lock_fd)  # release the lock: this process is not using the folder after all
            raise
        # Reports default to this folder; a killed scan leaves their temp files behind.
        remove_stale_temps(self.qdir, tuple(locations.tagged(name, tag) for name in
                                            (locations.RESULTS_FILE, locations.PROBLEMS_FILE, locations.SUMMARY_FILE)))
        self.moved = 0
        self.moved_ids: set[str] = set()  # journal ids of the moves done through this object

    def move(self, rel: str, reason: str | None = None, *, detail: str | None = None, kind: str | None = None,
             expect: Identity | None = None) -> str:
        """Move ``root/rel`` into the quarantine; returns its path relative to the quarantine.

        If another process takes the chosen name first (parts share the folder),
        the move is journaled as aborted and retried under the next free name. A
        failed move is journaled as aborted with its error. A file whose folder
        resolves outside the root (a symlinked folder) is never moved: an
        :class:`OutsideRootError`. A symlink is moved as the link, never its target.
        ``expect``: the identity the file was checked with; a file that no longer
        has it is not moved (:class:`ChangedError`, journaled as aborted).
        """
        source = os.path.join(self.root, rel)
        if not _inside(source, self.root):
            raise OutsideRootError(source, os.path.realpath(os.path.dirname(source)))
        while True:
            dst = self._free_name(rel)
            ident = uuid.uuid4().hex
            entry = {"op": "move", "id": ident, "root": self.root, "src": rel, "dst": dst, "tmp": temp_name(ident)}
            entry.update({k: v for k, v in (("reason", reason), ("kind", kind), ("detail", detail)) if v})
            self.journal.append(entry)
            target = os.path.join(self.qdir, dst)
            try:
                move_file(source, target, os.path.join(os.path.dirname(target), entry["tmp"]), expect)
            except FileExistsError:
                self.journal.append({"op": "abort", "id": ident})
                continue
            except ChangedError as exc:  # not a failure: the file is not the one that was judged
                self.journal.append({"op": "abort", "id": ident, "changed": exc.strerror})
                raise
            except OSError as exc:
                self.journal.append({"op": "abort", "id": ident, "error": exc.strerror or str(exc)})
                raise
            self.journal.append({"op": "done", "id": ident})
            self.moved += 1
            self.moved_ids.add(ident)
            return dst

    def _free_name(self, rel: str) -> str:
        """``rel``, or ``stem~N.ext`` if something already has that name (never overwrite)."""
        candidate, n = rel, 0
        stem, ext = os.path.splitext(rel)
        while os.path.lexists(os.path.join(self.qdir, candidate)):
            n += 1
            candidate = f"{stem}~{n}{ext}"
        return candidate

    def close(self) -> None:
        self.journal.close()
        os.close(self._lock_fd)

    def __enter__(self) -> "Quarantine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OutsideRootError(OSError):
    """A file reached through a symlinked folder lies outside the root: dsclean never moves it."""

    def __init__(self, path: str, real_folder: str) -> None:
        super().__init__(errno.EXDEV, f"its folder resolves to {real_folder}, outside ROOT through a symlink "
                         "(dsclean moves links, never files outside ROOT)", path)


def _check_placement(qdir: str, root: str) -> None:
    if locations.is_inside(root, qdir):
        raise UserError(f"quarantine folder {qdir} must not be the scanned root or contain it ({root})")


def lock_folder(qdir: str, tag: str = "") -> int:
    """Create (if needed) and lock a quarantine folder; a clear error if it is not writable or in use."""
    try:
        os.makedirs(qdir, exist_ok=True)
        with open(os.path.join(qdir, QUARANTINE_MARKER), "a", encoding="utf-8"):
            pass  # the marker's existence is its content: discovery never enters this folder
        fd = os.open(os.path.join(qdir, locations.tagged(locations.LOCK_FILE, tag)), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UserError(f"quarantine folder {qdir} is not writable: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise UserError(
            f"quarantine folder {qdir} is in use by another dsclean process (pid {holder}); "
            "wait for it to finish or use another folder"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def bound_root(qdir: str) -> str | None:
    """The root a quarantine folder is bound to (its ``quarantine.json``), or None for an older, unbound folder."""
    try:
        with open(os.path.join(qdir, BINDING_FILE), encoding="utf-8") as f:
            root = json.load(f).get("root")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError) as exc:
        raise UserError(f"{os.path.join(qdir, BINDING_FILE)} is damaged ({exc}); it names the root this "
                        "quarantine's files came from") from None
    if not isinstance(root, str) or not os.path.isabs(root):
        raise UserError(f"{os.path.join(qdir, BINDING_FILE)} names no absolute root")
    return root


def _same_root(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b) or os.path.realpath(a) == os.path.realpath(b)


def bind_root(qdir: str, root: str) -> None:
    """Bind ``qdir`` to ``root`` on first use; a folder bound to (or holding files of) another root is refused."""
    bound = bound_root(qdir)
    if bound is None:
        held = set()
        stem, ext = os.path.splitext(locations.MANIFEST_FILE)
        for name in os.listdir(qdir):
            if name.startswith(stem) and name.endswith(ext):
                state = _fold(os.path.join(qdir, name), RecoveryReport())
                held |= {e.get("root") for _, e in _in_quarantine(state) if isinstance(e.get("root"), str)}
        others = sorted(r for r in held if not _same_root(r, root))
        if others:
            bound = others[0]
        else:
            from ..atomic import atomic_output

            with atomic_output(os.path.join(qdir, BINDING_FILE)) as tmp:
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump({"root": root}, f)
            return
    if not _same_root(bound, root):
        raise UserError(f"quarantine folder {qdir} holds files of {bound}, not {root}: one quarantine folder per "
                        f"root (e.g. {os.path.join(qdir, os.path.basename(root) or 'root')}), so restore can "
                        "tell where each file belongs")


def recover_open(qdir: str, journal: Journal) -> RecoveryReport:
    """Finish or revert every journaled move that has no outcome (the folder must be locked)."""
    report = RecoveryReport()
    state = _fold(journal.path, report)
    for ident, entry in state.intents.items():
        if ident not in state.outcome:
            try:
                _recover_one(entry, qdir, journal, report)
            except OSError as exc:
                report.refused.append(f"entry {ident}: could not recover: {exc.strerror or exc} ({exc.filename})")
    return report


def _journals(qdir: str) -> list[str]:
    """Tags of the manifests in a quarantine folder ('' for a whole scan's, one per part)."""
    qdir = os.path.abspath(qdir)
    stem, ext = os.path.splitext(locations.MANIFEST_FILE)
    tags = sorted(name[len(stem) : -len(ext)] for name in os.listdir(qdir) if name.startswith(stem) and name.endswith(ext)) \
        if os.path.isdir(qdir) else []
    if not tags:
        raise UserError(f"{qdir} is not a dsclean quarantine folder (no {locations.MANIFEST_FILE})")
    return tags


@contextlib.contextmanager
def _locked_journal(qdir: str, tag: str) -> Iterator[Journal]:
    fd = lock_folder(qdir, tag)
    journal = Journal(os.path.join(qdir, locations.tagged(locations.MANIFEST_FILE, tag)))
    try:
        yield journal
    finally:
        journal.close()
        os.close(fd)


def _merge(total: RecoveryReport, part: RecoveryReport) -> None:
    total.completed += part.completed
    total.reverted += part.reverted
    total.restored += part.restored
    total.refused += part.refused
    total.failed += part.failed
    total.bad_lines += part.bad_lines


def recover(qdir: str) -> RecoveryReport:
    """Lock a quarantine folder and repair half-done moves left by a killed run (every part's manifest)."""
    qdir, total = os.path.abspath(qdir), RecoveryReport()
    for tag in _journals(qdir):
        with _locked_journal(qdir, tag) as journal:
            _merge(total, recover_open(qdir, journal))
    return total


def restore(qdir: str, root: str | None = None) -> RecoveryReport:
    """Move every quarantined file back to where it came from, journaled like the way in.

    ``root``: the dataset's new location when it moved since the scan (``--root``).
    Without it, a recorded root that no longer exists is refused before anything
    moves (restoring would silently recreate the old path). Refuses (and reports)
    entries whose paths are absolute, contain ``..``, or whose destination folder
    resolves outside the root through a symlink; never overwrites a file that has
    reappeared at the original path. A move back that fails is listed in ``failed``.
    """
    qdir, total = os.path.abspath(qdir), RecoveryReport()
    bound = bound_root(qdir)
    root = _restore_root(qdir, root, bound)
    for tag in _journals(qdir):
        with _locked_journal(qdir, tag) as journal:
            report = recover_open(qdir, journal)
            state = _fold(journal.path, RecoveryReport())  # again, with recovery's outcomes; bad lines already reported
            for ident, entry in _in_quarantine(state):
                if bound is not None and not (isinstance(entry.get("root"), str) and _same_root(entry["root"], bound)):
                    report.refused.append(f"entry {ident}: its root {entry.get('root')!r} is not this quarantine's "
                                          f"root {bound} ({BINDING_FILE}); not restored")
                    continue
                try:
                    _restore_one(ident, entry, qdir, journal, report, root)
                except OSError as exc:
                    report.failed.append(f"entry {ident}: could not restore: {exc.strerror or exc} ({exc.filename})")
            _merge(total, report)
    return total


def _restore_root(qdir: str, root: str | None, bound: str | None = None) -> str | None:
    """The root to restore into: ``root`` (checked), or None to use each entry's recorded root (checked)."""
    recorded = set()
    folders = set()  # the folders (relative to their root) the quarantined files came from
    for tag in _journals(qdir):
        state = _fold(os.path.join(qdir, locations.tagged(locations.MANIFEST_FILE, tag)), RecoveryReport())
        for _, e in _in_quarantine(state):
            if isinstance(e.get("root"), str) and os.path.isabs(e["root"]) \
                    and (bound is None or _same_root(e["root"], bound)):  # others are refused per entry
                recorded.add(e["root"])
                src = _safe_rel(e.get("src"))
                if src is not None:
                    folders.add(os.path.dirname(src))
    if root is not None:
        if not os.path.isdir(root):
            raise UserError(f"--root {root}: no such folder")
        if len(recorded) > 1:
            raise UserError(f"{qdir} holds files of {len(recorded)} roots ({', '.join(sorted(recorded))}); "
                            "--root can only stand for one")
        old = next(iter(recorded), None)
        # --root is for the same tree at a new place: while the recorded root is still there, NEW must look like
        # it (a folder the files came from exists in NEW), or another dataset would get this one's files
        if old is not None and os.path.isdir(old) and not _same_root(old, root) and folders \
                and not any(os.path.isdir(os.path.join(root, f)) for f in folders):
            example = sorted(folders)[0] or "."
            raise UserError(f"--root {root}: the files in {qdir} came from {old}, which still exists, and {root} "
                            f"has none of their folders (e.g. {example}): it looks like another dataset. Restore "
                            f"without --root to put them back into {old}")
        return os.path.abspath(root)
    missing = sorted(r for r in recorded if not os.path.isdir(r))
    if missing:
        raise UserError(f"the dataset root recorded in {qdir}, {missing[0]}, no longer exists (moved or not "
                        "mounted?); restoring would recreate it: pass --root NEW_LOCATION to restore into "
                        "the moved tree")
    return None


def _restore_one(ident: str, entry: dict, qdir: str, journal: Journal, report: RecoveryReport,
                 root: str | None = None) -> None:
    ends = _endpoints(entry, qdir, root)
    if ends is None:
        report.refused.append(f"entry {ident}: path is absolute or contains '..'; not restored")
        return
    original, quarantined = ends
    base = root or entry["root"]
    if not _inside(original, base) or not _inside(quarantined, qdir):
        report.refused.append(f"entry {ident}: {original} resolves outside {base} (symlink); not restored")
        return
    if not os.path.lexists(quarantined):
        report.refused.append(f"entry {ident}: {quarantined} is missing; nothing to restore")
        return
    if os.path.lexists(original):
        report.refused.append(f"entry {ident}: {original} exists again; not overwritten")
        return
    # "t": when; a re-scan reuses no earlier verdict of a file put back after that verdict (scanning.reuse)
    back = {"op": "restore", "id": uuid.uuid4().hex, "of": ident, "root": base, "t": time.time_ns()}
    back.update(src=entry["src"], dst=entry["dst"], tmp=temp_name(back["id"]))
    journal.append(back)
    try:
        move_file(quarantined, original, os.path.join(os.path.dirname(original), back["tmp"]))
    except OSError as exc:
        journal.append({"op": "abort", "id": back["id"], "error": exc.strerror or str(exc)})
        raise
    journal.append({"op": "done", "id": back["id"]})
    report.restored += 1
