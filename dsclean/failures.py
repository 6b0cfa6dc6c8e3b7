"""The training-time failure log: one JSON object a line, one file per process.

``dsclean.guard`` writes a line for each sample that failed while training (an exception in
dataset code, or a DataLoader worker that died with it in flight); ``dsclean quarantine
--from-log``, the next ``dsclean scan`` and ``dsclean report`` read them back.

Files. A run names one log, e.g. ``runs/failures.jsonl``. Each process appends to its own
file next to it — ``runs/failures.rank0.worker3.jsonl``, ``runs/failures.rank0.main.jsonl``
— so no two processes share a file and no lock is needed. A line is written with a single
``write`` on a descriptor opened ``O_APPEND``: a kill -9 loses at most the line being
written (a last line without its newline), never an earlier one. :func:`read_failures`
reads the named file and every per-process file beside it, merged by time.

A line (:data:`FIELDS`; absent or ``null`` where the process could not tell):
``v`` (format version, 1), ``time`` (UTC, ISO 8601), ``rank``, ``worker`` (DataLoader worker
id, ``null`` in the main process), ``pid``, ``epoch``, ``index`` (the dataset index asked for),
``path`` (+ ``path_b64`` for a name that is not UTF-8, as everywhere in dsclean's JSON) and
``root`` (the dataset root the path is relative to, when it is relative), ``shard``, ``key`` and
``row`` (a sample inside a shard set), ``kind`` (``exception`` or ``worker_died``), ``error``
(the exception's type name, or the signal's name), ``message``, ``traceback`` (a list of the
last frames, ``file:line in function``), ``action`` (``raise``, ``skip`` or ``replace``) and
``replaced_by`` (the index served instead, for ``replace``).

Logs are untrusted input (they may be copied between machines, cut, or edited): the reader
refuses what is not a regular file without blocking, reads at most :data:`MAX_LINE` bytes a
line, and counts — never raises on — lines it cannot use.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import glob
import json
import os
import stat
from typing import Any, Iterator

from .jsonpaths import path_fields
from .openfile import open_regular

VERSION = 1
#: the fields of a failure line, in the order they are written
FIELDS = (
    "v",
    "time",
    "rank",
    "worker",
    "pid",
    "epoch",
    "index",
    "path",
    "path_b64",
    "root",
    "shard",
    "key",
    "row",
    "kind",
    "error",
    "message",
    "traceback",
    "action",
    "replaced_by",
)
KINDS = ("exception", "worker_died")
ACTIONS = ("raise", "skip", "replace")
#: a line longer than this is not a failure line (a message is cut to MAX_MESSAGE before writing)
MAX_LINE = 64 * 1024
MAX_MESSAGE = 2000
MAX_FRAMES = 8


def process_log_path(log: str | os.PathLike, *, rank: int | None, worker: int | None) -> str:
    """The file this process appends to: ``<stem>.rank<R>.<worker<W>|main><suffix>`` next to ``log``."""
    log = os.fspath(log)
    stem, suffix = _split(log)
    who = "main" if worker is None else f"worker{int(worker)}"
    return f"{stem}.rank{0 if rank is None else int(rank)}.{who}{suffix}"


def _split(log: str) -> tuple[str, str]:
    stem, suffix = os.path.splitext(log)
    return (stem, suffix) if suffix else (log, ".jsonl")


def failure_line(**fields: Any) -> bytes:
    """One failure as a JSON line (UTF-8, ending in ``\\n``); unknown field names are refused."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown failure-log fields: {sorted(unknown)}")
    record: dict[str, Any] = {"v": VERSION, "time": _now()}
    path = fields.pop("path", None)
    if path is not None:
        record.update(path_fields(path))
    for name, value in fields.items():
        if name == "message" and isinstance(value, str) and len(value) > MAX_MESSAGE:
            value = value[:MAX_MESSAGE] + "…"
        if name == "traceback" and value is not None:
            value = [str(f)[:500] for f in list(value)[-MAX_FRAMES:]]
        record[name] = value
    line = json.dumps({k: record[k] for k in FIELDS if k in record}, default=str)  # ASCII: any reader takes it
    data = (line + "\n").encode("ascii")
    if len(data) > MAX_LINE:  # only a huge key or path gets here: keep the line readable
        record["message"] = (record.get("message") or "")[:200]
        record["traceback"] = None
        data = (json.dumps({k: record[k] for k in FIELDS if k in record}, default=str) + "\n").encode("ascii")
    return data


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


