"""Where dsclean's own files live: one place for every file name, folder and the results lookup.

Nothing of dsclean's goes inside a dataset root. What dsclean remembers about a
root lives in a per-root *state folder* outside it::

    <base>/roots/<hash of realpath(ROOT)>/      root.json, last_scan.json, scan_cache/, ...

``<base>`` is ``--state-dir DIR``, else ``$DSCLEAN_STATE_DIR``, else
``$XDG_CACHE_HOME/dsclean`` (``~/.cache/dsclean``). On a cluster without a shared
``$HOME``, point ``DSCLEAN_STATE_DIR`` at a shared path so every node and teammate
finds the same state.

:func:`find_results` is the ONE rule every command uses to find a root's scan results.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import socket
import stat
import time
from dataclasses import dataclass, field
from typing import Iterator

#: the folder older dsclean versions wrote inside a root; read (never written, never deleted)
LEGACY_STATE_DIR = ".dsclean"
STATE_DIR = LEGACY_STATE_DIR  # old name, kept for code written against it
STATE_ENV = "DSCLEAN_STATE_DIR"
RESULTS_FILE = "scan_results.parquet"  # every verdict, one row per file
PROBLEMS_FILE = "problems.jsonl"  # bad and warn verdicts, one JSON object per line
SUMMARY_FILE = "scan_summary.json"  # counts, elapsed time, options
CACHE_FILE = "scan_cache"  # in the state folder: a folder of verdicts by (path, size, mtime) for re-scans (Arrow)
LAST_SCAN_FILE = "last_scan.json"  # in the state folder: where the last scan of this root wrote its results
DUPS_QUARANTINES_FILE = "dups_quarantines.json"  # in the state folder: where `dups --quarantine` moved copies
TRAINING_FAILURES_FILE = "training_failures.jsonl"  # in the state folder: files `quarantine --from-log` re-checked
DENYLIST_FILE = "denylist.jsonl"  # beside a shard set's shards: samples not to train on (dsclean.denylist)
ROOT_FILE = "root.json"  # in the state folder: which root it belongs to (for people browsing the cache)
INDEX_LOCK_FILE = "index.lock"  # in the state folder: held while IndexedDataset.from_folder builds
MANIFEST_FILE = "manifest.jsonl"  # in a quarantine folder: the move journal
LOCK_FILE = ".dsclean.lock"  # in a quarantine folder: held while a scan or restore runs; in a shard folder: by pack
RECOVERY_GATE_FILE = ".dsclean-recovery.lock"  # beside a bucket journal: held while a part takes or recovers it
# A packed shard set (dsclean pack): the shards plus these three files, side by side.
PACKED_INDEX_FILE = "index.arrow"  # the packed index: per sample its shard, offset, size, label, kind, checksum
SHARD_LIST_FILE = "shardindex.json"  # the shard list in wids' format (relative urls, nsamples, filesize)
PACK_STATE_FILE = "pack.json"  # the source index's identity and the options, for resuming
REPACK_STATE_FILE = ".repack.json"  # in a bucket copy's staging folder (pack --from -o URL): what it copies, to resume


def part_tag(part: tuple[int, int] | None) -> str:
    """'' for a whole scan; '.part-0003-of-0016' for part 3 of 16 (file names of a job-array task)."""
    return "" if part is None else f".part-{part[0]:04d}-of-{part[1]:04d}"


def tagged(name: str, tag: str) -> str:
    """``scan_results.parquet`` + tag -> ``scan_results.part-0003-of-0016.parquet``."""
    stem, ext = os.path.splitext(name)
    return f"{stem}{tag}{ext}"


# --------------------------------------------------------------------------- folders


def state_base(state_dir: str | None = None) -> tuple[str, str]:
    """``(folder holding every root's state, where that choice came from)``: the first of
    ``--state-dir``, ``$DSCLEAN_STATE_DIR``, ``$XDG_CACHE_HOME/dsclean``."""
    return state_bases(state_dir)[0]


def state_bases(state_dir: str | None = None) -> list[tuple[str, str]]:
    """Every state base to look in, in lookup order, without repeats."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates = [
        (state_dir, "--state-dir"),
        (os.environ.get(STATE_ENV), STATE_ENV),
        (os.path.join(cache, "dsclean"), "the per-user state folder"),
    ]
    out: list[tuple[str, str]] = []
    for base, source in candidates:
        if base and os.path.abspath(base) not in [b for b, _ in out]:
            out.append((os.path.abspath(base), source))
    return out


