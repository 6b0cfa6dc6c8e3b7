"""What a command line names: a folder of shards, a list of shard paths, a brace pattern, or plain files.

A folder is recognised without a flag: an MDS or litdata ``index.json``, ``.tar``/``.tar.gz``/``.tgz``
files, ``.parquet`` files (and no media files or subfolders beside them: an ImageFolder with a stray
``backup.tar`` stays a folder of files). ``--as KIND`` forces the reading.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from ..errors import UserError
from ..formats import format_of_name
from ..openfile import open_regular_file

if TYPE_CHECKING:
    from ..storage.fs import Store

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
    index: str | None = None  # MDS / litdata index.json (in a bucket: its key)
    store: Store | None = None  # a shard set in object storage: ``folder`` is its prefix URL, names are keys

    def path(self, name: str) -> str:
        """Where the shard ``name`` is: a local path, or its URL."""
        return self.store.url_of(name) if self.store is not None else os.path.join(self.folder, name)

    def open(self, name: str) -> IO[bytes]:
        """The shard as a stream: a regular local file (no blocking open), or the object read with retries."""
        if self.store is not None:
            from .remote import open_object

            return open_object(self.store, name)
        return open_regular_file(os.path.join(self.folder, name))

    def local(self, name: str) -> contextlib.AbstractContextManager[str | None]:
        """A local path of the shard for readers that want one (None: not there): the file itself, or a
        temp copy of the object removed after (:func:`.remote.staged`)."""
        if self.store is not None:
            from .remote import staged

            return staged(self.store, name)
        path = os.path.join(self.folder, name)
        return contextlib.nullcontext(path if os.path.lexists(path) else None)

    def read_index(self) -> dict:
        """The set's MDS or litdata ``index.json``."""
        assert self.index is not None
        if self.store is not None:
            from .remote import read_index

            return read_index(self.store, self.index)
        return read_index_json(self.index)


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


def kind_of_file(path: str) -> str | None:
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
                kind = kind_of_file(entry.name)
                if kind and not entry.is_dir():
                    # a FIFO, socket, device or dangling link named like a shard is one of the set: its open
                    # (open_regular, never blocking) refuses it and names it, instead of leaving it out unsaid
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
                raise UserError(f"{path}: no {' / '.join(suffixes(kind))} files: not a {kind} shard set")
            names = sorted(shards[kind])
            return ShardSet(kind, path, names, missing=numbering_gaps(names))
    return None


def _other(kind: str) -> str:
    return "parquet" if kind == "webdataset" else "webdataset"


def suffixes(kind: str) -> tuple[str, ...]:
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


def detect(specs: list[str], forced: str | None = None, storage_options: dict | None = None) -> ShardSet | None:
    """The shard set ``specs`` name, or None for a folder of plain media files (the ordinary scan); storage URLs
    (``s3://B/shards/``) are looked at in the bucket (:func:`.remote.detect_url`)."""
    if forced not in (None, *KINDS):
        raise UserError(f"--as {forced}: choose one of {', '.join(KINDS)}")
    if forced == "files":
        return None
    if any("://" in s for s in specs):  # only then the URL module (a folder's scan never loads it)
        from ..storage.urls import is_url

        if any(is_url(s) for s in specs):
            return detect_url(specs, forced, storage_options or {})
    if len(specs) == 1 and "{" not in specs[0]:
        path = specs[0]
        if os.path.isdir(path):
            return _folder(path, forced)
        if os.path.basename(path) == "index.json" and os.path.isfile(path):
            return _folder(os.path.dirname(path) or ".", forced)
        if not os.path.lexists(path) or (forced is None and kind_of_file(path) is None):
            return None  # the ordinary scan says the root does not exist, or is a file and not a folder
    paths: list[str] = []
    for spec in specs:
        paths.extend(expand_braces(spec) if "{" in spec else [spec])
    kinds = {forced or kind_of_file(p) for p in paths}
    if None in kinds or len(kinds) != 1:
        odd = next((p for p in paths if not (forced or kind_of_file(p))), paths[0])
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


def detect_url(specs: list[str], forced: str | None, options: dict):
    """The shard set the URLs ``specs`` name (a prefix, several shard URLs, a brace pattern), or None: a prefix
    of plain media objects (the bucket scan)."""
    from ..storage.fs import Store
    from ..storage.urls import is_url
    from .remote import exists as _exists
    from .remote import listed as _listed
    from .remote import read_index

    if not all(is_url(s) for s in specs):
        raise UserError(f"{specs[0]}: give storage URLs or local paths, not both")
    if len(specs) == 1 and "{" not in specs[0] and kind_of_file(specs[0]) is None:
        store = Store(specs[0].rstrip("/"), options)
        has_index = forced in (None, "mds", "litdata") and _exists(store, "index.json")
        shards: dict[str, list[str]] = {"webdataset": [], "parquet": []}
        if has_index:
            doc = read_index(store)
            kind = index_kind(doc)
            if forced and kind != forced:
                raise UserError(f"{store.url_of('index.json')}: not a {forced} index")
            if kind:
                return ShardSet(kind, store.url, [], index="index.json", store=store)
        if forced in ("mds", "litdata"):
            raise UserError(f"{store.url}: no index.json: not a {forced} shard set")
        for rel in _listed(store):
            kind = kind_of_file(rel)
            if "/" not in rel and kind:
                shards[kind].append(rel)
            elif forced is None and ("/" in rel or format_of_name(rel)):
                return None  # media objects or "subfolders": a prefix of files (stop listing a 10M-object prefix)
        for kind in ("webdataset", "parquet"):
            other = "parquet" if kind == "webdataset" else "webdataset"
            if forced == kind or (forced is None and shards[kind] and not shards[other]):
                if not shards[kind]:
                    raise UserError(f"{store.url}: no {' / '.join(suffixes(kind))} objects: not a {kind} shard set")
                names = sorted(shards[kind])
                return ShardSet(kind, store.url, names, missing=numbering_gaps(names), store=store)
        if forced is None and not (shards["webdataset"] or shards["parquet"]):
            return None
        raise UserError(f"{store.url}: holds both tars and Parquet files: give --as webdataset or --as parquet")
    urls: list[str] = []
    for spec in specs:
        urls.extend(expand_braces(spec) if "{" in spec else [spec])
    kinds = {forced or kind_of_file(u) for u in urls}
    if None in kinds or len(kinds) != 1:
        odd = next((u for u in urls if not (forced or kind_of_file(u))), urls[0])
        raise UserError(f"{odd}: not a shard (.tar, .tar.gz, .tgz, .parquet); or give --as webdataset|parquet")
    kind = kinds.pop()
    if kind in ("mds", "litdata"):
        raise UserError(f"--as {kind}: give the prefix holding its index.json")
    prefix = os.path.commonpath([u.rsplit("/", 1)[0] for u in urls]) if len(urls) > 1 else urls[0].rsplit("/", 1)[0]
    prefix = prefix.replace(":/", "://", 1) if "://" not in prefix else prefix  # commonpath folds the //
    store = Store(prefix, options)
    names = [u[len(prefix) + 1 :] for u in urls]
    wanted = set(names)
    present = {rel for rel in _listed(store) if rel in wanted}
    missing = [n for n in names if n not in present]
    if not present:
        raise UserError(f"{specs[0]}: none of the {len(names)} shards it names exists")
    return ShardSet(kind, store.url, [n for n in names if n in present], missing=missing, store=store)
