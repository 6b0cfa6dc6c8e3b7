"""The deny-list of a shard set: samples inside shards that must not be trained on.

A shard is never rewritten in place (and dsclean never writes inside a tar): "quarantine" for a
sample inside a shard is one line in ``denylist.jsonl`` beside the shards (:data:`FILE`). Written
by ``dsclean quarantine --from-log`` after the sample's bytes checked ``bad`` again; honoured by
``IndexedDataset`` over a packed set (a denied sample is refused on read, see
:func:`denied_rows`), left out by ``dsclean pack --denylist``, reported by ``dsclean verify``.

A line (one JSON object): ``v`` (format version, 1), ``time`` (UTC, ISO 8601), ``shard`` (the
shard's file name, relative to the folder holding the deny-list), ``key`` (the WebDataset
``__key__``), ``row`` (the packed index's row when known, else ``null``), ``path`` (+ ``path_b64``:
the sample's original file, when known), ``reason`` and ``detail`` (the re-check's verdict),
``error`` (what failed in training), ``checker`` (the checker version that judged it: see
:data:`dsclean.scanning.check.CHECKER_VERSION`) and ``source`` (who added it, e.g.
``quarantine --from-log``).

Lines are appended with ``O_APPEND``, one ``write`` each, as the failure log is
(:mod:`dsclean.failures`): a kill -9 loses at most the line being written. The file is
untrusted input when read: a non-regular file is refused without blocking, lines are at most
:data:`dsclean.failures.MAX_LINE` bytes, damaged lines are counted, never raised on.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import stat
from typing import Any, Iterable

from .failures import _lines
from .jsonpaths import path_fields
from .locations import DENYLIST_FILE

FILE = DENYLIST_FILE
VERSION = 1
FIELDS = ("v", "time", "shard", "key", "row", "path", "path_b64", "reason", "detail", "error", "checker", "source")
#: entries kept in memory at most by :func:`read_denylist` (the counts still cover every line)
MAX_ENTRIES = 10_000_000


def denylist_path(folder: str | os.PathLike) -> str:
    """The deny-list of the shards in ``folder``."""
    return os.path.join(os.fspath(folder), FILE)


def entry_line(**fields: Any) -> bytes:
    """One entry as a JSON line; unknown field names are refused, a message is cut to 2,000 characters."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown deny-list fields: {sorted(unknown)}")
    record: dict[str, Any] = {
        "v": VERSION,
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
    }
    path = fields.pop("path", None)
    if path is not None:
        record.update(path_fields(path))
    for name, value in fields.items():
        record[name] = value[:2000] if isinstance(value, str) else value
    return (json.dumps({k: record[k] for k in FIELDS if k in record}, default=str) + "\n").encode("ascii")


def append(path: str | os.PathLike, entries: Iterable[dict]) -> int:
    """Append ``entries`` (dicts of :data:`FIELDS`) to the deny-list at ``path``; returns how many.

    ``O_APPEND``, one ``write`` per line; refuses a path that is not a regular file.
    """
    path = os.fspath(path)
    lines = [entry_line(**e) for e in entries]
    if not lines:
        return 0
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: the deny-list is not a regular file")
        for data in lines:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(lines)


@dataclasses.dataclass
class DenyList:
    """What :func:`read_denylist` found."""

    path: str
    entries: list[dict]
    damaged_lines: int = 0  # not JSON, not an entry (no shard and key), or too long
    torn_lines: int = 0  # a last line without its newline
    refused: str | None = None  # why the file was not read (not a regular file, unreadable)

    def keys(self) -> set[tuple[str, str]]:
        """``(shard, key)`` of every entry."""
        return {(e["shard"], e["key"]) for e in self.entries}


def read_denylist(path: str | os.PathLike) -> DenyList:
    """The entries of the deny-list at ``path`` (none when it does not exist); never raises on its content."""
    path = os.fspath(path)
    out = DenyList(path=path, entries=[])
    if not os.path.lexists(path):
        return out
    try:
        for line, whole in _lines(path):
            if not whole:
                out.torn_lines += 1
                continue
            entry = _parse(line)
            if entry is None:
                out.damaged_lines += 1
            elif len(out.entries) < MAX_ENTRIES:
                out.entries.append(entry)
    except OSError as exc:
        out.refused = f"{path}: {exc.strerror or exc}"
    return out


