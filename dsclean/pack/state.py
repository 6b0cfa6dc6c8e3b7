"""The shard folder's own state: ``pack.json`` (what is being packed, for resuming), part markers, locks.

``-o DIR`` must be empty (or missing), or hold a ``pack.json`` recording the
same source index (by content hash) and the same layout options: then the
pack resumes. Anything else is refused before a byte is written.

``pack.json`` is created with link-without-replace, so the tasks of a job
array starting at once on a shared file system agree on one record (or the
loser is told how its options differ). Each finished part leaves
``pack.part-000I-of-000N.json``; the finishing step refuses missing parts and
parts of another pack.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from typing import Iterator

from .. import locations
from ..atomic import fsync_dir, temp_next_to
from ..errors import UserError
from ..openfile import open_regular_file
from .extnames import KEEP
from .write import make_readable, output_file

FORMAT = "dsclean-pack"
VERSION = 1
_PART_RE = re.compile(r"^pack\.part-(\d+)-of-(\d+)\.json$")


def record(*, index: str, identity: str, rows: int, root: str, layout: dict, shards: int) -> dict:
    """What ``pack.json`` holds. Deterministic: every task of a job array writes the same bytes."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "source": {
            "index": index if "://" in index else os.path.abspath(index),
            "identity": identity,
            "rows": rows,
            "root": root,
        },
        "layout": layout,
        "shards": shards,
    }


def _same_pack(a: dict, b: dict) -> str | None:
    """None if ``a`` and ``b`` describe the same pack, else what differs (for the message)."""
    if a.get("format") != FORMAT:
        return "it is not a dsclean pack.json"
    if a.get("source", {}).get("identity") != b["source"]["identity"]:
        return (
            f"it packs another index ({a.get('source', {}).get('index')}, content hash "
            f"{a.get('source', {}).get('identity')}), not this one"
        )
    had = {"ext_policy": KEEP, **a.get("layout", {})}  # a pack.json older than --ext-policy: named as keep
    diffs = [f"{k} {had.get(k)!r} (asked: {v!r})" for k, v in b["layout"].items() if had.get(k) != v]
    if diffs:
        return "it was packed with other options: " + ", ".join(diffs)
    return None


def read_state(output: str) -> dict | None:
    path = os.path.join(output, locations.PACK_STATE_FILE)
    try:
        with open_regular_file(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); it is not a pack dsclean can resume") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a dsclean pack.json")
    return data


def _ours(name: str) -> bool:
    """dsclean's lock files and a killed run's temp ``pack.json``: they do not make a folder non-empty."""
    return (
        name == locations.LOCK_FILE
        or (name.startswith(".dsclean.part-") and name.endswith(".lock"))
        or (name.startswith(f".{locations.PACK_STATE_FILE}.") and name.endswith(".tmp"))
    )


def prepare_output(output: str, rec: dict, *, fsync: bool = True) -> bool:
    """Create or check ``output`` and its ``pack.json`` (fsynced unless ``fsync`` is False); True when
    resuming an earlier pack."""
    if os.path.lexists(output) and not os.path.isdir(output):
        raise UserError(f"{output}: exists and is not a folder; -o takes a folder for the shards")
    if not os.path.isdir(output):
        parent = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(parent):
            raise UserError(f"{output}: the folder {parent} does not exist")
        try:
            os.makedirs(output, exist_ok=True)
        except OSError as exc:
            raise _unwritable(output, exc) from None
    existing = read_state(output)
    if existing is None:
        others = [n for n in os.listdir(output) if not _ours(n)]
        if others:
            raise UserError(
                f"{output}: is not empty ({len(others)} entries, e.g. {sorted(others)[0]!r}) and holds "
                "no dsclean pack; -o must be an empty folder or a pack to resume"
            )
        existing = _create_state(output, rec, fsync)
        if existing is None:
            return False
    why = _same_pack(existing, rec)
    if why:
        raise UserError(
            f"{output}: holds a pack that cannot be resumed by this command: {why}. "
            "Use an empty folder, or the same index and options"
        )
    return True


def recorded_layout(output: str, identity: str) -> dict | None:
    """The layout options ``output``'s ``pack.json`` records for the index of this identity (None: no such
    pack there): what a resume, a later part or ``--finish`` keeps when not told otherwise."""
    existing = read_state(output) if os.path.isdir(output) else None
    if existing is None or existing.get("source", {}).get("identity") != identity:
        return None
    layout = existing.get("layout")
    return {"ext_policy": KEEP, **layout} if isinstance(layout, dict) else None


def write_recipe(output: str, recipe: dict, *, fsync: bool = True) -> None:
    """Add the reading recipe (:func:`.extnames.recipe`) to ``pack.json`` once the set is published
    (temp + rename; the rest of the record unchanged, so resuming still compares it)."""
    rec = read_state(output)
    if rec is None:
        return
    if rec.get("recipe") == recipe:
        return
    with output_file(os.path.join(output, locations.PACK_STATE_FILE), fsync=fsync) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({**rec, "recipe": recipe}, f, indent=1, sort_keys=True)
            f.write("\n")
        make_readable(tmp)