def root_key(root: str) -> str:
    """A stable name for a root: the first 24 hex digits of SHA-256 of its real path's bytes."""
    return hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()[:24]


def root_state_dir(root: str, state_dir: str | None = None) -> str:
    """``<base>/roots/<hash of realpath(root)>``: dsclean's memory of ``root`` (not created here)."""
    return os.path.join(state_base(state_dir)[0], "roots", root_key(root))


def url_key(url: str) -> str:
    """A stable name for an object-storage prefix (``s3://bucket/prefix``): 24 hex digits of SHA-256 of the URL."""
    return hashlib.sha256(url.rstrip("/").encode("utf-8", "surrogateescape")).hexdigest()[:24]


def url_state_dir(url: str, state_dir: str | None = None) -> str:
    """``<base>/urls/<hash of the URL>``: dsclean's memory of a bucket prefix (results, the bucket
    quarantine's journal); local, never in the bucket. Not created here."""
    return os.path.join(state_base(state_dir)[0], "urls", url_key(url))


def make_root_state_dir(root: str, state_dir: str | None = None) -> str:
    """Create the root's state folder (and its ``root.json``) if needed; returns it. Raises OSError."""
    folder = root_state_dir(root, state_dir)
    os.makedirs(folder, exist_ok=True)
    label = os.path.join(folder, ROOT_FILE)
    if not os.path.exists(label):
        _write_json(label, {"root": os.path.realpath(root)})
    return folder


def legacy_state_dir(root: str) -> str:
    """``ROOT/.dsclean``, where dsclean < 0.2 kept its state (read only now)."""
    return os.path.join(root, LEGACY_STATE_DIR)


def state_dir(root: str) -> str:
    """The root's state folder (old name of :func:`root_state_dir`)."""
    return root_state_dir(root)


def default_report_dir(root: str, quarantine: str | None, state_dir: str | None = None) -> str:
    """Reports go next to the quarantine when there is one, else into the root's state folder."""
    return quarantine if quarantine else root_state_dir(root, state_dir)


def is_inside(path: str, root: str) -> bool:
    """Whether ``path`` (which need not exist yet) is the folder ``root`` or lies below it. THE rule of every
    "not inside ROOT" check (outputs, quarantines, state folders, dups roots).

    Folders are compared by ``(st_dev, st_ino)``, not by name: the chain of folders above ``path``'s
    nearest existing folder (:func:`ancestor_ids`) is walked up, through symlinks (resolved) and bind
    mounts (crossed to every name of the folder they show, :func:`_other_names`), and compared with ``root``'s. A bind
    mount of ``ROOT/cats`` at ``M`` thus makes ``M/Q`` inside ROOT, as a symlink ``M -> ROOT/cats`` does.
    A ``root`` that does not exist is compared by its real path.
    """
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
        return True
    try:
        target = folder_id(real_root)
    except OSError:
        return False
    return any(key == target for key in ancestor_ids(path))


def folder_id(path: str) -> tuple[int, int]:
    """``(st_dev, st_ino)`` of ``path`` (symlinks followed): what names one folder however it is reached."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def ancestor_ids(path: str) -> Iterator[tuple[int, int]]:
    """``(st_dev, st_ino)`` of ``path``'s nearest existing folder and of every folder above it.

    Symlinks are resolved first. A folder shown under other names by bind mounts (:func:`_other_names`)
    has the parents of each of its names: a bind mount ``M`` of ``ROOT/cats`` has ``M``'s parent and
    ``ROOT``. Folders that cannot be stat-ed are passed over.
    """
    folder = os.path.realpath(os.path.abspath(path))
    while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    mounts: list[tuple[str, str, str]] | None = None
    todo, seen_paths, seen_ids = [folder], set(), set()
    while todo and len(seen_paths) < 4096:  # a bound walk, whatever the mount table holds
        folder = todo.pop()
        if folder in seen_paths:
            continue
        seen_paths.add(folder)
        try:
            key = folder_id(folder)
        except OSError:
            key = None
        if key is not None and key not in seen_ids:
            seen_ids.add(key)
            yield key
        parent = os.path.dirname(folder)
        if parent != folder:
            todo.append(parent)
        if key is not None:
            if mounts is None:
                mounts = _mount_table()
            todo.extend(_other_names(folder, key, mounts))


def _mount_table() -> list[tuple[str, str, str]]:
    """``(device "major:minor", root of the mount in its file system, mount point)`` of this process's mounts
    (``/proc/self/mountinfo``; empty where there is none)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read(1 << 22).splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) >= 5:
            out.append((fields[2], _unescape(fields[3]), _unescape(fields[4])))
    return out


