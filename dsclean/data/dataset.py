"""IndexedDataset: a map-style Dataset over a dsclean index whose worker memory stays constant.

Why the memory trick matters (the problem detectron2's ``data/common.py``
describes): a Dataset holding a Python list of N path strings is N+1 Python
objects. DataLoader workers are forked, and merely *reading* a Python object
writes its reference count, so every page the list touches is copied into each
worker (copy-on-write): with millions of samples and 8 workers the memory
grows by gigabytes, and with ``spawn`` the whole list is pickled to each
worker. Here no per-sample Python object exists in any process: each process
memory-maps the index file on first access and slices a path out of numpy
views over the mapping (offsets + one byte blob). The mapped pages are
file-backed page cache, shared by every worker and never copied. Pickling the
dataset sends only its options (a few hundred bytes).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import io
import logging
import operator
import os
import re
import stat
import sys
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from torch.utils.data import Dataset

from .. import formats
from ..errors import UserError
from ..index.options import OPTION_NAMES, IndexOptions, with_overrides
from ..index.store import KINDS, NPY_META, MappedIndex, open_index, read_meta
from ..openfile import open_regular_file
from . import shards
from .errors import SampleError, UnsafePathError
from .loaders import DEFAULT_LOADERS, default_loaders

log = logging.getLogger("dsclean.data.dataset")
_ON_ERROR = ("raise", "skip", "replace")  # skip/replace: dsclean.guard's (dsclean/data/guard.py)
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
#: IndexedDataset(follow_symlinks=...): links must stay inside the root, or may lead anywhere
_FOLLOW = ("inside", "all")
#: initial slots of the per-process table of folders known to stay inside the root (doubles at half full)
_FOLDER_SLOTS = 1 << 12

#: bumped in every forked child, so a dataset notices it must map the index again (cheaper than os.getpid per sample)
_fork_generation = 0


def _after_fork() -> None:
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork)


class FolderTable:
    """Folders already checked to resolve inside the root: 64-bit hashes in a numpy open-addressing table.

    Per process, 17 bytes a folder at most, never cleared (no cliff past some
    count), no Python object per folder. Each folder also records whether it held a
    symlink when it was checked (only then does each file in it cost an ``lstat``).
    A 64-bit hash collision with an unchecked folder has probability ~folders/2**64.
    """

    def __init__(self, slots: int = _FOLDER_SLOTS) -> None:
        self._resize(slots)

    def _resize(self, slots: int) -> None:
        self.keys = np.zeros(slots, np.uint64)  # 0 = empty
        self.links = np.zeros(slots, np.uint8)  # 1 = the folder held a symlink
        self.view, self.link_view = memoryview(self.keys), memoryview(self.links)  # indexing gives Python ints
        self.mask = slots - 1
        self.count = 0

    def find(self, h: int) -> int:
        """The slot holding ``h``, or -1."""
        view, mask = self.view, self.mask
        slot = h & mask
        while True:
            k = view[slot]
            if k == h:
                return slot
            if k == 0:
                return -1
            slot = (slot + 1) & mask

    def add(self, h: int, links: bool) -> None:
        if 2 * (self.count + 1) > len(self.keys):
            keep = self.keys != 0
            old_keys, old_links = self.keys[keep].tolist(), self.links[keep].tolist()
            self._resize(2 * len(self.keys))
            for k, link in zip(old_keys, old_links):
                self.add(k, bool(link))
        view, mask = self.view, self.mask
        slot = h & mask
        while view[slot] not in (0, h):
            slot = (slot + 1) & mask
        if view[slot] == 0:
            self.count += 1
        self.keys[slot], self.links[slot] = h, links


def resolve_source(source: str | os.PathLike) -> tuple[str, str]:
    """What ``IndexedDataset``'s first argument names: ``(format, path)``. One place, one branch per kind.

    A file is an Arrow index; a folder holding ``shardindex.json`` + ``index.arrow``
    is a packed shard set (``dsclean pack``); a folder holding ``meta.json`` is an npy
    index; a folder of a pack that has not finished is a :class:`UserError` saying so;
    any other folder is a dataset that has no index yet (a :class:`UserError`
    pointing to :meth:`IndexedDataset.from_folder`).
    """
    path = os.fspath(source)
    if re.match(r"^[a-z][a-z0-9+.-]*://", path, re.IGNORECASE) and not path.lower().startswith("file://"):
        raise UserError(
            f"{path}: IndexedDataset reads a pack or an index on local (or mounted) disk, not in a bucket: copy the "
            "pack to local disk first (e.g. aws s3 sync), or stream its shards with webdataset (docs: Buckets)"
        )
    if os.path.isfile(path):
        return "arrow", path
    if os.path.isdir(path):
        if shards.is_packed_set(path):
            return "packed", path
        if os.path.isfile(os.path.join(path, NPY_META)):
            return "npy", path
        shards.refuse_unfinished_pack(path)
        raise UserError(
            f"{path} is a folder but not a dsclean index. For a dataset folder (the ImageFolder layout) "
            f"use IndexedDataset.from_folder({path!r}), or first run: dsclean scan {path} --quarantine "
            f"DIR && dsclean index {path} -o INDEX.arrow"
        )
    raise UserError(f"{path}: index not found")


def _loader_profile(index: str, meta: dict, loader, profile: str | None, allow_mismatch: bool) -> str | None:
    """The loader profile the dataset loads with, checked against the ones the index was built for
    (``meta["loaders"]``, ``dsclean index --loader``): another one is refused unless ``allow_mismatch``.

    No ``loader``: ``profile`` (default pillow/soundfile, dsclean's default loaders). A ``loader`` without a
    ``profile``: a custom loader, accepted for an index built for the default loaders only (an index built for
    opencv was checked with opencv's decode: say which profile your loader is)."""
    from ..loaders.profiles import profile as known

    if profile is not None:
        known(profile)
    built = meta.get("loaders")
    if profile is None and loader is None:
        profile = "pillow"
    if built is None or allow_mismatch:
        return profile  # an index from before loader profiles, or the caller's explicit choice
    default = {"pillow", "soundfile"}
    if profile is None:
        if set(built) & default:
            return None
        raise UserError(
            f"{index}: built for the loader {', '.join(built)} (dsclean index --loader), and a custom "
            f"loader= was given: pass loader_profile={built[0]!r} if it is that loader, or "
            "allow_loader_mismatch=True to load with it anyway"
        )
    ok = set(built) | (default if set(built) & default else set())
    if profile not in ok:
        raise UserError(
            f"{index}: built for the loader {', '.join(built)} (dsclean index --loader), not "
            f"{profile!r}: its files were checked with another decoder. Index again with "
            f"--loader {profile}, or pass allow_loader_mismatch=True"
        )
    return profile


def _profile_loader(name: str) -> Callable[[Any], Any]:
    """The load function of a loader profile (its library imported now: a missing one names the extra)."""
    from ..loaders.profiles import ProfileLoader, require

    require([name])
    return ProfileLoader(name)


class IndexedDataset(Dataset):
    """``(sample, label)`` pairs from a dsclean index (Arrow file or npy folder): a drop-in for ``ImageFolder``.

    The arguments follow torchvision's order, so ``IndexedDataset(index, transform)``
    works where ``ImageFolder(root, transform)`` did; ``.samples``/``.imgs``,
    ``.targets``, ``.classes``, ``.class_to_idx`` and ``.extensions`` are there too.

    - ``loader(path)``: replaces the default loaders (images: PIL RGB; audio:
      ``(tensor (channels, frames), sample_rate)``). ``transform`` gets the
      sample, ``target_transform`` the label, as in torchvision.
    - ``loader_profile``: the loader profile training uses (``pillow``, ``opencv``, ``torchvision``, ...;
      :mod:`dsclean.loaders.profiles`); without ``loader=`` its load function is the loader. An index built
      for other profiles (``dsclean index --loader``) is refused, naming them, unless ``allow_loader_mismatch``.
    - ``root``: where the files are; defaults to the root recorded at build time
      (pass it for a moved dataset). A URL root (an index of a bucket prefix, ``dsclean index s3://...``, or
      ``root="s3://..."``) reads each sample's object through fsspec: one GET into memory, retried with
      backoff, a 404/403 a :class:`SampleError` naming the key; each process (a forked worker too) opens
      its own filesystem. ``storage_options``: the store's fsspec options (default: the environment's
      credentials and endpoint); only for a URL root, never stored.
    - ``on_error="raise"`` raises :class:`SampleError`; ``"skip"`` and ``"replace"`` are
      :func:`dsclean.guard`'s policies, run by a guard this dataset keeps (one implementation):
      ``"skip"`` returns ``None`` for a sample that cannot be loaded or transformed (a warning on
      the ``dsclean.guard`` logger) -- use :func:`collate_skip_none`; ``"replace"`` loads another
      sample chosen from the failed index. Unsafe paths (:class:`UnsafePathError`) always raise.
      For a failure log or a budget, give the policy to the guard instead:
      ``dsclean.guard(IndexedDataset(index), on_error="skip", log=..., max_failures=...)``.
    - ``check_stale``: compare each file's size with the index before loading it
      (one ``stat``); a changed file is reported as stale instead of being decoded
      as something else. Turn it off only for a custom ``loader`` that does not
      read the file system.
    - ``follow_symlinks``: ``"inside"`` (default) refuses a path that leads out of
      the root through a symlink; ``"all"`` follows links anywhere (a symlink farm).
      Only this argument decides: never the index's metadata.

    A packed shard set (the folder ``dsclean pack`` wrote) works the same way:
    each sample's bytes are sliced out of a per-process ``mmap`` of its shard
    (at most ``max_open_shards`` maps open; see :mod:`dsclean.data.shards`), the
    default loaders decode them from memory, a custom ``loader`` gets a binary
    file object, ``path(i)`` is the original relative path (for reference: it is
    not opened), and ``root=`` is refused. The folder can be moved.

    The constructor maps the index and validates it (:func:`dsclean.index.store.validate`:
    a damaged or hostile index is a ``UserError`` naming the first bad row; ~0.1 s per
    10M rows); ``len()`` is the validated row count. Every other process (a worker)
    maps it again on first access and trusts that validation while the file keeps the
    same identity (device, inode, size, mtime).
    """

    def __init__(
        self,
        index: str | os.PathLike,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        loader: Callable[[str], Any] | None = None,
        *,
        root: str | None = None,
        on_error: str = "raise",
        check_stale: bool = True,
        follow_symlinks: str = "inside",
        max_open_shards: int = shards.DEFAULT_MAX_OPEN,
        loader_profile: str | None = None,
        allow_loader_mismatch: bool = False,
        storage_options: dict | None = None,
    ) -> None:
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {_ON_ERROR}, not {on_error!r}")
        if follow_symlinks not in _FOLLOW:
            raise ValueError(f"follow_symlinks must be one of {_FOLLOW}, not {follow_symlinks!r}")
        kind, index = resolve_source(index)
        self.packed = kind == "packed"
        if self.packed and root is not None:
            raise UserError(
                f"{index}: is a packed shard set: its samples are inside its shards, so root= does "
                "not apply (the set finds its shards relative to its own folder)"
            )
        meta = read_meta(shards.packed_index(index) if self.packed else index)
        self.index = index
        self.max_open_shards = max_open_shards
        self.root = None if self.packed else root if root is not None else meta["root"]
        self.store = _store_of(index, self.root, storage_options)
        if self.store is not None:
            self.root = self.store.url
        # where local reads happen: the root, or a file:// root's folder (read with the local checks, not fsspec's)
        self._fs_root = self._local_root()
        if self._fs_root is not None and not os.path.isdir(self._fs_root):
            raise UserError(f"{index}: its root {self.root} is not a folder; pass root= if the dataset moved")
        self.loader_profile = _loader_profile(index, meta, loader, loader_profile, allow_loader_mismatch)
        if loader is None and self.loader_profile not in (None, "pillow", "soundfile"):
            loader = _profile_loader(self.loader_profile)
        self.transform = transform
        self.target_transform = target_transform
        self.loader = loader
        self.on_error = on_error
        self.check_stale = check_stale
        self.follow_symlinks = follow_symlinks
        self._reset()
        self._meta = meta
        self._trusted: tuple | None = None
        self._rows = len(self._mapped())  # validated here, once; workers trust it for the same file identity
        self._trusted = self._idx.identity
        if self.store is not None and self.store.scheme != "file":
            self._check_store()

    @classmethod
    def from_folder(
        cls,
        root: str | os.PathLike,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        loader: Callable[[str], Any] | None = None,
        *,
        options: IndexOptions | None = None,
        **kwargs,
    ) -> "IndexedDataset":
        """Index a dataset folder now (into its state folder, never into it) and open the index.

        ``options``: how to index it, an :class:`~dsclean.index.options.IndexOptions` of the fields
        :func:`~dsclean.index.folder.index_folder` takes (``files``, ``symlinks``, ``check``, ``jobs``,
        ``scan_results``, ``state_dir``, ``progress``, ``loaders``); each may also be given as a keyword
        argument, which overrides it. Other keyword arguments go to the constructor.

        An up-to-date index of the folder is reused; under DDP one process builds
        (under a lock) while the others wait. ``files="imagefolder"`` takes exactly
        the files torchvision's ``ImageFolder`` takes (and follows symlinks, so the
        dataset gets ``follow_symlinks="all"``). Files are checked as in
        ``dsclean index`` (``check=False``: magic bytes only); bad ones are left out.
        ``loaders``: the loader profiles to check with and record (``dsclean index --loader``; default: the
        ``loader_profile`` given, else pillow).
        """
        from ..index.folder import index_folder
        from ..storage.urls import is_url

        root = os.fspath(root)
        if is_url(root):
            raise UserError(
                f"{root}: from_folder indexes a local folder; for a bucket prefix run dsclean index {root} -o "
                "INDEX.arrow, then IndexedDataset('INDEX.arrow')"
            )
        chosen = with_overrides(
            options or IndexOptions(), {k: kwargs.pop(k) for k in list(kwargs) if k in OPTION_NAMES}, "from_folder"
        )
        if not chosen.loaders:
            chosen = dataclasses.replace(chosen, loaders=(kwargs.get("loader_profile") or "pillow",))
        index, _ = index_folder(root, chosen)
        links = read_meta(index).get("symlinks")
        if links == "all":  # the caller asked for it (files="imagefolder" or symlinks="all"): not the metadata's say
            kwargs.setdefault("follow_symlinks", "all")
        return cls(index, transform, target_transform, loader, root=root, **kwargs)

    # -- process-local state: never pickled ------------------------------------------

    def _reset(self) -> None:
        self._meta: dict | None = None
        self._idx: MappedIndex | None = None
        self._packed_set: shards.PackedSet | None = None
        self._pid: int | None = None
        self._generation: int = -1
        self._real_root: str | None = None
        self._folders = FolderTable()
        self._guard = None
        self._labels = self._sizes = self._kinds = self._offsets = self._data = None
        self._targets: Targets | None = None
        self._loaders = DEFAULT_LOADERS

    def __getstate__(self) -> dict:
        """Only the options: a worker re-maps the index itself (cheap spawn)."""
        return {
            k: getattr(self, k)
            for k in (
                "index",
                "root",
                "transform",
                "target_transform",
                "loader",
                "loader_profile",
                "on_error",
                "check_stale",
                "follow_symlinks",
                "packed",
                "max_open_shards",
                "_rows",
                "_trusted",
                "store",  # a URL root's Store: its URL and options; each process opens its own filesystem
            )
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fs_root = self._local_root()  # derived from the root and the store, not sent
        self._reset()

    def _mapped(self) -> MappedIndex:
        """The mapped columns of this process; (re)opened on first use and after a fork.

        The process that constructed the dataset validated the index; others (spawned
        workers) trust that while the file keeps the same identity (dev, inode, size, mtime).
        """
        if self._idx is None or self._generation != _fork_generation:
            if self.packed:
                self._packed_set = shards.PackedSet(self.index, self.max_open_shards)
                idx = self._packed_set.idx
            else:
                idx = open_index(self.index, trusted=self._trusted)
            if self._trusted is not None and len(idx) != self._rows:
                raise UserError(
                    f"{self.index}: the index changed since the dataset was created "
                    f"({self._rows:,} rows then, {len(idx):,} now); create the dataset again"
                )
            self._idx = idx
            self._generation = _fork_generation
            self._pid = os.getpid()
            self._real_root = None if self._fs_root is None else os.path.realpath(self._fs_root)
            self._root_prefix = "" if self._fs_root is None else os.path.join(self._fs_root, "")
            self._folders = FolderTable()
            # memoryviews over the mapped columns for the per-sample path: indexing one gives a Python int
            # (no numpy scalar), slicing the data gives the path bytes; still zero copy
            self._labels, self._sizes, self._kinds, self._offsets, self._data = (
                memoryview(np.ascontiguousarray(col))
                for col in (idx.labels, idx.sizes, idx.kinds, idx.offsets, idx.data)
            )
            if self._meta is None:
                self._meta = idx.meta
            # an index that ships what scan --lenient accepted (--include-warn truncated) reads it as the scan did
            # and one built from a `scan --exif apply` turns images as their EXIF orientation says
            self._loaders = default_loaders(self._meta)
        return self._idx

    @property
    def meta(self) -> dict:
        if self._meta is None:
            self._meta = read_meta(shards.packed_index(self.index) if self.packed else self.index)
        return self._meta

    # -- sequence protocol -------------------------------------------------------------

    def __len__(self) -> int:
        return self._rows  # the validated row count (the metadata's, checked against every column)

    @property
    def classes(self) -> list[str]:
        return list(self.meta["classes"])

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.meta["classes"])}

    @property
    def targets(self) -> "Targets":
        """All labels as an int64 array that indexes and iterates as ints (like ImageFolder's list).

        int64 because training code does ``torch.tensor(ds.targets)`` and indexes tensors or feeds a
        loss with it, which needs int64; the index stores narrower labels, so this is a copy (8 bytes a
        sample), made once per process on first access and kept (never pickled to workers). Like
        ImageFolder's list, changing it changes what later reads of ``ds.targets`` see, not the index.
        """
        if self._targets is None:
            self._targets = self._mapped().labels.astype(np.int64).view(Targets)
        return self._targets

    @property
    def samples(self) -> "Samples":
        """``(path, label)`` pairs like ``ImageFolder.samples``: a lazy read-only sequence over the mapping."""
        return Samples(self)

    imgs = samples  # torchvision's older name

    @property
    def extensions(self) -> tuple[str, ...]:
        """The file extensions the index was built from (``ImageFolder.extensions``)."""
        recorded = self.meta.get("extensions")
        return tuple(recorded) if isinstance(recorded, list) else tuple(sorted(formats.MEDIA_EXTENSIONS))

    def _position(self, i) -> int:
        n = len(self)
        i = operator.index(i)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"index {i} out of range for {n} samples")
        return j

    def path(self, i: int) -> str:
        """The relative path of sample ``i`` (``str``; ``os.fsencode`` gives the exact bytes).

        For a packed set it is the file's original path, for reference: it is not opened.
        """
        return os.fsdecode(self._mapped().path_bytes(self._position(i)))

    def raw(self, i: int) -> bytes:
        """The bytes of sample ``i``, undecoded: from its shard, or read from its file."""
        j = self._position(i)
        idx = self._mapped()
        if self.packed:
            return self._packed_set.read(j)
        if self.store is not None:
            from ..storage.reads import ObjectError

            rel = os.fsdecode(idx.path_bytes(j))
            try:
                return self._read_object(j, rel)
            except (ObjectError, OSError) as exc:  # as a sample's read: a SampleError naming the key
                raise self._error(j, rel, str(exc)) from exc
        full, _ = self._resolve(j, os.fsdecode(idx.path_bytes(j)))
        with open_regular_file(full) as f:
            return f.read()

    def __getitem__(self, i):
        if self.on_error != "raise":
            return self.guarded()[i]
        return self._get(i)

    def guarded(self):
        """The :func:`dsclean.guard` that runs this dataset's ``on_error`` (``skip``/``replace``).

        It wraps a view of this dataset whose errors raise; ``dsclean.DataLoader`` runs this guard
        (with its ``log``) when given the dataset. Built once per process, never pickled.
        """
        if self.on_error == "raise":
            raise ValueError("an IndexedDataset with on_error='raise' has no guard; use dsclean.guard(dataset)")
        if self._guard is None:
            from .guard import guard

            self._guard = guard(Raising(self), on_error=self.on_error)
        return self._guard

    def _get(self, i):
        if self._idx is None or self._generation != _fork_generation:
            self._mapped()
        j = i if type(i) is int and 0 <= i < self._rows else self._position(i)
        off = self._offsets
        return self._load(j, bytes(self._data[off[j] : off[j + 1]]), self._labels[j])

    def __getitems__(self, indices: Sequence[int]) -> list:
        """The batched hook of PyTorch's fetcher: gathers a whole batch's rows at once (vectorized)."""
        if self.on_error != "raise":
            g = self.guarded()
            return [g[i] for i in (indices.tolist() if isinstance(indices, np.ndarray) else indices)]
        idx = self._mapped()
        n = len(idx)
        pos = np.asarray(indices, dtype=np.int64).reshape(-1)
        pos = np.where(pos < 0, pos + n, pos)
        if pos.size and (pos.min() < 0 or pos.max() >= n):
            bad = np.asarray(indices).reshape(-1)[(pos < 0) | (pos >= n)][0]
            raise IndexError(f"index {int(bad)} out of range for {n} samples")
        starts, ends = idx.offsets[pos], idx.offsets[pos + 1]
        labels = idx.labels[pos]
        data = idx.data
        return [
            self._load(j, data[s:e].tobytes(), lab)
            for j, s, e, lab in zip(pos.tolist(), starts.tolist(), ends.tolist(), labels.tolist())
        ]

    # -- loading -----------------------------------------------------------------------

    def _load(self, j: int, raw: bytes, label: int):
        rel = raw.decode(_FS_ENCODING, _FS_ERRORS)  # os.fsdecode, without its per-call checks
        if self.store is not None:
            return self._load_object(j, rel, label)
        if not self.packed:
            full, st = self._resolve(j, rel)  # outside the try: a refusal is never skipped
        try:
            sample = self._read_packed(j) if self.packed else self._read(j, full, st)
        except Exception as exc:  # any loader failure becomes a SampleError naming index, path and cause
            raise self._error(j, rel, f"{type(exc).__name__}: {exc}") from exc
        try:
            if self.transform is not None:
                sample = self.transform(sample)
            target = self.target_transform(label) if self.target_transform is not None else label
        except Exception as exc:
            raise self._error(j, rel, f"in transform: {type(exc).__name__}: {exc}") from exc
        return sample, target

    def _load_object(self, j: int, rel: str, label: int):
        """A sample of a URL root: its object's bytes from the store, decoded from memory."""
        try:
            data = self._read_object(j, rel)
            sample = (
                self.loader(io.BytesIO(data))
                if self.loader is not None
                else self._loaders[KINDS[self._kinds[j]]](io.BytesIO(data))
            )
        except UnsafePathError:
            raise
        except Exception as exc:
            raise self._error(j, rel, f"{type(exc).__name__}: {exc}") from exc
        try:
            if self.transform is not None:
                sample = self.transform(sample)
            target = self.target_transform(label) if self.target_transform is not None else label
        except Exception as exc:
            raise self._error(j, rel, f"in transform: {type(exc).__name__}: {exc}") from exc
        return sample, target

    def _read_object(self, j: int, rel: str) -> bytes:
        """The bytes of object ``rel`` (relative to the URL root), read with retries and backoff; a missing or
        refused object raises naming its key, a size other than the index's is a stale entry."""
        from ..storage.reads import read_object

        if not rel or rel[0] == "/" or "\0" in rel or ".." in rel.split("/"):
            raise self._unsafe(j, rel, "refused: the key is absolute or escapes the prefix")
        assert self.store is not None
        if self.store.scheme == "file":  # a local folder: the local path's checks (links, FIFOs), never fsspec's
            full, _ = self._resolve(j, rel)
            with open_regular_file(full) as f:
                data = f.read()
        else:
            data = read_object(self.store, rel)
        if self.check_stale and len(data) != self._sizes[j]:
            raise StaleEntryError(
                f"stale index entry: the object is {len(data)} bytes, the index recorded {self._sizes[j]}; "
                "it changed since indexing, rebuild the index"
            )
        return data

    def _read(self, j: int, full: str, st: os.stat_result | None):
        if self.check_stale:
            size = self._sizes[j]
            now = (st if st is not None else os.stat(full)).st_size  # os.stat raises, naming a missing file
            if now != size:
                raise StaleEntryError(
                    f"stale index entry: the file is {now} bytes, the index recorded {size}; "
                    "it changed since indexing, rebuild the index"
                )
        if self.loader is not None:
            return self.loader(full)
        return self._loaders[KINDS[self._kinds[j]]](full)

    def _read_packed(self, j: int):
        data = io.BytesIO(self._packed_set.read(j))
        return self.loader(data) if self.loader is not None else self._loaders[KINDS[self._kinds[j]]](data)

    def _resolve(self, j: int, rel: str) -> tuple[str, os.stat_result | None]:
        """The full path and its stat (None if it has none); refuses paths that leave the root.

        Refused: absolute paths, ``..`` components, and anything resolving outside
        ``realpath(root)`` through a symlink. Each folder is checked once per process
        (a ``realpath`` and one listing, remembered in a :class:`FolderTable`); a file
        costs an ``lstat`` (and a ``realpath`` if it is a link) only when its folder
        held a symlink when it was checked. A link created in a folder after this
        process first read from it is not seen until the next process (the next epoch's
        workers): the check guards against the dataset's layout, not a concurrent attacker.
        """
        if not rel or rel[0] == "/" or "\0" in rel or (".." in rel and ".." in rel.split("/")):
            raise self._unsafe(j, rel, "refused: the path is absolute or escapes the root")
        full = self._root_prefix + rel  # os.path.join(root, rel) for a relative rel
        if self.follow_symlinks == "all":  # the caller's choice: links may lead anywhere
            try:
                return full, os.stat(full)
            except OSError:
                return full, None
        cut = rel.rfind("/")
        folder = rel[:cut] if cut > 0 else ""
        table = self._folders
        h = (
            hash(folder) & 0xFFFF_FFFF_FFFF_FFFF
        ) or 1  # 64-bit, non-zero; salted per process (fine: a per-process table)
        slot = h & table.mask
        if table.view[slot] != h:
            slot = table.find(h)
        links = table.link_view[slot] if slot >= 0 else self._check_folder(j, rel, folder, h)
        if not links:  # the folder held no symlink when first seen: no per-file lstat
            return full, None
        try:
            st = os.lstat(full)
        except OSError:
            return full, None  # missing or unreadable: the loader (or the stale check) reports it
        if st.st_mode & 0o170000 == stat.S_IFLNK:
            real = os.path.realpath(full)
            if not self._inside(real):
                raise self._unsafe(
                    j,
                    rel,
                    f"refused: it resolves to {real}, outside the root "
                    "(IndexedDataset(..., follow_symlinks='all') follows such links)",
                )
            try:
                st = os.stat(full)
            except OSError:
                st = None
        return full, st

    def _check_folder(self, j: int, rel: str, folder: str, h: int) -> bool:
        """Refuse a folder resolving outside the root; remember it, and whether it holds a symlink.

        Once per folder and process: a ``realpath`` and one listing (``d_type``, no stat per entry).
        """
        outside = self._folder_outside(folder) if folder else None
        if outside is not None:
            raise self._unsafe(
                j,
                rel,
                f"refused: its folder resolves to {outside}, outside the root "
                "(IndexedDataset(..., follow_symlinks='all') follows such links)",
            )
        try:
            with os.scandir(os.path.join(self._fs_root or "", folder)) as it:
                links = any(e.is_symlink() for e in it)
        except OSError:
            links = True  # cannot list it: check each file on its own
        self._folders.add(h, links)
        return links

    def _folder_outside(self, folder: str) -> str | None:
        """The real path of ``root/folder`` if it lies outside the root, else None."""
        real = os.path.realpath(os.path.join(self._fs_root or "", folder))
        return None if self._inside(real) else real

    def _inside(self, real: str) -> bool:
        if self._real_root is None:
            self._real_root = os.path.realpath(self._fs_root or "")
        return real.startswith(self._real_root.rstrip(os.sep) + os.sep)

    def _local_root(self) -> str | None:
        """The folder local reads resolve against: the root, a ``file://`` root's path; None for a packed set or
        a bucket."""
        if self.packed:
            return None
        if self.store is None:
            return self.root
        if self.store.scheme != "file":
            return None
        from urllib.parse import unquote, urlsplit

        return unquote(urlsplit(self.store.url).path) or "/"

    def _check_store(self) -> None:
        """Open the store's filesystem here (the constructing process; workers open their own) and ask for the
        first object's metadata (one HEAD): wrong storage options or credentials are the user's mistake, said
        once with the index and the URL, never a silently skipped sample each. A missing object (404) or a
        transient failure is left to the sample's own read."""
        from ..storage.reads import describe, http_status, is_transient, quiet_store_retries
        from ..storage.urls import scrub

        store = self.store
        assert store is not None
        fs = store.fs  # a bad option the backend refuses at once: a UserError from open_filesystem
        quiet_store_retries(fs, store.scheme)
        if not self._rows:
            return
        rel = os.fsdecode(self._idx.path_bytes(0))  # type: ignore[union-attr]
        try:
            fs.info(store.path(rel))
        except Exception as exc:
            status = http_status(exc)
            if isinstance(exc, FileNotFoundError) or status == 404:
                return
            if is_transient(exc):
                log.warning(
                    "%s: the first object of %s did not answer (%s); reading anyway",
                    self.index,
                    store.url,
                    scrub(describe(exc), store.options),
                )
                return
            if isinstance(exc, PermissionError) or status == 403:
                cause = "access denied (403): check the credentials and their rights on the bucket"
            else:
                cause = f"{type(exc).__name__}: {describe(exc)}"
            raise UserError(
                f"{self.index}: cannot read {store.url_of(rel)} (its first sample): {scrub(cause, store.options)}; "
                "check storage_options= and the credentials (environment, profile)"
            ) from None

    def _unsafe(self, j: int, rel: str, cause: str) -> UnsafePathError:
        return UnsafePathError(self._message(j, rel, cause), index=j, path=rel, root=self.root)

    def _message(self, j: int, rel: str, cause: str) -> str:
        if self.packed:
            return f"sample {j} ({rel}, packed in {self.index}): {cause}"
        return f"sample {j} ({rel} under {self.root}): {cause}"

    def _error(self, j: int, rel: str, cause: str) -> SampleError:
        return SampleError(self._message(j, rel, cause), index=j, path=rel, root=self.root)

    def __repr__(self) -> str:
        return (
            f"IndexedDataset({self.index!r}, root={self.root!r}, rows={len(self)}, classes={len(self.meta['classes'])})"
        )