def _parse(line: bytes) -> dict | None:
    try:
        entry = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict) or entry.get("v") != VERSION:
        return None
    if not isinstance(entry.get("shard"), str) or not isinstance(entry.get("key"), str):
        return None
    row = entry.get("row")
    if row is not None and (not isinstance(row, int) or isinstance(row, bool) or row < 0):
        return None
    return entry


def _key_of(path: bytes) -> str:
    # the sample key dsclean pack gives a file (dsclean.pack.samples.sample_key, which this stage cannot import)
    return hashlib.blake2b(path, digest_size=8).hexdigest()


def denied_rows(folder: str, shard_names: list[str], shard_of, path_of) -> "Any | None":
    """A boolean mask over a packed set's rows: True for a denied sample; None without a deny-list entry.

    ``shard_of``: the packed index's shard column (numpy); ``path_of(row)``: a row's path bytes. An
    entry counts when its ``row`` is in range, that row lies in the entry's shard and has the entry's
    key (so an entry can never deny another sample). Entries without a row are matched by key within
    their shard. Cost: nothing without a deny-list; else the keys of the named shards' rows only.
    """
    dl = read_denylist(denylist_path(folder))
    if not dl.entries:
        return None
    import numpy as np

    number = {name: k for k, name in enumerate(shard_names)}
    n = len(shard_of)
    mask = np.zeros(n, dtype=bool)
    by_key: dict[int, set[str]] = {}
    for e in dl.entries:
        k = number.get(e["shard"])
        if k is None:
            continue
        row = e.get("row")
        if row is not None and row < n and int(shard_of[row]) == k and _key_of(path_of(row)) == e["key"]:
            mask[row] = True
        elif row is None:
            by_key.setdefault(k, set()).add(e["key"])
    for k, keys in by_key.items():
        for row in np.flatnonzero(np.asarray(shard_of) == k).tolist():
            if _key_of(path_of(row)) in keys:
                mask[row] = True
    return mask if mask.any() else None


def unknown_entries(
    dl: DenyList, shard_names: Iterable[str], keys_of: "dict[str, set[str]] | None" = None
) -> list[dict]:
    """Entries naming a shard not in ``shard_names`` (or, with ``keys_of``, a key its shard does not hold)."""
    names = set(shard_names)
    out = []
    for e in dl.entries:
        if e["shard"] not in names or (keys_of is not None and e["key"] not in keys_of.get(e["shard"], ())):
            out.append(e)
    return out


def report(folder: str, held: "dict[str, Any]", notes: list[str] | None = None) -> dict | None:
    """What ``dsclean verify`` says about the deny-list beside the shards (None: there is none).

    ``held``: shard name -> the uint64 sample keys the shard holds (``f"{k:016x}"`` is the key). The
    counts, and the entries naming a shard or key not in the set (a stale or foreign deny-list); a
    line per finding is appended to ``notes``.
    """
    path = denylist_path(folder)
    if not os.path.lexists(path):
        return None
    dl = read_denylist(path)
    keys_of = {name: {f"{int(k):016x}" for k in ks} for name, ks in held.items()} if held else {}
    unknown = unknown_entries(dl, keys_of, keys_of)
    out = {
        "path": path,
        "entries": len(dl.entries),
        "samples": len(dl.keys()),
        "damaged_lines": dl.damaged_lines,
        "torn_lines": dl.torn_lines,
        "refused": dl.refused,
        "not_in_set": [{"shard": e["shard"], "key": e["key"], "row": e.get("row")} for e in unknown[:1000]],
        "not_in_set_count": len(unknown),
    }
    if notes is not None:
        notes.append(
            f"deny-list {path}: {out['samples']} samples denied (IndexedDataset refuses them, "
            "pack --denylist leaves them out)"
            + (f"; {dl.damaged_lines} damaged lines" if dl.damaged_lines else "")
            + (f"; refused: {dl.refused}" if dl.refused else "")
        )
        for e in unknown[:20]:
            notes.append(f"deny-list entry not in this shard set: {e['shard']} key {e['key']}")
        if len(unknown) > 20:
            notes.append(f"... and {len(unknown) - 20} more deny-list entries not in this shard set")
    return out