def _unescape(field: str) -> str:
    r"""mountinfo writes space, tab, newline and backslash as ``\040`` etc."""
    if "\\" not in field:
        return field
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _other_names(folder: str, key: tuple[int, int], mounts: list[tuple[str, str, str]]) -> list[str]:
    """Every other path that shows the folder ``folder`` through a mount of its file system: for a bind mount
    of ``ROOT/cats`` at ``M``, ``M`` for ``ROOT/cats`` and ``ROOT/cats`` for ``M``. The folder's place in its
    file system is its mount's root plus the rest of the path; each candidate is checked by
    ``(st_dev, st_ino)``, so a stale or odd mount table cannot mislead."""

    def under(path: str, top: str) -> bool:
        return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")

    mine = [m for m in mounts if under(folder, m[2])]
    if not mine:
        return []
    dev, mount_root, point = max(enumerate(mine), key=lambda t: (len(t[1][2]), t[0]))[1]  # the topmost, deepest
    place = os.path.normpath(os.path.join(mount_root, os.path.relpath(folder, point)))
    out = []
    for other_dev, other_root, other_point in mounts:
        if other_dev != dev or not under(place, other_root):
            continue
        candidate = os.path.normpath(os.path.join(other_point, os.path.relpath(place, other_root)))
        try:
            if candidate != folder and folder_id(candidate) == key:
                out.append(candidate)
        except OSError:
            continue
    return out


# --------------------------------------------------------------------------- the last-scan pointer


def write_pointer(
    root: str,
    results: list[str],
    *,
    problems: list[str],
    summary: list[str] | None = None,
    quarantine: str | None = None,
    options: str | None = None,
    part: tuple[int, int] | None = None,
    state_dir: str | None = None,
) -> str | None:
    """Record where the results of ``root`` are, in its state folder (``last_scan.json``; a part's own file).

    Returns a note when the state folder is not writable (commands then need ``--scan-results``).
    """
    try:
        folder = make_root_state_dir(root, state_dir)
        path = os.path.join(folder, tagged(LAST_SCAN_FILE, part_tag(part)))
        _write_json(
            path,
            {
                "root": os.path.realpath(root),
                "results": [os.path.abspath(p) for p in results],
                "problems": [os.path.abspath(p) for p in problems],
                "summary": [os.path.abspath(p) for p in summary or []],
                "quarantine": os.path.abspath(quarantine) if quarantine else None,
                "options": options,
                "part": list(part) if part else None,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "finished_ns": time.time_ns(),
            },
        )
    except OSError as exc:
        where = root_state_dir(root, state_dir)
        return (
            f"could not record the results location in {where}: {exc.strerror or exc}; "
            "later commands need --scan-results or --state-dir"
        )
    return None


def note_restore(root: str, quarantine: str, state_dir: str | None = None) -> None:
    """Record in every pointer of ``root`` that files are being put back from ``quarantine`` (``dsclean restore``).

    The next scan must not reuse a previous result row of a file put back after that scan
    (:mod:`dsclean.scanning.reuse` reads the restores in the journals of the pointer's own
    quarantine and of these); a quarantine that no finished scan recorded (the scan that
    moved the files was killed) is known to the pointer only this way. Raises OSError."""
    quarantine = os.path.abspath(quarantine)
    for base, _ in state_bases(state_dir):
        folder = root_state_dir(root, base)
        for path in sorted(glob.glob(os.path.join(glob.escape(folder), tagged(LAST_SCAN_FILE, "*")))):
            pointer = read_pointer(path)
            if (
                pointer is None
                or quarantine == pointer.get("quarantine")
                or quarantine in (pointer.get("restored_from") or [])
            ):
                continue
            _write_json(path, {**pointer, "restored_from": [*(pointer.get("restored_from") or []), quarantine]})