def _unwritable(output: str, exc: OSError) -> UserError:
    """-o names a folder pack cannot write in (read-only, no permission): bad input, before any shard."""
    return UserError(
        f"{output}: cannot write the pack there ({exc.strerror or exc}: {exc.filename or output}); "
        "nothing was written: choose a writable folder for -o"
    )


def _create_state(output: str, rec: dict, fsync: bool = True) -> dict | None:
    """Create ``pack.json`` without replacing one; None if ours won, else the one already there."""
    final = os.path.join(output, locations.PACK_STATE_FILE)
    try:
        tmp = temp_next_to(final)
        f = open(tmp, "w", encoding="utf-8")
    except OSError as exc:  # a read-only folder: nothing of the pack written yet
        raise _unwritable(output, exc) from None
    try:
        with f:
            json.dump(rec, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        make_readable(tmp)
        try:
            os.link(tmp, final)  # atomic and never replaces: two tasks racing agree on one record
        except FileExistsError:
            return read_state(output)
        if fsync:
            fsync_dir(output)
        return None
    finally:
        os.unlink(tmp)


@contextlib.contextmanager
def locked(output: str, part: tuple[int, int] | None) -> Iterator[None]:
    """One writer per folder (a whole pack, or the finishing step), or per part of a job array.

    The folder's lock file is held exclusively by a whole pack (or ``--finish``) and shared by
    every ``--part`` task, which also holds its part's own lock exclusively: the tasks of a job
    array run side by side, a whole pack never runs beside any of them (it would remove their
    shards' temp files), and one part never runs twice at once."""
    with _flock(
        output,
        locations.LOCK_FILE,
        shared=part is not None,
        who="this folder (a whole pack, or --finish)"
        if part
        else "this folder (a whole pack, --finish, or a --part task)",
    ):
        if part is None:
            yield
            return
        with _flock(
            output, f".dsclean.part-{part[0]:04d}-of-{part[1]:04d}.lock", shared=False, who=f"part {part[0]}/{part[1]}"
        ):
            yield


@contextlib.contextmanager
def _flock(output: str, name: str, *, shared: bool, who: str) -> Iterator[None]:
    path = os.path.join(output, name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # e.g. a pack to resume on a file system mounted read-only since
        raise _unwritable(output, exc) from None
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"{output}: another dsclean pack is writing {who} ({path} is locked); wait for it to finish"
            ) from None
        yield
    finally:
        os.close(fd)


def part_file(part: tuple[int, int]) -> str:
    return locations.tagged(locations.PACK_STATE_FILE, locations.part_tag(part))


def write_part(
    output: str, rec: dict, part: tuple[int, int], shards: list[int], skipped: list[dict], *, fsync: bool = True
) -> None:
    data = {**rec, "part": list(part), "part_shards": shards, "skipped": skipped}
    with output_file(os.path.join(output, part_file(part)), fsync=fsync) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        make_readable(tmp)


def remove_state(output: str) -> None:
    """Remove ``pack.json`` and every part marker: the folder then holds no pack to resume
    (only after the pack's shards are removed; see :func:`dsclean.pack.packer.pack_shards`)."""
    for name in os.listdir(output):
        if name == locations.PACK_STATE_FILE or _PART_RE.match(name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(output, name))


def check_parts(output: str, rec: dict) -> list[dict]:
    """Every part's marker, or a UserError naming the missing, foreign or mixed-up parts."""
    found: dict[int, dict] = {}
    counts: set[int] = set()
    foreign = []
    for name in sorted(os.listdir(output)):
        m = _PART_RE.match(name)
        if not m:
            continue
        path = os.path.join(output, name)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: unreadable part marker ({exc}); run that part again") from exc
        why = _same_pack(data, rec)
        if why or data.get("part") != [int(m.group(1)), int(m.group(2))]:
            foreign.append(f"{name} ({why or 'its content names another part'})")
            continue
        counts.add(int(m.group(2)))
        found[int(m.group(1))] = data
    if foreign:
        raise UserError(f"{output}: parts of another pack: {'; '.join(foreign)}; remove them or pack into a new folder")
    if not found:
        raise UserError(f"{output}: no finished part (pack.part-*-of-*.json): run dsclean pack --part I/N first")
    if len(counts) > 1:
        raise UserError(
            f"{output}: parts of different splits ({', '.join(f'of {n}' for n in sorted(counts))}); "
            "every task of one job array must use the same N"
        )
    (n,) = counts
    missing = sorted(set(range(n)) - set(found))
    if missing:
        shown = ", ".join(f"{i}/{n}" for i in missing[:20]) + (" ..." if len(missing) > 20 else "")
        raise UserError(f"{output}: {len(missing)} of {n} parts have not finished: {shown}; run them (again) first")
    return [found[i] for i in range(n)]
