"""Put quarantined files back where they came from: ``dsclean restore`` (:func:`restore`).

The files move back with the journaled protocol of the way in (op ``"restore"``, :mod:`.journal`),
refusing entries that would land outside their root. Before anything moves, the scan caches of
the roots they go back to get tombstones (a file put back is checked again by the next scan);
after, the problems files and summaries that listed them are rewritten without them.
"""

from __future__ import annotations

import glob
import json
import os
import time
import uuid
from typing import Iterable

from ... import locations
from ...atomic import atomic_output
from ...errors import UserError
from ..cache import forget_before_restore
from .journal import (
    Journal,
    RecoveryReport,
    endpoints,
    fold_journal,
    fold_journals,
    in_quarantine,
    journal_tags,
    locked_journal,
    manifest_path,
    safe_rel,
    temp_name,
)
from .moves import BINDING_FILE, bound_root, inside, move_file, same_root
from .recovery import recover_open
from .status import QuarantineState, quarantine_state


def restore(qdir: str, root: str | None = None, state_dir: str | None = None) -> RecoveryReport:
    """Move every quarantined file back to where it came from, journaled like the way in, then update the records.

    ``root``: the dataset's new location when it moved since the scan (``--root``).
    Without it, a recorded root that no longer exists is refused before anything
    moves (restoring would silently recreate the old path). Refuses (and reports)
    entries whose paths are absolute, contain ``..``, or whose destination folder
    resolves outside the root through a symlink; never overwrites a file that has
    reappeared at the original path. A move back that fails is listed in ``failed``.
    Restored files leave the problems files and the summaries: those in the
    quarantine folder and those the root's last-scan pointer names for this quarantine.
    """
    _tombstones_before_restore(qdir, root, state_dir)
    report = _move_back(qdir, root)
    if report.restored:
        refresh_after_restore(qdir, _report_dirs(qdir, state_dir))
    return report


def _move_back(qdir: str, root: str | None) -> RecoveryReport:
    """The files of :func:`restore`, moved back part by part under each journal's lock."""
    qdir, total = os.path.abspath(qdir), RecoveryReport()
    bound = bound_root(qdir)
    root = _restore_root(qdir, root, bound)
    for tag in journal_tags(qdir):
        with locked_journal(qdir, tag) as journal:
            report = recover_open(qdir, journal)
            state = fold_journal(
                journal.path, RecoveryReport()
            )  # again, with recovery's outcomes; bad lines already reported
            for ident, entry in in_quarantine(state):
                if bound is not None and not (isinstance(entry.get("root"), str) and same_root(entry["root"], bound)):
                    report.refused.append(
                        f"entry {ident}: its root {entry.get('root')!r} is not this quarantine's "
                        f"root {bound} ({BINDING_FILE}); not restored"
                    )
                    continue
                try:
                    _restore_one(ident, entry, qdir, journal, report, root)
                except OSError as exc:
                    report.failed.append(f"entry {ident}: could not restore: {exc.strerror or exc} ({exc.filename})")
            total.add(report)
    return total


def _restore_root(qdir: str, root: str | None, bound: str | None = None) -> str | None:
    """The root to restore into: ``root`` (checked), or None to use each entry's recorded root (checked)."""
    recorded = set()
    folders = set()  # the folders (relative to their root) the quarantined files came from
    for tag in journal_tags(qdir):
        state = fold_journal(manifest_path(qdir, tag), RecoveryReport())
        for _, e in in_quarantine(state):
            if (
                isinstance(e.get("root"), str)
                and os.path.isabs(e["root"])
                and (bound is None or same_root(e["root"], bound))
            ):  # others are refused per entry
                recorded.add(e["root"])
                src = safe_rel(e.get("src"))
                if src is not None:
                    folders.add(os.path.dirname(src))
    if root is not None:
        if not os.path.isdir(root):
            raise UserError(f"--root {root}: no such folder")
        if len(recorded) > 1:
            raise UserError(
                f"{qdir} holds files of {len(recorded)} roots ({', '.join(sorted(recorded))}); "
                "--root can only stand for one"
            )
        old = next(iter(recorded), None)
        # --root is for the same tree at a new place: while the recorded root is still there, NEW must look like
        # it (a folder the files came from exists in NEW), or another dataset would get this one's files
        if (
            old is not None
            and os.path.isdir(old)
            and not same_root(old, root)
            and folders
            and not any(os.path.isdir(os.path.join(root, f)) for f in folders)
        ):
            example = sorted(folders)[0] or "."
            raise UserError(
                f"--root {root}: the files in {qdir} came from {old}, which still exists, and {root} "
                f"has none of their folders (e.g. {example}): it looks like another dataset. Restore "
                f"without --root to put them back into {old}"
            )
        return os.path.abspath(root)
    missing = sorted(r for r in recorded if not os.path.isdir(r))
    if missing:
        raise UserError(
            f"the dataset root recorded in {qdir}, {missing[0]}, no longer exists (moved or not "
            "mounted?); restoring would recreate it: pass --root NEW_LOCATION to restore into "
            "the moved tree"
        )
    return None