def read_pointer(path: str) -> dict | None:
    """A last-scan pointer's content, or None if there is none (or it is unreadable)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    results = data.get("results")
    if isinstance(results, str):  # written by dsclean 0.1: one path
        data["results"] = [results]
        data["problems"] = [data["problems"]] if isinstance(data.get("problems"), str) else []
    if not isinstance(data.get("results"), list) or not all(isinstance(p, str) for p in data["results"]):
        return None
    return data


def last_scan(root: str, state_dir: str | None = None) -> tuple[dict | None, str]:
    """The newest pointer of ``root`` in one state folder: the whole scan's or a complete set of parts'.

    Returns ``(pointer, path of the pointer file)``; parts come back as one pointer
    listing every part's results.
    """
    folder = root_state_dir(root, state_dir)
    whole_path = os.path.join(folder, LAST_SCAN_FILE)
    best, best_path = read_pointer(whole_path), whole_path
    parts = _complete_parts(folder)
    if parts is not None and (best is None or parts[0].get("finished_ns", 0) > best.get("finished_ns", 0)):
        best, best_path = parts
    return best, best_path


def pointer_for(root: str, results: list[str], state_dir: str | None = None) -> dict | None:
    """The pointer (in any state folder) that lists exactly ``results`` for ``root``, or None."""
    for base, _ in state_bases(state_dir):
        pointer, _ = last_scan(root, base)
        if pointer and pointer["results"] == results:
            return pointer
    return None


def _part_pointers(folder: str) -> Iterator[tuple[str, dict]]:
    """``(path, pointer)`` of every job-array part's pointer in a root's state folder."""
    for path in sorted(glob.glob(os.path.join(glob.escape(folder), tagged(LAST_SCAN_FILE, ".part-*-of-*")))):
        p = read_pointer(path)
        if p and isinstance(p.get("part"), list) and len(p["part"]) == 2 and p["results"]:
            yield path, p


def _array_key(pointer: dict) -> tuple[int, str]:
    """Which job array a part belongs to: its number of parts and its check options (one array, one rule)."""
    return pointer["part"][1], str(pointer.get("options"))


def _complete_parts(folder: str) -> tuple[dict, str] | None:
    """The newest complete set of part pointers in ``folder`` merged into one pointer, or None.

    A set is the N parts of one array (:func:`_array_key`): parts of N with other check
    options are another array, never mixed in."""
    arrays: dict[tuple[int, str], dict[int, dict]] = {}
    for _, p in _part_pointers(folder):
        arrays.setdefault(_array_key(p), {})[p["part"][0]] = p
    complete = [(key[0], got) for key, got in arrays.items() if set(got) == set(range(key[0]))]
    if not complete:
        return None
    n, got = max(complete, key=lambda c: min(p.get("finished_ns", 0) for p in c[1].values()))
    ordered = [got[i] for i in range(n)]
    merged = {
        **ordered[0],
        "part": None,
        "finished_ns": min(p.get("finished_ns", 0) for p in ordered),
        "results": [r for p in ordered for r in p["results"]],
        "problems": [r for p in ordered for r in p.get("problems", [])],
        "summary": [r for p in ordered for r in p.get("summary", [])],
    }
    return merged, os.path.join(folder, tagged(LAST_SCAN_FILE, f".part-*-of-{n:04d}"))


# --------------------------------------------------------------------------- job arrays with parts missing


@dataclass
class JobArray:
    """The finished parts of one job-array scan of a root (``dsclean scan ROOT --shard I/N``).

    One array is ``N`` parts scanned with the same check options; part pointers of
    other arrays (another ``N``, other options) or whose results are gone are never
    mixed in: they are listed in ``ignored``, each with why.
    """

    root: str
    n: int
    done: dict[int, dict]  # part number -> its pointer (read_pointer)
    source: str  # which state folder they were found in (--state-dir, DSCLEAN_STATE_DIR, per user)
    folder: str  # that root state folder
    ignored: list[str] = field(default_factory=list)  # other part pointers left out, each saying why

    @property
    def missing(self) -> list[int]:
        return sorted(set(range(self.n)) - set(self.done))

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def results(self) -> list[str]:
        return [r for i in sorted(self.done) for r in self.done[i]["results"]]

    @property
    def finished_ns(self) -> int:
        """When its newest part finished."""
        return max((p.get("finished_ns", 0) for p in self.done.values()), default=0)

    def names(self, parts: list[int]) -> str:
        return ", ".join(f"{i}/{self.n}" for i in parts)

    def commands(self) -> list[str]:
        """The commands that scan the missing parts."""
        return [f"dsclean scan {self.root} --shard {i}/{self.n}" for i in self.missing]

    def describe(self) -> str:
        """One line for the user: which parts ran, which did not, which part files were ignored."""
        missing = self.missing
        text = (
            f"{len(self.done)} of the {self.n} parts of a job-array scan of {self.root} ({self.source}: parts "
            f"{self.names(sorted(self.done))})"
        )
        if missing:
            how = (
                f"`{self.commands()[0]}` scans it"
                if len(missing) == 1
                else f"`dsclean scan {self.root} --shard I/{self.n}` scans part I"
            )
            text += f"; part{'s' if len(missing) > 1 else ''} {self.names(missing)} never ran or did not finish ({how})"
        return text + "".join(f"; ignored: {why}" for why in self.ignored)


def job_array(root: str, state_dir: str | None = None) -> JobArray | None:
    """The newest job array of ``root``: its finished parts, in the first state folder (lookup order) that has any.

    The newest array is the one whose last part finished last; parts of other arrays are
    ignored and named. None when no part of any array of ``root`` is recorded.
    """
    for base, source in state_bases(state_dir):
        folder = root_state_dir(root, base)
        arrays: dict[tuple[int, str], dict[int, dict]] = {}
        ignored: list[str] = []
        for path, p in _part_pointers(folder):
            i, n = p["part"]
            gone = [r for r in p["results"] if not os.path.exists(r)]
            other = next((o for o in map(lambda r: _other_root(r, root), p["results"]) if o), None)
            if gone or other:
                ignored.append(
                    f"part {i}/{n} ({path}): its results "
                    + (f"no longer exist ({gone[0]})" if gone else f"were overwritten by a scan of {other}")
                )
                continue
            arrays.setdefault(_array_key(p), {})[i] = p
        if not arrays and not ignored:
            continue
        if not arrays:
            return JobArray(root, 0, {}, source, folder, ignored)
        newest = max(arrays, key=lambda k: max(p.get("finished_ns", 0) for p in arrays[k].values()))
        n = newest[0]
        for (m, options), got in arrays.items():
            if (m, options) != newest:
                why = (
                    f"an older job array of {m} parts"
                    if m != n
                    else f"an older job array of {n} parts scanned with other check options"
                )
                ignored.append(
                    f"part{'s' if len(got) > 1 else ''} {', '.join(f'{i}/{m}' for i in sorted(got))} "
                    f"({why}; its verdicts are not mixed with the newer array's)"
                )
        return JobArray(root, n, arrays[newest], source, folder, ignored)
    return None


@dataclass
class Found:
    """What :func:`find_scan` found for a root: the results files, and how much of the tree they cover."""

    paths: list[str]
    source: str  # one line for the user: where the results came from
    partial: JobArray | None = None  # set when ``paths`` are only the finished parts of a job array
    newer: JobArray | None = None  # an unfinished job array newer than the results used (not used)
    scanned_root: str | None = None  # the scanned ancestor whose results these are; None: the root's own
    subdir: str = ""  # the root's path under ``scanned_root`` ("train"): only the results' rows below it count

    @property
    def prefix(self) -> bytes:
        """The results' path prefix of the root's files (``b"train/"``); ``b""`` for the root's own results."""
        return subtree_prefix(self.subdir)