def _store_of(index: str, root: str | None, storage_options: dict | None):
    """The :class:`~dsclean.storage.fs.Store` of a URL root (its filesystem opened later, in each process that
    reads), or None for a local root; ``storage_options`` are for a URL root only."""
    from ..storage.urls import is_url

    if root is not None and is_url(root):
        from ..storage.fs import Store

        return Store(root, dict(storage_options or {}))
    if storage_options:
        raise UserError(
            f"{index}: storage_options= are for an index of a bucket (a URL root); its root {root} is local"
        )
    return None


class Raising:
    """An :class:`IndexedDataset` whose errors raise, whatever its ``on_error``: what its own guard wraps.

    Attributes (``path``, ``root``, ``classes``, ``targets``, ...) are the dataset's.
    """

    def __init__(self, dataset: IndexedDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        return self.dataset._get(i)

    def __getattr__(self, name: str):
        if name.startswith("__") or "dataset" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.dataset, name)


class StaleEntryError(OSError):
    """The file's size differs from the one recorded in the index."""


class Targets(np.ndarray):
    """``IndexedDataset.targets``: the labels as an int64 numpy array that acts like a list where code needs it.

    ``targets[i]`` and iteration give Python ``int`` (as ``ImageFolder.targets``, a
    list, does); ``len``, slicing, ``np.bincount(targets)``, ``torch.as_tensor`` work
    as on any array; arithmetic gives plain arrays.
    """

    def __getitem__(self, key):
        out = super().__getitem__(key)
        return int(out) if isinstance(out, np.integer) else out

    def __iter__(self) -> Iterator[int]:
        for start in range(0, len(self), 65_536):  # a block of Python ints at a time, never the whole list
            yield from np.ndarray.__getitem__(self, slice(start, start + 65_536)).tolist()

    def __bool__(self) -> bool:
        return len(self) > 0

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        arr = np.asarray(arr)
        return arr[()] if return_scalar else arr

    def index(self, value: int) -> int:
        """Position of the first ``value`` (``list.index``)."""
        hits = np.flatnonzero(np.asarray(self) == value)
        if not len(hits):
            raise ValueError(f"{value} is not in targets")
        return int(hits[0])

    def count(self, value: int) -> int:
        """How many samples have label ``value`` (``list.count``)."""
        return int(np.count_nonzero(np.asarray(self) == value))


class Samples(collections.abc.Sequence):
    """``IndexedDataset.samples``/``.imgs``: ``(full path, label)`` pairs made on demand from the mapped columns.

    Read-only, and never a materialised list: each item is built when it is asked
    for, so a worker that touches it creates no per-sample objects it keeps.
    """

    def __init__(self, dataset: IndexedDataset) -> None:
        self._ds = dataset

    def __len__(self) -> int:
        return len(self._ds)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        ds = self._ds
        j = ds._position(i)
        idx = ds._mapped()
        rel = os.fsdecode(idx.path_bytes(j))  # a packed set has no root: its paths are for reference
        if ds.store is not None:
            return ds.store.url_of(rel), int(idx.labels[j])
        return (rel if ds.root is None else os.path.join(ds.root, rel)), int(idx.labels[j])

    def __iter__(self) -> Iterator[tuple[str, int]]:
        for j in range(len(self)):
            yield self[j]

    def __repr__(self) -> str:
        return f"<{len(self)} (path, label) samples of {self._ds.index}>"