class FailureWriter:
    """Appends failure lines to one process's file: ``O_APPEND``, one ``write`` per line.

    Opened lazily on the first failure (a clean run creates no file) and again after a fork
    (the child's pid differs), so an instance can be pickled into DataLoader workers. A file whose
    last line was torn (a process killed mid-write) gets a newline first, so the torn fragment
    stays one unreadable line and the next failure a line of its own.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._fd: int | None = None
        self._pid: int | None = None

    def write(self, **fields: Any) -> None:
        data = failure_line(**fields)
        fd = self._open()
        view = memoryview(data)
        while view:  # a regular file takes it in one write; a short write is finished, never dropped
            n = os.write(fd, view)
            view = view[n:]

    def _open(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            folder = os.path.dirname(self.path)
            if folder:
                os.makedirs(folder, exist_ok=True)
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(self.path, flags, 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(f"{self.path}: the failure log is not a regular file")
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # end the torn line a killed process left
                os.write(fd, b"\n")
            self._fd, self._pid = fd, os.getpid()
        return self._fd

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])


@dataclasses.dataclass
class FailureLogs:
    """What :func:`read_failures` found: the failures (dicts, merged by time) and what it could not use."""

    failures: list[dict]
    files: list[str]
    damaged_lines: int = 0  # not JSON, not an object, or longer than MAX_LINE
    torn_lines: int = 0  # a last line without its newline (a process killed mid-write)
    refused: list[str] = dataclasses.field(default_factory=list)  # "path: reason" for files not read


def log_files(log: str | os.PathLike) -> list[str]:
    """The named log (if present) and every per-process file beside it, sorted."""
    log = os.fspath(log)
    stem, suffix = _split(log)
    found = set(glob.glob(glob.escape(stem) + ".rank*" + glob.escape(suffix)))
    if os.path.lexists(log):
        found.add(log)
    return sorted(found)


def read_failures(*logs: str | os.PathLike, limit: int | None = None) -> FailureLogs:
    """Every failure recorded under the named logs (each with its per-process files), merged by time.

    ``limit`` keeps at most that many failures (the first read), so a hostile or runaway log
    cannot size memory; the counts still cover every line.
    """
    out = FailureLogs(failures=[], files=[])
    for log in logs:
        for path in log_files(log):
            try:
                lines = _lines(path)
                out.files.append(path)
                for line, whole in lines:
                    if not whole:
                        out.torn_lines += 1
                        continue
                    record = _parse(line)
                    if record is None:
                        out.damaged_lines += 1
                    elif limit is None or len(out.failures) < limit:
                        out.failures.append(record)
            except OSError as exc:
                out.refused.append(f"{path}: {exc.strerror or exc}")
    out.failures.sort(key=lambda r: str(r.get("time", "")))
    return out


def iter_failures(*logs: str | os.PathLike) -> Iterator[dict]:
    """The failures of :func:`read_failures`, one file at a time, in file order (bounded memory)."""
    for log in logs:
        for path in log_files(log):
            for line, whole in _lines(path):
                record = _parse(line) if whole else None
                if record is not None:
                    yield record


def _lines(path: str) -> Iterator[tuple[bytes, bool]]:
    """(line, ends with a newline) for each line of a regular file; over-long lines come back as b''."""
    fd = open_regular(path)
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            while True:
                line = f.readline(MAX_LINE + 1)
                if not line:
                    return
                if len(line) > MAX_LINE:
                    while line and not line.endswith(b"\n"):  # skip the rest of it, in bounded pieces
                        line = f.readline(MAX_LINE + 1)
                    yield b"", True
                    continue
                yield line, line.endswith(b"\n")
    finally:
        if fd >= 0:
            os.close(fd)


def _parse(line: bytes) -> dict | None:
    try:
        record = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or record.get("v") != VERSION:
        return None
    return record