# --------------------------------------------------------------------------- the lookup rule


def find_results(
    root: str, scan_results: list[str] | str | None = None, state_dir: str | None = None, root_moved: bool = False
) -> tuple[list[str], str]:
    """The complete scan results of ``root``: ``(paths, where they came from)`` (:func:`find_scan`).

    Only results that cover the whole tree: when just some parts of a job array ran,
    ``([], "none: ...")`` naming the parts done and missing. Commands that can use the
    parts that did run call :func:`find_scan` and say what the missing parts leave out.
    Only the root's own results (their paths are relative to ``root``): a scanned ancestor's
    results (step 5 of :func:`find_scan`) need their rows restricted, which only ``Found`` says how.
    """
    found = find_scan(root, scan_results, state_dir, root_moved, parents=False)
    if found.partial is not None:
        return [], f"none: no complete scan of {root}: {found.source}"
    return found.paths, found.source


def find_scan(
    root: str,
    scan_results: list[str] | str | None = None,
    state_dir: str | None = None,
    root_moved: bool = False,
    parents: bool = True,
) -> Found:
    """The scan results of ``root`` and which source was used. THE rule of every command.

    1. ``scan_results`` given (``--scan-results``): those files;
    2. ``state_dir`` (``--state-dir``) or ``$DSCLEAN_STATE_DIR``: the pointer in that state folder;
    3. the pointer in the per-user state folder;
    4. a legacy ``ROOT/.dsclean`` left by dsclean 0.1 (read only: dsclean never writes or deletes it);
    5. (``parents``) the last scan of the nearest scanned ancestor (``dsclean scan DATA``, then
       ``index DATA/train``): ``Found.scanned_root`` and ``Found.subdir`` say whose results and which
       rows count (:func:`subtree_rows` keeps those, their paths made relative to ``root``);
       ``--scan-results`` of an ancestor are taken the same way;
    6. the finished parts of the newest job array whose other parts never ran (:func:`job_array`;
       ``Found.partial`` says which parts are missing: the caller must say what that leaves out);
    7. none: ``Found([], "none ...")``.

    A pointer whose results files are gone is skipped (and said so). Several paths
    mean the parts of one job array. The description is one line for the user.
    Results that record another root than ``root`` are refused (a UserError for
    ``--scan-results``, skipped for a pointer): another tree's verdicts would let its
    damaged files through. ``root_moved`` (``--root-moved``): the tree moved since
    its scan, so the recorded root may differ.
    """
    if scan_results:
        paths = [scan_results] if isinstance(scan_results, str) else list(scan_results)
        if not root_moved:
            recorded = [_other_root(path, root) for path in paths]
            parent = recorded[0] if parents and len(set(recorded)) == 1 else None
            subdir = _subdir_of(root, parent) if parent else None
            if parent and subdir:  # every file records one scanned parent of root: its rows under root count
                return Found(
                    paths,
                    "--scan-results " + " ".join(paths) + f" (a scan of {parent}, parent: its rows under {subdir}/)",
                    scanned_root=parent,
                    subdir=subdir,
                )
            for path, other in zip(paths, recorded):
                if other:
                    from .errors import UserError

                    raise UserError(
                        f"--scan-results {path} records a scan of {other}, not of {root}: another "
                        "tree's verdicts would let its damaged files through. If this tree was moved "
                        "or copied from there since the scan, pass --root-moved"
                    )
        return Found(paths, "--scan-results " + " ".join(paths) + (" (--root-moved)" if root_moved else ""))
    skipped: list[str] = []
    for base, source, pointer, where in _pointers(root, state_dir, skipped):
        newer = job_array(root, base)
        if newer is None or newer.complete or newer.finished_ns <= pointer.get("finished_ns", 0):
            newer = None
        also = (
            ""
            if newer is None
            else (
                f"; NOT used: a newer job array of {newer.n} parts, until all its parts have run (parts "
                f"{newer.names(sorted(newer.done))} done; {newer.names(newer.missing)} missing)"
            )
        )
        return Found(
            pointer["results"],
            f"the last scan of {root}, recorded in {where} ({source})" + also + _also(skipped),
            newer=newer,
        )
    legacy = _legacy_results(root)
    if legacy:
        return Found(
            [legacy],
            (
                f"{legacy}, left inside the root by an older dsclean (read only: dsclean no longer "
                f"writes there; you may delete {legacy_state_dir(root)})" + _also(skipped)
            ),
        )
    if parents:
        parent = _ancestor_scan(root, state_dir)
        if parent is not None:
            parent.source += _also(skipped)
            return parent
    array = job_array(root, state_dir)
    if array is not None and array.done:
        return Found(array.results, array.describe() + _also(skipped), partial=array)
    if array is not None:
        skipped += array.ignored
    return Found([], f"none: no recorded scan of {root}" + _also(skipped))