def _restore_one(
    ident: str, entry: dict, qdir: str, journal: Journal, report: RecoveryReport, root: str | None = None
) -> None:
    ends = endpoints(entry, qdir, root)
    if ends is None:
        report.refused.append(f"entry {ident}: path is absolute or contains '..'; not restored")
        return
    original, quarantined = ends
    base = root or entry["root"]
    if not inside(original, base) or not inside(quarantined, qdir):
        report.refused.append(f"entry {ident}: {original} resolves outside {base} (symlink); not restored")
        return
    if not os.path.lexists(quarantined):
        report.refused.append(f"entry {ident}: {quarantined} is missing; nothing to restore")
        return
    if os.path.lexists(original):
        report.refused.append(f"entry {ident}: {original} exists again; not overwritten")
        return
    # "t": when; a re-scan reuses no earlier verdict of a file put back after that verdict (scanning.reuse)
    back = {"op": "restore", "id": uuid.uuid4().hex, "of": ident, "root": base, "t": time.time_ns()}
    back.update(src=entry["src"], dst=entry["dst"], tmp=temp_name(back["id"]))
    journal.append(back)
    try:
        move_file(quarantined, original, os.path.join(os.path.dirname(original), back["tmp"]))
    except OSError as exc:
        journal.append({"op": "abort", "id": back["id"], "error": exc.strerror or str(exc)})
        raise
    journal.append({"op": "done", "id": back["id"]})
    report.restored += 1


def _tombstones_before_restore(qdir: str, root: str | None, state_dir: str | None) -> None:
    """Before any file moves back: tombstones in the scan caches of the roots they go back to, and the
    quarantine noted in those roots' last-scan pointers.

    A file put back must be checked again by the next scan, never answered by a cached verdict or a
    previous result row of the same size and mtime (bit rot a --rescan found keeps both). The scan
    that moved it writes a tombstone with its next cache batch and its results at its end: a kill -9
    in between loses both, and the last finished scan's results still say ``ok``. So restore writes
    the tombstones again, durably (:func:`~dsclean.scanning.cache.forget_before_restore`), and tells
    the pointers where to find the restores (:func:`dsclean.locations.note_restore`).
    """
    by_root: dict[str, list[str]] = {}
    for state in fold_journals(os.path.abspath(qdir), None, RecoveryReport()):
        for _, e in in_quarantine(state):
            if isinstance(e.get("root"), str) and isinstance(e.get("src"), str):
                by_root.setdefault(os.path.abspath(root) if root else e["root"], []).append(e["src"])
    for where, rels in by_root.items():
        caches = [
            c
            for base, _ in locations.state_bases(state_dir)
            for c in glob.glob(
                os.path.join(glob.escape(locations.root_state_dir(where, base)), locations.CACHE_FILE + "*")
            )
        ]
        try:
            forget_before_restore(caches, rels)
            locations.note_restore(where, qdir, state_dir)  # and no previous result row of them is reused
        except OSError as exc:
            raise UserError(
                f"could not mark the {len(rels):,} files to restore as unchecked in the scan cache of "
                f"{where} ({exc.strerror or exc}; {exc.filename}): the next scan could reuse an old "
                "verdict for them. Nothing was restored; free space or fix permissions there, or delete "
                "that scan cache (it only saves time)"
            ) from exc


def _report_dirs(qdir: str, state_dir: str | None) -> list[str]:
    """The quarantine folder, and the report folders of last scans that quarantined into it."""
    qdir = os.path.abspath(qdir)
    dirs = [qdir]
    for root in quarantine_state(qdir).roots:
        for base, _ in locations.state_bases(state_dir):
            pointer, _ = locations.last_scan(root, base)
            if pointer and pointer.get("quarantine") == qdir:
                dirs += [os.path.dirname(p) for p in pointer.get("problems", [])]
    return dirs


def refresh_after_restore(qdir: str, report_dirs: Iterable[str]) -> list[str]:
    """Drop restored files from the problems files and update the summaries in ``report_dirs``.

    The journal decides: a problems line with ``quarantined_as`` that the journal no
    longer holds in ``qdir`` goes. Returns the files rewritten.
    """
    qdir = os.path.abspath(qdir)
    held: set[str] = set()
    for state in fold_journals(qdir, None, RecoveryReport()):
        held |= {str(e.get("dst")) for _, e in in_quarantine(state)}
    state = quarantine_state(qdir)
    rewritten = []
    for folder in dict.fromkeys(os.path.abspath(d) for d in report_dirs):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if _is_named(name, locations.PROBLEMS_FILE) and _drop_lines(path, held):
                rewritten.append(path)
            elif _is_named(name, locations.SUMMARY_FILE) and _update_summary(path, qdir, state):
                rewritten.append(path)
    return rewritten


def _is_named(name: str, base: str) -> bool:
    stem, ext = os.path.splitext(base)
    return name == base or (name.startswith(stem + ".part-") and name.endswith(ext))


def _drop_lines(path: str, held: set[str]) -> bool:
    """Rewrite a problems file without the lines of files the quarantine no longer holds."""
    with open(path, "rb") as f:
        lines = f.readlines()
    keep = []
    for raw in lines:
        try:
            obj = json.loads(raw)
        except ValueError:
            keep.append(raw)  # not ours to judge
            continue
        if not (isinstance(obj, dict) and obj.get("quarantined_as") is not None and obj["quarantined_as"] not in held):
            keep.append(raw)
    if len(keep) == len(lines):
        return False
    with atomic_output(path) as tmp, open(tmp, "wb") as out:
        out.writelines(keep)
    return True


def _update_summary(path: str, qdir: str, state: QuarantineState) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return False
    if not isinstance(summary, dict) or summary.get("quarantine") != qdir:
        return False
    summary["quarantine_state"] = state.to_json()
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    return True
