"""Finish or roll back the moves a killed run left without an outcome in the journal.

A kill -9 between any two instructions of a move leaves the file in exactly one place
(between link and unlink: one inode, two names), or (mid cross-device copy) the original
in place plus a partial copy or a full copy. For each move without an outcome the disk
decides: original only -> "abort" (the journaled temp copy goes); copy only -> "done";
both, byte-identical -> remove the original, "done". Anything else is refused and left as is.
"""

from __future__ import annotations

import filecmp
import os

from ...atomic import fsync_dir
from .journal import Journal, RecoveryReport, endpoints, fold_journal, journal_tags, journaled_temp, locked_journal


def _same_file(a: str, b: str) -> bool:
    return os.path.samefile(a, b) or filecmp.cmp(a, b, shallow=False)


def _drop_temp(temp: str | None) -> None:
    """Remove a move's own journaled temp copy, if it is there (once the target exists it is a second link or stale)."""
    if temp is not None and os.path.lexists(temp):
        os.unlink(temp)


def _recover_one(entry: dict, qdir: str, journal: Journal, report: RecoveryReport) -> None:
    ends = endpoints(entry, qdir)
    if ends is None:
        report.refused.append(f"entry {entry['id']}: path is absolute or leaves its folder; not followed")
        return
    source, target = ends
    temp = journaled_temp(entry, target)  # only a temp name the journal proves this move chose is removed
    has_source, has_target = os.path.lexists(source), os.path.lexists(target)
    if has_source and not has_target:
        _drop_temp(temp)  # an unfinished copy; the original is intact
        journal.append({"op": "abort", "id": entry["id"]})
        report.reverted += 1
    elif has_target and not has_source:
        _drop_temp(temp)
        journal.append({"op": "done", "id": entry["id"]})
        report.completed += 1
    elif has_source and has_target:
        if _same_file(source, target):
            try:
                os.unlink(source)  # the copy is complete and fsynced: finish the move
            except OSError as exc:  # the source cannot go (read-only now): undo the copy instead
                os.unlink(target)
                _drop_temp(temp)
                journal.append({"op": "abort", "id": entry["id"], "error": exc.strerror or str(exc)})
                report.reverted += 1
                return
            fsync_dir(os.path.dirname(source))
            _drop_temp(temp)
            journal.append({"op": "done", "id": entry["id"]})
            report.completed += 1
        else:
            report.refused.append(f"entry {entry['id']}: both {source} and {target} exist and differ; left as is")
    else:
        report.refused.append(f"entry {entry['id']}: neither {source} nor {target} exists; left as is")


def recover_open(qdir: str, journal: Journal) -> RecoveryReport:
    """Finish or revert every journaled move that has no outcome (the folder must be locked)."""
    report = RecoveryReport()
    state = fold_journal(journal.path, report)
    for ident, entry in state.intents.items():
        if ident not in state.outcome:
            try:
                _recover_one(entry, qdir, journal, report)
            except OSError as exc:
                report.refused.append(f"entry {ident}: could not recover: {exc.strerror or exc} ({exc.filename})")
    return report


def recover(qdir: str) -> RecoveryReport:
    """Lock a quarantine folder and repair half-done moves left by a killed run (every part's manifest)."""
    qdir, total = os.path.abspath(qdir), RecoveryReport()
    for tag in journal_tags(qdir):
        with locked_journal(qdir, tag) as journal:
            total.add(recover_open(qdir, journal))
    return total