def _pointers(root: str, state_dir: str | None, skipped: list[str]) -> Iterator[tuple[str, str, dict, str]]:
    """``(state base, its source, pointer, pointer file)`` of each usable last-scan pointer of ``root``, in
    lookup order; a pointer whose results are gone or were overwritten by another root's scan is named in
    ``skipped`` instead."""
    for base, source in state_bases(state_dir):
        pointer, where = last_scan(root, base)
        if pointer is None:
            continue
        missing = [p for p in pointer["results"] if not os.path.exists(p)]
        if missing:
            skipped.append(f"{where} names results that no longer exist ({missing[0]})")
            continue
        others = [o for o in map(lambda p: _other_root(p, root), pointer["results"]) if o]
        if others:
            skipped.append(f"{where} names results that were overwritten by a scan of {others[0]}")
            continue
        yield base, source, pointer, where


def _ancestor_scan(root: str, state_dir: str | None) -> Found | None:
    """The last scan of the nearest ancestor of ``root`` that has one (step 5 of :func:`find_scan`), or None.

    One state-folder lookup per ancestor: a handful of stats, whatever the size of the tree."""
    real = os.path.realpath(root)
    here = os.path.dirname(real)
    while True:
        for _, source, pointer, where in _pointers(here, state_dir, []):
            if pointer.get("part"):  # one part of a job array: only the whole scan (or every part) covers a subtree
                continue
            subdir = _subdir_of(real, here) or ""
            return Found(
                pointer["results"],
                f"the last scan of {here} (parent), recorded in {where} ({source}); its rows under {subdir}/",
                scanned_root=here,
                subdir=subdir,
            )
        up = os.path.dirname(here)
        if up == here:
            return None
        here = up


