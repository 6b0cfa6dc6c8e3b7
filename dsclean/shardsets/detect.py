"""What a command line names: a folder of shards, a list of shard paths, a brace pattern, or plain files.

A folder is recognised without a flag: an MDS or litdata ``index.json``, ``.tar``/``.tar.gz``/``.tgz``
files, ``.parquet`` files (and no media files or subfolders beside them: an ImageFolder with a stray
``backup.tar`` stays a folder of files). ``--as KIND`` forces the reading.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass, field

from ..errors import UserError
from ..formats import format_of_name
from ..openfile import open_regular_file

KINDS = ("files", "webdataset", "mds", "litdata", "parquet")
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
PARQUET_SUFFIXES = (".parquet",)
#: names a brace pattern may expand to, at most (checked before any list is built)
MAX_EXPANDED = 1_000_000
#: folder entries looked at to recognise a shard folder
MAX_ENTRIES = 1_000_000
#: the most bytes of an index.json read
MAX_INDEX_JSON = 256 << 20
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_LIST = re.compile(r"\{([^{}]*,[^{}]*)\}")
_NUMBERED = re.compile(r"^(.*?)(\d+)((?:\.tar(?:\.gz)?|\.tgz|\.parquet))$")


@dataclass
class ShardSet:
    """The shards of one set: ``names`` relative to ``folder`` (where the deny-list goes)."""

    kind: str
    folder: str
    names: list[str]
    missing: list[str] = field(default_factory=list)  # named by a pattern or a numbering, not on disk
    index: str | None = None  # MDS / litdata index.json

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)


def expand_braces(pattern: str) -> list[str]:
    """``shards-{000..009}.tar`` -> ten names (zero padding kept), ``{a,b}`` lists; nested groups are not."""
    parts: list[list[str]] = []
    pos, count = 0, 1
    for m in re.finditer(r"\{[^{}]*\}", pattern):
        parts.append([pattern[pos : m.start()]])
        r, lst = _RANGE.fullmatch(m.group()), _LIST.fullmatch(m.group())
        if r:
            lo, hi = int(r.group(1)), int(r.group(2))
            if hi < lo:
                raise UserError(f"{pattern}: the range {m.group()} runs backwards")
            width = len(r.group(1)) if r.group(1).startswith("0") else 0
            count *= hi - lo + 1
            if count > MAX_EXPANDED:
                raise UserError(f"{pattern}: expands to more than {MAX_EXPANDED:,} names")
            parts.append([str(n).zfill(width) for n in range(lo, hi + 1)])
        elif lst:
            choices = lst.group(1).split(",")
            count *= len(choices)
            parts.append(choices)
        else:
            parts.append([m.group()])
        pos = m.end()
    parts.append([pattern[pos:]])
    if count > MAX_EXPANDED:
        raise UserError(f"{pattern}: expands to more than {MAX_EXPANDED:,} names")
    return ["".join(p) for p in itertools.product(*parts)]


def _kind_of_file(path: str) -> str | None:
    low = path.lower()
    if low.endswith(TAR_SUFFIXES):
        return "webdataset"
    if low.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def read_index_json(path: str) -> dict:
    """An MDS or litdata ``index.json``, bounded (a UserError naming the file when it is not one)."""
    try:
        with open_regular_file(path) as f:
            raw = f.read(MAX_INDEX_JSON + 1)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the index: {exc.strerror or exc}") from None
    if len(raw) > MAX_INDEX_JSON:
        raise UserError(f"{path}: more than {MAX_INDEX_JSON:,} bytes: not a shard index")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: not a JSON object: not a shard index")
    return doc


def index_kind(doc: dict) -> str | None:
    """``mds`` (a ``shards`` list), ``litdata`` (``chunks`` and ``config``), or None."""
    if isinstance(doc.get("shards"), list):
        return "mds"
    if isinstance(doc.get("chunks"), list) and isinstance(doc.get("config"), dict):
        return "litdata"
    return None


def _folder(path: str, forced: str | None) -> ShardSet | None:
    index = os.path.join(path, "index.json")
    if forced in (None, "mds", "litdata") and os.path.isfile(index):
        kind = index_kind(read_index_json(index))
        if forced and kind != forced:
            raise UserError(f"{index}: not a {forced} index (it has no {'shards' if forced == 'mds' else 'chunks'})")
        if kind:
            return ShardSet(kind, path, [], index=index)
    if forced in ("mds", "litdata"):
        raise UserError(f"{path}: no index.json: not a {forced} shard set")
    shards: dict[str, list[str]] = {"webdataset": [], "parquet": []}
    try:
        with os.scandir(path) as it:
            for entry in itertools.islice(it, MAX_ENTRIES):
                if entry.name.startswith("."):
                    continue
                kind = _kind_of_file(entry.name)
                if kind and entry.is_file():
                    shards[kind].append(entry.name)
                elif forced is None and (format_of_name(entry.name) or entry.is_dir()):
                    # media files or class folders here (an ImageFolder with a stray backup.tar is still a
                    # folder of files): stop listing a 10M-file folder now
                    return None
    except OSError as exc:
        raise UserError(f"{path}: cannot list the folder: {exc.strerror or exc}") from None
    for kind in ("webdataset", "parquet"):
        if forced == kind or (forced is None and shards[kind] and not shards[_other(kind)]):
            if not shards[kind]:
                raise UserError(f"{path}: no {' / '.join(_suffixes(kind))} files: not a {kind} shard set")
            names = sorted(shards[kind])
            return ShardSet(kind, path, names, missing=numbering_gaps(names))
    return None


def _other(kind: str) -> str:
    return "parquet" if kind == "webdataset" else "webdataset"


def _suffixes(kind: str) -> tuple[str, ...]:
    return TAR_SUFFIXES if kind == "webdataset" else PARQUET_SUFFIXES


def numbering_gaps(names: list[str], limit: int = 10_000) -> list[str]:
    """Names missing from a numbered sequence (``data-000000.tar``, ``data-000002.tar``: ``data-000001.tar``)."""
    groups: dict[tuple[str, str, int], list[int]] = {}
    for name in names:
        m = _NUMBERED.match(name)
        if m:
            groups.setdefault((m.group(1), m.group(3), len(m.group(2))), []).append(int(m.group(2)))
    missing: list[str] = []
    for (prefix, suffix, width), numbers in groups.items():
        have = set(numbers)
        for n in range(min(numbers), max(numbers) + 1):
            if n not in have:
                missing.append(f"{prefix}{str(n).zfill(width)}{suffix}")
                if len(missing) >= limit:
                    return missing
    return missing


def detect(specs: list[str], forced: str | None = None) -> ShardSet | None:
    """The shard set ``specs`` name, or None for a folder of plain media files (the ordinary scan)."""
    if forced not in (None, *KINDS):
        raise UserError(f"--as {forced}: choose one of {', '.join(KINDS)}")
    if forced == "files":
        return None
    if len(specs) == 1 and "{" not in specs[0]:
        path = specs[0]
        if os.path.isdir(path):
            return _folder(path, forced)
        if os.path.basename(path) == "index.json" and os.path.isfile(path):
            return _folder(os.path.dirname(path) or ".", forced)
        if not os.path.lexists(path) or (forced is None and _kind_of_file(path) is None):
            return None  # the ordinary scan says the root does not exist, or is a file and not a folder
    paths: list[str] = []
    for spec in specs:
        paths.extend(expand_braces(spec) if "{" in spec else [spec])
    kinds = {forced or _kind_of_file(p) for p in paths}
    if None in kinds or len(kinds) != 1:
        odd = next((p for p in paths if not (forced or _kind_of_file(p))), paths[0])
        raise UserError(
            f"{odd}: not a shard ({', '.join(TAR_SUFFIXES + PARQUET_SUFFIXES)}); give one folder to scan files, "
            "or --as webdataset|parquet"
        )
    kind = kinds.pop()
    if kind in ("mds", "litdata"):
        raise UserError(f"--as {kind}: give the folder holding its index.json")
    absolute = [os.path.abspath(p) for p in paths]
    folder = os.path.commonpath([os.path.dirname(p) for p in absolute])
    names = [os.path.relpath(p, folder) for p in absolute]
    present = [n for n in names if os.path.lexists(os.path.join(folder, n))]
    have = set(present)
    missing = [n for n in names if n not in have]
    if not present:
        raise UserError(f"{specs[0]}: none of the {len(names)} shards it names exists")
    return ShardSet(kind, folder, present, missing=missing)
