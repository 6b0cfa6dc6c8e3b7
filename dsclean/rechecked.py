"""What ``dsclean quarantine --from-log`` re-checked, kept in the root's state folder for the next scan.

``<state folder of ROOT>/training_failures.jsonl`` (:data:`dsclean.locations.TRAINING_FAILURES_FILE`):
one JSON line per file of ROOT that failed in training and was re-checked: ``path`` (+ ``path_b64``,
relative to ROOT), ``status``/``reason``/``detail`` (the re-check's verdict), ``outcome``
(``quarantined``, ``would_quarantine``, ``left`` or ``missing``), and the logged ``kind``, ``error``
and ``message``. The next ``dsclean scan ROOT`` checks those files again even when its cache says
they are unchanged, then appends a ``{"scanned": ...}`` marker line: records before the last marker
are done (the report still shows them). Appended like the failure log (``O_APPEND``, whole lines);
read as untrusted input (:func:`dsclean.failures._lines`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import stat
from typing import Iterable

from . import locations
from .failures import _lines
from .jsonpaths import path_bytes, path_fields

VERSION = 1
OUTCOMES = ("quarantined", "would_quarantine", "left", "missing")


def record_path(root: str, state_dir: str | None = None) -> str:
    return os.path.join(locations.root_state_dir(root, state_dir), locations.TRAINING_FAILURES_FILE)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _append(path: str, records: Iterable[dict]) -> None:
    data = [(json.dumps(r, default=str) + "\n").encode("ascii") for r in records]
    if not data:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        for line in data:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def record(root: str, items: Iterable[dict], state_dir: str | None = None) -> str:
    """Append re-check records (dicts with ``rel`` and the fields above) for ``root``; returns the file."""
    folder = locations.make_root_state_dir(root, state_dir)
    path = os.path.join(folder, locations.TRAINING_FAILURES_FILE)
    out = []
    for item in items:
        rec = {"v": VERSION, "time": _now(), **path_fields(item["rel"])}
        rec.update(
            {k: item.get(k) for k in ("status", "reason", "detail", "outcome", "kind", "error", "message", "index")}
        )
        out.append(rec)
    _append(path, out)
    return path


def mark_scanned(root: str, state_dir: str | None = None) -> None:
    """The scan re-checked every pending record: later scans need not (records stay for the report)."""
    path = record_path(root, state_dir)
    if os.path.isfile(path):
        _append(path, [{"v": VERSION, "time": _now(), "scanned": True}])


def read(root: str, state_dir: str | None = None, *, pending_only: bool = False) -> list[dict]:
    """The records of ``root`` (``pending_only``: those after the last scan's marker); damaged lines skipped."""
    path = record_path(root, state_dir)
    if not os.path.lexists(path):
        return []
    out: list[dict] = []
    try:
        for line, whole in _lines(path):
            if not whole:
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(rec, dict) or rec.get("v") != VERSION:
                continue
            if rec.get("scanned") is True:
                if pending_only:
                    out = []
                continue
            if isinstance(rec.get("path"), str):
                out.append(rec)
    except OSError:
        return out
    return out


def pending_paths(root: str, state_dir: str | None = None) -> frozenset[str]:
    """The relative paths (str, surrogateescape) the next scan of ``root`` must check again."""
    paths = set()
    for rec in read(root, state_dir, pending_only=True):
        try:
            paths.add(os.fsdecode(path_bytes(rec)))
        except ValueError:
            continue
    return frozenset(paths)