def scanned_parent(root: str, state_dir: str | None = None) -> tuple[str, str] | None:
    """``(nearest scanned ancestor, root's path below it)`` (step 5 of :func:`find_scan`), or None."""
    found = _ancestor_scan(root, state_dir)
    return (found.scanned_root, found.subdir) if found is not None and found.scanned_root else None


def _subdir_of(root: str, ancestor: str) -> str | None:
    """``root``'s path below ``ancestor`` with ``/`` separators (as results paths are), or None if not below it."""
    real, top = os.path.realpath(root), os.path.realpath(ancestor)
    if real == top or not real.startswith(top.rstrip(os.sep) + os.sep):
        return None
    return os.path.relpath(real, top).replace(os.sep, "/")


def subtree_prefix(subdir: str) -> bytes:
    """The results' path prefix of a subfolder's files: ``"train"`` -> ``b"train/"``; ``""`` -> ``b""``."""
    return os.fsencode(subdir.strip("/")) + b"/" if subdir.strip("/") else b""


def subtree_rows(batch, prefix: bytes):
    """The rows of a results batch/table under ``prefix`` (:attr:`Found.prefix`), their ``path`` made relative
    to the subfolder; ``batch`` itself for an empty prefix. Vectorized (no Python object per row)."""
    if not prefix:
        return batch
    import pyarrow as pa
    import pyarrow.compute as pc

    i = batch.schema.get_field_index("path")
    paths = batch.column(i)
    binary = (
        pa.large_binary()
        if pa.types.is_large_binary(paths.type) or pa.types.is_large_string(paths.type)
        else pa.binary()
    )
    raw = paths.cast(binary)
    keep = pc.fill_null(pc.starts_with(raw, pattern=prefix), False)
    batch = batch.filter(keep)
    # an explicit stop: pyarrow 26's binary_slice without one fails ("Negative buffer resize") on most inputs
    stripped = pc.binary_slice(raw.filter(keep), start=len(prefix), stop=2**31 - 1).cast(paths.type)
    return batch.set_column(i, batch.schema.field(i), stripped)


#: key of a results file's Parquet schema metadata: {"root", "shard", "options"} (dsclean.scanning.results)
RESULTS_META_KEY = "dsclean"


