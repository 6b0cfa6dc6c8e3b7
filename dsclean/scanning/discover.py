"""Stage 1: stream the media files under a root.

Walks with ``os.scandir`` one directory at a time and yields relative paths as
it goes, so 10 million files never become a 10-million-item list. Conventions:

- media = a known extension (case-insensitive, see :mod:`dsclean.formats`);
  other files are counted, not yielded;
- dot-names (files and folders) are skipped unless ``include_hidden``;
- symlinks (``symlinks=``): ``"none"`` (default) follows none; ``"inside"`` follows
  links whose target stays inside the root; ``"all"`` follows every link (symlink
  farms whose class folders point at storage elsewhere). Each real folder is
  entered once, so a loop is detected and counted, never followed;
- ``extensions`` (lower-case, with the dot) replaces dsclean's media list, for the
  ImageFolder file rule;
- folders in ``exclude``, folders holding a quarantine marker file and a legacy
  ``<root>/.dsclean`` (left by dsclean 0.1) are never entered, so a quarantine
  inside the root is never scanned;
- a folder that cannot be listed is reported through ``on_error`` and skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from itertools import islice, repeat
from typing import Callable, Iterable, Iterator

from ..formats import _EXT_NO_DOT, EXT_TO_FORMAT
from ..locations import LEGACY_STATE_DIR

#: file written into every quarantine folder; discovery never enters a folder holding it
QUARANTINE_MARKER = ".dsclean-quarantine"
#: how symlinks are treated: none followed, only those staying inside the root, or all
SYMLINK_MODES = ("none", "inside", "all")


def symlink_mode(symlinks: str | None = None, follow_symlinks: bool = False) -> str:
    """The mode from ``--symlinks`` (checked), or ``"inside"`` for the older ``--follow-symlinks``."""
    if symlinks is None:
        return "inside" if follow_symlinks else "none"
    if symlinks not in SYMLINK_MODES:
        from ..errors import UserError

        raise UserError(f"symlinks must be one of {', '.join(SYMLINK_MODES)}, not {symlinks!r}")
    return symlinks


@dataclass
class DiscoverStats:
    """Counts of what discovery saw but did not yield."""

    media: int = 0
    ignored: int = 0  # files with a non-media extension
    hidden: int = 0  # dot-named files and folders skipped
    symlinks: int = 0  # links not followed (symlinks="none")
    outside_links: int = 0  # links leading outside the root, not followed (symlinks="inside")
    loops: int = 0  # linked folders already entered (a loop, or a second link to one folder)
    excluded_dirs: int = 0  # quarantine / report folders skipped
    dir_errors: int = 0  # folders that could not be listed
    first_errors: list[str] = field(default_factory=list)  # the first few messages, for the summary


ErrorHandler = Callable[[str, OSError], None]


def _dir_key(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def iter_media(
    root: str,
    *,
    exclude: Iterable[str] = (),
    include_hidden: bool = False,
    follow_symlinks: bool = False,
    symlinks: str | None = None,
    extensions: frozenset[str] | None = None,
    stats: DiscoverStats | None = None,
    on_error: ErrorHandler | None = None,
) -> Iterator[tuple[str, str]]:
    """Yield ``(relative_path, claimed_format)`` for every media file under ``root``.

    Paths use ``/`` and are ``str`` decoded with ``surrogateescape`` (what
    ``os.scandir`` gives), so non-UTF-8 names round-trip through ``os.fsencode``.
    """
    for rels, formats in iter_media_lists(
        root,
        exclude=exclude,
        include_hidden=include_hidden,
        follow_symlinks=follow_symlinks,
        symlinks=symlinks,
        extensions=extensions,
        stats=stats,
        on_error=on_error,
    ):
        yield from zip(rels, formats)


#: names listed per yield of :func:`iter_media_lists`, at most (a flat folder of 10M files stays bounded)
LIST_MAX = 4096


def iter_media_lists(
    root: str,
    *,
    exclude: Iterable[str] = (),
    include_hidden: bool = False,
    follow_symlinks: bool = False,
    symlinks: str | None = None,
    extensions: frozenset[str] | None = None,
    stats: DiscoverStats | None = None,
    on_error: ErrorHandler | None = None,
) -> Iterator[tuple[list[str], list[str]]]:
    """:func:`iter_media` a folder at a time: ``(relative paths, claimed formats)``, at most
    :data:`LIST_MAX` of each per yield (the scan's main process pays no generator step per file)."""
    stats = stats if stats is not None else DiscoverStats()
    mode = symlink_mode(symlinks, follow_symlinks)
    follow = mode != "none"
    real_root = os.path.realpath(root)
    # An exclude folder that does not exist yet cannot be inside the tree.
    excluded = {_dir_key(d) for d in exclude if os.path.isdir(d)}
    seen_dirs: set[tuple[int, int]] = {_dir_key(root)} if follow else set()
    formats_of = _EXT_NO_DOT

    def report(path: str, exc: OSError) -> None:
        stats.dir_errors += 1
        if len(stats.first_errors) < 20:
            stats.first_errors.append(f"{path}: {exc.strerror or exc}")
        if on_error is not None:
            on_error(path, exc)

    options = (include_hidden, follow, mode, real_root, extensions, formats_of)
    fast = not include_hidden and extensions is None  # the default: blocks of plain files take _regular_media

    # Depth-first with an explicit stack of (absolute dir, relative prefix).
    stack: list[tuple[str, str]] = [(root, "")]
    while stack:
        top, prefix = stack.pop()
        try:
            it = os.scandir(top)
        except OSError as exc:
            report(top, exc)
            continue
        with it:
            subdirs: list[tuple[str, str]] = []
            block: list[os.DirEntry] = []
            while True:  # blocks of at most LIST_MAX entries: a flat folder of millions stays bounded
                error = None
                try:
                    block.extend(islice(it, LIST_MAX))  # keeps the entries read before an error of the listing
                except OSError as exc:  # the listing itself failed: report it, keep what was read
                    error = exc
                    report(top, exc)
                if block:
                    listed = _regular_media(block, prefix, stats) if fast else None
                    if listed is None:
                        listed = _entries(block, prefix, stats, options, subdirs, report)
                    if listed[0]:
                        stats.media += len(listed[0])
                        yield listed
                if error is not None or len(block) < LIST_MAX:
                    break
                block = []
        # Folders are pushed after the listing closes: one open directory at a time.
        for path, rel in reversed(subdirs):
            try:
                key = _dir_key(path)
                if key in excluded or os.path.lexists(os.path.join(path, QUARANTINE_MARKER)):
                    stats.excluded_dirs += 1
                    continue
            except OSError as exc:
                report(path, exc)
                continue
            if follow:
                if key in seen_dirs:
                    stats.loops += 1
                    continue
                seen_dirs.add(key)
            stack.append((path, rel))


def _regular_media(block: list[os.DirEntry], prefix: str, stats: DiscoverStats) -> tuple[list[str], list[str]] | None:
    """The media of a block of directory entries that are all regular files (not links), with the default
    rules (no dot-names, dsclean's media list): a few list passes instead of Python steps per entry.
    None when the block holds anything else (folders, links, a legacy state folder's name): :func:`_entries`
    then takes the block, entry by entry."""
    try:
        names = [e.name for e in block if e.is_file(follow_symlinks=False)]
    except OSError:  # a file system without entry types, and an lstat failed: _entries reports it
        return None
    if len(names) != len(block):
        return None
    visible = names
    if any(map(str.startswith, names, repeat("."))):  # map over a C method: no Python step per name
        if not prefix and LEGACY_STATE_DIR in names:
            return None
        visible = [n for n in names if n[0] != "."]
        stats.hidden += len(names) - len(visible)
    if not visible:
        return [], []
    get = EXT_TO_FORMAT.get
    # the extension with its dot: a name without one gives its last character, never a key; no name starts with "."
    ext = visible[0][visible[0].rfind(".") :]
    fmt = get(ext.lower())
    if fmt is not None and all(map(str.endswith, visible, repeat(ext))):  # a folder of one extension: the usual case
        return [prefix + n for n in visible], [fmt] * len(visible)
    formats = [get(n[n.rfind(".") :].lower()) for n in visible]
    if None in formats:
        stats.ignored += formats.count(None)
        rels = [prefix + n for n, fmt in zip(visible, formats) if fmt is not None]
        return rels, [fmt for fmt in formats if fmt is not None]
    return [prefix + n for n in visible], formats


def _entries(
    block: list[os.DirEntry],
    prefix: str,
    stats: DiscoverStats,
    options: tuple,
    subdirs: list[tuple[str, str]],
    report: ErrorHandler,
) -> tuple[list[str], list[str]]:
    """The media of a block of directory entries, entry by entry (folders go to ``subdirs``): every rule."""
    include_hidden, follow, mode, real_root, extensions, formats_of = options
    rels: list[str] = []
    formats: list[str] = []
    for entry in block:
        name = entry.name
        if name[0] == ".":
            if name == LEGACY_STATE_DIR and not prefix:  # an older dsclean's folder in the root
                stats.excluded_dirs += 1
                continue
            if not include_hidden:
                stats.hidden += 1
                continue
        try:
            is_link = entry.is_symlink()
            if is_link and not follow:
                stats.symlinks += 1
                continue
            if is_link and mode == "inside" and not _inside(os.path.realpath(entry.path), real_root):
                stats.outside_links += 1
                continue
            is_dir = entry.is_dir(follow_symlinks=True)
        except OSError as exc:
            report(entry.path, exc)
            continue
        if is_dir:
            subdirs.append((entry.path, prefix + name + "/"))
            continue
        if extensions is None:  # format_of_name, inlined: this loop runs once per entry
            dot = name.rfind(".")
            fmt = formats_of.get(name[dot + 1 :].lower()) if dot > 0 else None
        else:
            fmt = _listed_format(name, extensions)
        if fmt is None:
            stats.ignored += 1
            continue
        rels.append(prefix + name)
        formats.append(fmt)
    return rels, formats


def _listed_format(name: str, extensions: frozenset[str]) -> str | None:
    """The format of a name whose extension is in ``extensions`` (torchvision's ``lower().endswith``), else None."""
    head, dot, ext = name.lower().rpartition(".")
    if not dot or "." + ext not in extensions:
        return None
    return EXT_TO_FORMAT.get("." + ext, "")


def _inside(path: str, real_root: str) -> bool:
    return path == real_root or path.startswith(real_root.rstrip(os.sep) + os.sep)


def peek_formats(root: str, entries: int = 256) -> set[str] | None:
    """The media formats among the first ``entries`` directory entries under ``root`` (breadth first).

    A guess of what a scan will check, made before discovery starts (the workers' forkserver
    preloads only those checkers; a worker imports any other on first use). None when no media
    file was seen in that many entries, or a folder could not be listed: then expect any format.
    Reads at most ``entries`` entries, whatever the tree's size; never follows links.
    """
    formats: set[str] = set()
    folders = [root]
    seen = 0
    while folders and seen < entries:
        try:
            with os.scandir(folders.pop(0)) as it:
                for entry in it:
                    seen += 1
                    if seen > entries:
                        break
                    if entry.name.startswith("."):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                    else:
                        fmt = _EXT_NO_DOT.get(entry.name.rpartition(".")[2].lower())
                        if fmt is not None:
                            formats.add(fmt)
        except OSError:
            return None
    return formats or None
