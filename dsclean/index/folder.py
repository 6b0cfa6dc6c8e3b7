"""Index a dataset folder on the spot, into its state folder: ``IndexedDataset.from_folder``.

For users with a torchvision-style folder and no index yet. The index is written to
the root's state folder (never into the dataset), reused while the tree is unchanged
(same media files, sizes and mtimes, same class folders: the fingerprint
:func:`dsclean.index.build.build_index` records), and built by ONE process at a time:
under DDP every rank calls this, one takes the lock and builds, the others wait on the
lock and then reuse what it wrote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import logging
import os
from typing import Any, Iterator

from .. import locations
from ..errors import UserError
from ..scanning.discover import symlink_mode
from .build import build_index
from .judge import profile_names
from .labels import folder_classes
from .options import FILE_RULES, IndexOptions, with_overrides
from .store import read_meta
from .walk import tree_fingerprint

logger = logging.getLogger("dsclean.index")


def folder_index_path(
    root: str,
    *,
    files: str = "dsclean",
    symlinks: str = "none",
    check: bool = True,
    state_dir: str | None = None,
    loaders: tuple[str, ...] = ("pillow",),
) -> str:
    """Where :func:`index_folder` keeps the index of ``root`` built with these options."""
    extra = "" if tuple(loaders) == ("pillow",) else "|" + ",".join(loaders)  # the default keeps its old name
    key = hashlib.sha256(f"{files}|{symlinks}|{check}{extra}".encode()).hexdigest()[:8]
    return os.path.join(locations.root_state_dir(root, state_dir), f"index-{files}-{key}.arrow")


#: the fields of :class:`IndexOptions` an index of a folder is built with (the others stay at their defaults:
#: :func:`folder_index_path` and :func:`up_to_date` know these only)
FOLDER_OPTIONS = ("files", "symlinks", "check", "jobs", "scan_results", "state_dir", "progress", "loaders")


def index_folder(root: str, options: IndexOptions = IndexOptions(), **overrides: Any) -> tuple[str, bool]:
    """The path of an up-to-date index of ``root`` in its state folder, and whether this call built it.

    ``options``: how to build it (the fields of :data:`FOLDER_OPTIONS`; they may also be given as keyword
    arguments). ``loaders``: the loader profiles the index is built for (``dsclean index --loader``)."""
    options = with_overrides(options, overrides, "index_folder")
    others = [
        f.name
        for f in dataclasses.fields(IndexOptions)
        if f.name not in FOLDER_OPTIONS and getattr(options, f.name) != f.default
    ]
    if others:
        raise TypeError(
            f"index_folder() builds with {', '.join(FOLDER_OPTIONS)} only, not {others[0]}= "
            "(dsclean index ROOT -o INDEX takes every option)"
        )
    loaders = profile_names(options.loaders)
    files = options.files
    if not os.path.isdir(root):
        raise UserError(f"{root}: no such folder")
    if files not in FILE_RULES:
        raise UserError(f"unknown file rule {files!r}: use {' or '.join(FILE_RULES)}")
    root = os.path.abspath(root)
    links = symlink_mode(
        options.symlinks if options.symlinks is not None else ("all" if files == "imagefolder" else None)
    )
    state_dir = options.state_dir
    state = locations.root_state_dir(root, state_dir)
    if locations.is_inside(state, root):  # refused before anything is created: the tree is the user's
        raise UserError(
            f"the state folder {state} (state_dir= / DSCLEAN_STATE_DIR) is inside the dataset root "
            f"{root}: the index and the scan cache would become part of the data (a class folder for "
            "ImageFolder). Choose one outside ROOT"
        )
    try:
        folder = locations.make_root_state_dir(root, state_dir)
    except OSError as exc:
        raise UserError(
            f"cannot create the state folder of {root}: {exc.strerror or exc} ({exc.filename}); "
            "pass state_dir= (or set DSCLEAN_STATE_DIR) to a writable folder"
        ) from exc
    out = folder_index_path(
        root, files=files, symlinks=links, check=options.check, state_dir=state_dir, loaders=loaders
    )
    with _exclusive(os.path.join(folder, locations.INDEX_LOCK_FILE), root):
        if up_to_date(out, root, files, links):
            logger.info("reusing the index of %s: %s (the tree is unchanged)", root, out)
            return out, False
        build_index(root, out, dataclasses.replace(options, symlinks=links, loaders=loaders))
        return out, True


def up_to_date(index: str, root: str, files: str, symlinks: str) -> bool:
    """Whether ``index`` was built from ``root`` as it is now (same files, sizes, mtimes and classes)."""
    if not os.path.isfile(index):
        return False
    try:
        meta = read_meta(index)
    except UserError:
        return False
    if meta.get("root") != os.path.abspath(root) or meta.get("files") != files or meta.get("symlinks") != symlinks:
        return False
    if meta.get("labels") == "folder" and meta.get("classes") != folder_classes(
        root, (), include_hidden=files == "imagefolder"
    ):
        return False
    return meta.get("tree") == tree_fingerprint(root, files, symlinks)


@contextlib.contextmanager
def _exclusive(path: str, root: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed); wait, saying so, while another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.warning("waiting for another process that is indexing %s (lock %s)", root, path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