def results_root(path: str) -> str | None:
    """The root a results file records (its schema metadata), or None if it records none or is unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if os.path.isdir(path):
        path = os.path.join(path, RESULTS_FILE)
    try:
        raw = (pq.read_schema(path).metadata or {}).get(RESULTS_META_KEY.encode())
        root = json.loads(raw).get("root") if raw else None
    except (OSError, ValueError, AttributeError, pa.ArrowException):  # unreadable: the results reader says why
        return None
    return root if isinstance(root, str) else None


def _other_root(path: str, root: str) -> str | None:
    """The root ``path`` records if it is not ``root`` (by absolute or real path), else None."""
    recorded = results_root(path)
    if (
        recorded is None
        or os.path.abspath(recorded) == os.path.abspath(root)
        or os.path.realpath(recorded) == os.path.realpath(root)
    ):
        return None
    return recorded


def _also(skipped: list[str]) -> str:
    return "".join(f"; skipped: {s}" for s in skipped)


def _legacy_results(root: str) -> str | None:
    folder = legacy_state_dir(root)
    pointer = read_pointer(os.path.join(folder, LAST_SCAN_FILE))
    if (
        pointer
        and pointer["results"]
        and all(os.path.exists(p) for p in pointer["results"])
        and len(pointer["results"]) == 1
    ):
        return pointer["results"][0]
    fixed = os.path.join(folder, RESULTS_FILE)
    return fixed if os.path.isfile(fixed) else None


def find_scan_results(root: str, state_dir: str | None = None) -> str | None:
    """The one results file of ``root``'s last scan by :func:`find_results`, or None.

    Kept for callers written before the lookup rule; several part files (an unmerged
    job array) raise a :class:`~dsclean.errors.UserError` asking for ``dsclean merge``.
    """
    paths, _ = find_results(root, state_dir=state_dir)
    if len(paths) > 1:
        from .errors import UserError

        raise UserError(f"the last scan of {root} is {len(paths)} unmerged parts; run dsclean merge " + " ".join(paths))
    return paths[0] if paths else None


def _write_json(path: str, data: dict) -> None:
    from .atomic import atomic_output

    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)


# --------------------------------------------------------------------------- the scan lock

SCAN_LOCK_FILE = "scan.lock"  # in the state folder: held while a scan of the root (or of one part) runs


@contextlib.contextmanager
def scan_lock(root: str, part: tuple[int, int] | None = None, state_dir: str | None = None) -> Iterator[str | None]:
    """Refuse overlapping scans of one root: a whole scan beside anything, or two runs of one part.

    A whole scan holds ``scan.lock`` exclusively; a part holds it shared plus its own
    ``scan.part-I-of-N.lock`` exclusively, so the parts of one job array run side by side.
    The locks live in the root's state folder, never in ROOT: scans that use different
    state folders (other users, nodes without a shared ``DSCLEAN_STATE_DIR``) cannot see
    each other; the quarantine's move protocol keeps them correct (a file moved by one is
    never duplicated by the other). Yields a note when the state folder is not writable.
    """
    from .errors import UserError

    try:
        folder = make_root_state_dir(root, state_dir)
        fds = [os.open(os.path.join(folder, SCAN_LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)]
        if part is not None:
            fds.append(
                os.open(
                    os.path.join(folder, tagged(SCAN_LOCK_FILE, part_tag(part))),
                    os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                    0o644,
                )
            )
    except OSError as exc:
        yield (
            f"scans of {root} not locked against each other: state folder {root_state_dir(root, state_dir)} "
            f"is not writable ({exc.strerror or exc})"
        )
        return
    try:
        modes = [fcntl.LOCK_EX] if part is None else [fcntl.LOCK_SH, fcntl.LOCK_EX]
        for n, (fd, mode) in enumerate(zip(fds, modes)):
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
                what = (
                    "another scan of the same root"
                    if part is None
                    else "a scan of the whole root"
                    if n == 0
                    else f"another run of part {part[0]}/{part[1]}"
                )
                raise UserError(
                    f"{what} is running ({holder or 'pid unknown'}; lock {_lock_names(folder, part)[n]}): "
                    f"two scans of {root} at once could judge and move the same files; wait for it "
                    "(parts of one job array, --shard I/N with different I, may run together)"
                ) from None
            if mode == fcntl.LOCK_EX:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield None
    finally:
        for fd in fds:
            os.close(fd)


def _lock_names(folder: str, part: tuple[int, int] | None) -> list[str]:
    """The lock files of a scan (whole: one; a part: the shared one and its own)."""
    names = [os.path.join(folder, SCAN_LOCK_FILE)]
    if part is not None:
        names.append(os.path.join(folder, tagged(SCAN_LOCK_FILE, part_tag(part))))
    return names


def interrupted_scans(root: str, state_dir: str | None = None) -> list[tuple[str, int]]:
    """The last scans of ``root`` (the whole scan's, each part's) that a signal stopped before the end.

    ``(summary file, files it had judged)`` for each: a scan stopped by Ctrl-C or SIGTERM still
    records its pointer and a summary with ``interrupted: true``; commands that reuse its verdicts
    say the scan is unfinished (the files it never reached get no verdict from it).
    """
    folder = root_state_dir(root, state_dir)
    pointers = [read_pointer(os.path.join(folder, LAST_SCAN_FILE))] + [p for _, p in _part_pointers(folder)]
    found = []
    for pointer in pointers:
        summaries = pointer.get("summary") if isinstance(pointer, dict) else None
        for path in summaries if isinstance(summaries, list) else ():
            if not isinstance(path, str):
                continue
            try:  # O_NONBLOCK and a regular file only: a FIFO named in a pointer must not block
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        continue
                    summary = json.loads(os.read(fd, 1 << 20))  # a summary is small; a huge one is not ours
                finally:
                    os.close(fd)
            except (OSError, ValueError):
                continue
            if isinstance(summary, dict) and summary.get("interrupted") is True:
                files = summary.get("files")
                found.append((path, files if isinstance(files, int) else 0))
    return found
