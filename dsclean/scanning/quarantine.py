"""Stage 4: move bad files aside. Nothing is ever deleted, and every move is journaled.

The journal is ``<quarantine>/manifest.jsonl``. A move is three steps::

    1. append {"op": "move", "id": ..., "root": ..., "src": ..., "dst": ...}  and fsync
    2. move the file without ever replacing one: link the new name, unlink the
       old (across file systems: copy to a ".partial" name, fsync, link into
       place, then remove the original)
    3. append {"op": "done", "id": ...}  and fsync

A kill -9 between any two instructions leaves the file in exactly one place
(between link and unlink: one inode, two names), or (mid cross-device copy)
the original in place plus a partial copy or a full copy. :func:`recover` looks at the disk for each move without an outcome and
finishes or reverts it: original only -> "abort" (the partial copy goes);
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
import uuid
from dataclasses import dataclass, field
from typing import Iterator

from .. import locations
from ..atomic import fsync_dir, remove_stale_temps
from ..errors import UserError
from .discover import QUARANTINE_MARKER

PARTIAL_SUFFIX = ".dsclean-partial"


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
        self._f = open(path, "ab")
        if self._f.tell() > 0:
            with open(path, "rb") as r:
                r.seek(-1, os.SEEK_END)
                if r.read(1) != b"\n":
                    # A crash cut the last line short: start a fresh line, keep the fragment for the record.
                    self._f.write(b"\n")

    def append(self, entry: dict) -> None:
        # ensure_ascii: non-UTF-8 names (lone surrogates) become \udcXX escapes, lossless
        self._f.write(json.dumps(entry).encode("ascii") + b"\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


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


def _drop_partial(partial: str) -> None:
    """Once the target exists it is complete: a leftover partial name is a second link to it, or stale."""
    if os.path.lexists(partial):
        os.unlink(partial)


def _recover_one(entry: dict, qdir: str, journal: Journal, report: RecoveryReport) -> None:
    ends = _endpoints(entry, qdir)
    if ends is None:
        report.refused.append(f"entry {entry['id']}: path is absolute or leaves its folder; not followed")
        return
    source, target = ends
    partial = target + PARTIAL_SUFFIX
    has_source, has_target = os.path.lexists(source), os.path.lexists(target)
    if has_source and not has_target:
        if os.path.lexists(partial):
            os.unlink(partial)  # an unfinished copy; the original is intact
        journal.append({"op": "abort", "id": entry["id"]})
        report.reverted += 1
    elif has_target and not has_source:
        _drop_partial(partial)
        journal.append({"op": "done", "id": entry["id"]})
        report.completed += 1
    elif has_source and has_target:
        if _same_file(source, target):
            os.unlink(source)  # the copy is complete and fsynced: finish the move
            fsync_dir(os.path.dirname(source))
            _drop_partial(partial)
            journal.append({"op": "done", "id": entry["id"]})
            report.completed += 1
        else:
            report.refused.append(f"entry {entry['id']}: both {source} and {target} exist and differ; left as is")
    else:
        report.refused.append(f"entry {entry['id']}: neither {source} nor {target} exists; left as is")


def _rename_no_replace(source: str, target: str) -> None:
    """Rename that fails with FileExistsError instead of replacing ``target``.

    ``os.rename`` silently replaces; a hard link cannot. Link then unlink the
    old name (between the two, both names are the same inode: recovery sees
    them as one file). File systems without hard links fall back to check+rename.
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
        os.rename(source, target)
        return
    os.unlink(source)


def move_file(source: str, target: str) -> None:
    """Move without ever overwriting: rename, or across devices copy + fsync + rename + unlink."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, "refusing to overwrite", target)
    try:
        _rename_no_replace(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        partial = target + PARTIAL_SUFFIX
        shutil.copy2(source, partial, follow_symlinks=False)
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _rename_no_replace(partial, target)
        fsync_dir(os.path.dirname(target))
        os.unlink(source)
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

    def move(self, rel: str, reason: str | None = None, *, detail: str | None = None, kind: str | None = None) -> str:
        """Move ``root/rel`` into the quarantine; returns its path relative to the quarantine.

        If another process takes the chosen name first (parts share the folder),
        the move is journaled as aborted and retried under the next free name. A
        failed move is journaled as aborted with its error. A file whose folder
        resolves outside the root (a symlinked folder) is never moved: an
        :class:`OutsideRootError`. A symlink is moved as the link, never its target.
        """
        source = os.path.join(self.root, rel)
        if not _inside(source, self.root):
            raise OutsideRootError(source, os.path.realpath(os.path.dirname(source)))
        while True:
            dst = self._free_name(rel)
            ident = uuid.uuid4().hex
            entry = {"op": "move", "id": ident, "root": self.root, "src": rel, "dst": dst}
            entry.update({k: v for k, v in (("reason", reason), ("kind", kind), ("detail", detail)) if v})
            self.journal.append(entry)
            try:
                move_file(source, os.path.join(self.qdir, dst))
            except FileExistsError:
                self.journal.append({"op": "abort", "id": ident})
                continue
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
        while os.path.lexists(os.path.join(self.qdir, candidate)) or os.path.lexists(
            os.path.join(self.qdir, candidate + PARTIAL_SUFFIX)
        ):
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
    rq, rr = os.path.realpath(qdir), os.path.realpath(root)
    if rq == rr or rr.startswith(rq.rstrip(os.sep) + os.sep):
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
    root = _restore_root(qdir, root)
    for tag in _journals(qdir):
        with _locked_journal(qdir, tag) as journal:
            report = recover_open(qdir, journal)
            state = _fold(journal.path, RecoveryReport())  # again, with recovery's outcomes; bad lines already reported
            for ident, entry in _in_quarantine(state):
                try:
                    _restore_one(ident, entry, qdir, journal, report, root)
                except OSError as exc:
                    report.failed.append(f"entry {ident}: could not restore: {exc.strerror or exc} ({exc.filename})")
            _merge(total, report)
    return total


def _restore_root(qdir: str, root: str | None) -> str | None:
    """The root to restore into: ``root`` (checked), or None to use each entry's recorded root (checked)."""
    recorded = set()
    for tag in _journals(qdir):
        state = _fold(os.path.join(qdir, locations.tagged(locations.MANIFEST_FILE, tag)), RecoveryReport())
        recorded |= {e["root"] for _, e in _in_quarantine(state)
                     if isinstance(e.get("root"), str) and os.path.isabs(e["root"])}  # others are refused per entry
    if root is not None:
        if not os.path.isdir(root):
            raise UserError(f"--root {root}: no such folder")
        if len(recorded) > 1:
            raise UserError(f"{qdir} holds files of {len(recorded)} roots ({', '.join(sorted(recorded))}); "
                            "--root can only stand for one")
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
    back = {"op": "restore", "id": uuid.uuid4().hex, "of": ident, "root": base}
    back.update(src=entry["src"], dst=entry["dst"])
    journal.append(back)
    move_file(quarantined, original)
    journal.append({"op": "done", "id": back["id"]})
    report.restored += 1
