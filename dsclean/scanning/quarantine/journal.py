"""The write-ahead journal of a quarantine folder: its format, its records, and the lock that guards it.

The journal is ``<quarantine>/manifest.jsonl`` (``manifest.part-0003-of-0016.jsonl`` for a part of a
job array, each with a lock of its own). A move is announced before it happens::

    1. append {"op": "move", "id": ..., "root": ..., "src": ..., "dst": ..., "tmp": ...}  and fsync
    2. move the file (:mod:`.moves`)
    3. append {"op": "done", "id": ...}  and fsync (or {"op": "abort", "id": ..., "error": ...})

A restore is journaled the same way (op ``"restore"``, ``"of"`` the move it undoes). Folding the
journal (:func:`fold_journal`) gives each intent its outcome; an intent without one is a move a
killed run left half-done (:mod:`.recovery`). Entries are not trusted: their paths are checked
(:func:`endpoints`) before anything follows them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from ... import locations
from ...errors import UserError
from ..discover import QUARANTINE_MARKER

PARTIAL_SUFFIX = ".dsclean-partial"


def temp_name(ident: str) -> str:
    """The temp name of move ``ident`` (beside its target): hidden, unique, journaled before it exists."""
    return f".{ident}{PARTIAL_SUFFIX}"


def journaled_temp(entry: dict, target: str) -> str | None:
    """The temp copy a journal entry says its move may have created, or None (older entries: none proven)."""
    name = entry.get("tmp")
    if isinstance(name, str) and name == temp_name(str(entry.get("id"))):
        return os.path.join(os.path.dirname(target), name)
    return None


@dataclass
class RecoveryReport:
    """What reading and following a journal found and did (:func:`~.recovery.recover`, :func:`~.restore.restore`)."""

    completed: int = 0  # half-done moves finished
    reverted: int = 0  # moves that had not happened, marked aborted
    restored: int = 0  # files moved back by restore
    refused: list[str] = field(default_factory=list)  # entries not followed, with the reason
    failed: list[str] = field(default_factory=list)  # moves back that failed (I/O error), with the error
    bad_lines: list[str] = field(default_factory=list)  # manifest lines that could not be parsed

    def add(self, part: RecoveryReport) -> None:
        """Add the counts and lists of ``part`` (one journal's) to this report (the folder's)."""
        self.completed += part.completed
        self.reverted += part.reverted
        self.restored += part.restored
        self.refused += part.refused
        self.failed += part.failed
        self.bad_lines += part.bad_lines


def safe_rel(rel: object) -> str | None:
    """``rel`` if it is a relative path that stays below its base, else None."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or "\x00" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return rel


def endpoints(entry: dict, qdir: str, root: str | None = None) -> tuple[str, str] | None:
    """(from, to) absolute paths of a journaled move (``root`` overrides the recorded one), or None if unsafe."""
    root = root or entry.get("root")
    src, dst = safe_rel(entry.get("src")), safe_rel(entry.get("dst"))
    if not isinstance(root, str) or not os.path.isabs(root) or src is None or dst is None:
        return None
    original, quarantined = os.path.join(root, src), os.path.join(qdir, dst)
    return (original, quarantined) if entry["op"] == "move" else (quarantined, original)


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
class JournalState:
    """The journal folded into: moves with their outcome, and which moves were restored."""

    intents: dict[str, dict] = field(default_factory=dict)
    outcome: dict[str, str] = field(default_factory=dict)  # id -> "done" / "abort"
    errors: dict[str, str] = field(default_factory=dict)  # id -> why the move failed (aborts with an error)


def in_quarantine(state: JournalState) -> list[tuple[str, dict]]:
    """``(id, move entry)`` of every file the journal says is in the quarantine now (moved, not restored)."""
    restored = {
        str(e.get("of")) for i, e in state.intents.items() if e["op"] == "restore" and state.outcome.get(i) == "done"
    }
    return [
        (i, e)
        for i, e in state.intents.items()
        if e["op"] == "move" and state.outcome.get(i) == "done" and i not in restored
    ]


def fold_journal(path: str, report: RecoveryReport) -> JournalState:
    """The state one journal file describes; its unparseable lines go to ``report.bad_lines``."""
    state = JournalState()
    for e in read_journal(path, report):
        op, ident = e["op"], str(e["id"])
        if op in ("move", "restore"):
            state.intents.setdefault(ident, e)  # a duplicated line changes nothing
        elif op in ("done", "abort"):
            state.outcome[ident] = op
            if op == "abort" and e.get("error"):
                state.errors[ident] = str(e["error"])
    return state


def manifest_path(qdir: str, tag: str = "") -> str:
    """The journal of part ``tag`` ('' for a whole scan's) in a quarantine folder."""
    return os.path.join(qdir, locations.tagged(locations.MANIFEST_FILE, tag))


def journal_tags(qdir: str) -> list[str]:
    """Tags of the manifests in a quarantine folder ('' for a whole scan's, one per part)."""
    qdir = os.path.abspath(qdir)
    stem, ext = os.path.splitext(locations.MANIFEST_FILE)
    tags = (
        sorted(name[len(stem) : -len(ext)] for name in os.listdir(qdir) if name.startswith(stem) and name.endswith(ext))
        if os.path.isdir(qdir)
        else []
    )
    if not tags:
        raise UserError(f"{qdir} is not a dsclean quarantine folder (no {locations.MANIFEST_FILE})")
    return tags


def fold_journals(qdir: str, tags: Iterable[str] | None, report: RecoveryReport) -> Iterator[JournalState]:
    """The state of each journal of ``qdir`` (``tags``, or every part's), read without the lock."""
    for tag in tags if tags is not None else journal_tags(qdir):
        path = manifest_path(qdir, tag)
        if os.path.exists(path):
            yield fold_journal(path, report)


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


@contextlib.contextmanager
def locked_journal(qdir: str, tag: str) -> Iterator[Journal]:
    """The journal of part ``tag``, open for appending while this process holds its lock."""
    fd = lock_folder(qdir, tag)
    journal = Journal(manifest_path(qdir, tag))
    try:
        yield journal
    finally:
        journal.close()
        os.close(fd)
