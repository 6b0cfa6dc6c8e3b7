"""What a quarantine holds, from its journal: the source of truth for problems files, summaries and status.

A scan's ``problems.jsonl`` and ``scan_summary.json`` describe more than the run
that wrote them: every file quarantined so far (by this or an earlier, resumed or
repeated run) is listed with its reason, and a file that was restored leaves the
list. Both come from folding the journal(s) of the quarantine folder (:mod:`.journal`).
``dsclean status`` (:func:`status`) reports a quarantine folder, or a root's last scan and its quarantine.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator

from ... import locations
from ... import reasons as R
from ...errors import UserError
from ...jsonpaths import path_fields
from .journal import RecoveryReport, fold_journals, in_quarantine


@dataclass
class QuarantineState:
    """The state of a quarantine folder, by its journals (every part's)."""

    quarantine: str
    roots: list[str] = field(default_factory=list)
    moved: int = 0  # files in the quarantine now
    restored: int = 0  # files moved back by restore
    failed: int = 0  # moves that failed (and were not done later)
    pending: int = 0  # moves a killed run left without an outcome: dsclean recover finishes them
    by_reason: dict[str, int] = field(default_factory=dict)  # files in the quarantine, by reason
    failures: dict[str, int] = field(default_factory=dict)  # failed moves, by error
    bad_lines: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def quarantine_state(qdir: str, tags: Iterable[str] | None = None) -> QuarantineState:
    """Count what the journal(s) of ``qdir`` say: moved, restored, failed, pending, by reason."""
    qdir = os.path.abspath(qdir)
    report = RecoveryReport()
    st = QuarantineState(qdir)
    roots: set[str] = set()
    reasons: Counter = Counter()
    failures: Counter = Counter()
    for state in fold_journals(qdir, tags, report):
        here = in_quarantine(state)
        held = {(e.get("root"), e.get("src")) for _, e in here}
        st.moved += len(here)
        reasons.update(str(e.get("reason") or "?") for _, e in here)
        roots |= {e["root"] for e in state.intents.values() if isinstance(e.get("root"), str)}
        st.restored += sum(
            1 for i, e in state.intents.items() if e["op"] == "restore" and state.outcome.get(i) == "done"
        )
        st.pending += sum(1 for i in state.intents if i not in state.outcome)
        failed = {}
        for i, error in state.errors.items():
            e = state.intents.get(i, {})
            key = (e.get("root"), e.get("src"))
            if e.get("op") == "move" and key not in held:
                failed[key] = error  # the last error of each file that is still not moved
        st.failed += len(failed)
        failures.update(failed.values())
    st.roots = sorted(roots)
    st.by_reason = dict(reasons.most_common())
    st.failures = dict(failures.most_common())
    st.bad_lines = report.bad_lines
    return st


def quarantined_records(
    qdir: str, root: str, tags: Iterable[str] | None = None, skip_ids: set[str] | frozenset = frozenset()
) -> Iterator[dict]:
    """A problems-file line for every file of ``root`` in the quarantine now (except ``skip_ids``)."""
    qdir = os.path.abspath(qdir)
    for state in fold_journals(qdir, tags, RecoveryReport()):
        for ident, e in in_quarantine(state):
            if ident in skip_ids or e.get("root") != root:
                continue
            line = {
                **path_fields(e["src"]),
                "kind": e.get("kind"),
                "reason": e.get("reason"),
                # moved for a quality flag (--quarantine-flags), its integrity was fine: ok, not bad
                "status": R.OK if e.get("reason") == R.FLAGGED else R.BAD,
                "detail": e.get("detail") or "quarantined by an earlier run",
                "quarantined_as": e.get("dst"),
            }
            yield {k: v for k, v in line.items() if v is not None}


def restored_since(qdir: str, root: str, since_ns: int) -> list[bytes]:
    """Paths (relative to ``root``, as bytes) that a restore from ``qdir`` put back at or after ``since_ns``.

    A restore journaled without a time (dsclean before the field existed) counts as recent."""
    out = []
    for state in fold_journals(os.path.abspath(qdir), None, RecoveryReport()):
        for i, e in state.intents.items():
            if (
                e["op"] == "restore"
                and state.outcome.get(i) == "done"
                and e.get("root") == root
                and isinstance(e.get("src"), str)
                and int(e.get("t") or since_ns) >= since_ns
            ):
                out.append(os.fsencode(e["src"]))
    return out


@dataclass
class Status:
    """What ``dsclean status`` reports for a quarantine folder or a dataset root."""

    path: str
    kind: str  # "quarantine" or "root"
    results: list[str] = field(default_factory=list)
    source: str = ""  # which step of the lookup rule found the results
    last_scan: dict | None = None  # the pointer
    summary: dict | None = None  # the last scan's summary counts (of the parts done, for an unfinished job array)
    quarantine: QuarantineState | None = None
    array: dict | None = None  # an unfinished job array whose done parts are ``results`` (:func:`_array_json`)
    newer_array: dict | None = None  # an unfinished job array newer than ``results`` (not used by other commands)
    scanned_root: str | None = None  # the scanned ancestor whose results answer for this folder (None: its own)
    subdir: str = ""  # this folder's path under ``scanned_root``

    def to_json(self) -> dict:
        return asdict(self)


def status(path: str, state_dir: str | None = None) -> Status:
    """The state of a quarantine folder (by its journal), or of a root (its last scan and its quarantine)."""
    if not os.path.isdir(path):
        raise UserError(f"{path}: no such folder (dsclean status takes a quarantine folder or a dataset root)")
    path = os.path.abspath(path)
    stem, ext = os.path.splitext(locations.MANIFEST_FILE)
    if any(n.startswith(stem) and n.endswith(ext) for n in os.listdir(path)):
        return Status(path, "quarantine", quarantine=quarantine_state(path))
    found = locations.find_scan(path, state_dir=state_dir)
    st = Status(path, "root", results=found.paths, source=found.source)
    st.scanned_root, st.subdir = found.scanned_root, found.subdir
    if found.partial is not None:  # only some parts of a job array ran: what they found, and what is missing
        pointers = [found.partial.done[i] for i in sorted(found.partial.done)]
        st.array = _array_json(found.partial)
        st.summary = _summed([p for pointer in pointers for p in pointer.get("summary", [])])
        q = next((p["quarantine"] for p in pointers if p.get("quarantine")), None)
    else:
        st.last_scan = locations.pointer_for(found.scanned_root or path, found.paths, state_dir)
        st.newer_array = _array_json(found.newer) if found.newer is not None else None
        st.summary = _summed(st.last_scan.get("summary", [])) if st.last_scan else None
        q = st.last_scan.get("quarantine") if st.last_scan else None
    if q and os.path.isdir(q):
        st.quarantine = quarantine_state(q)
    return st


def _array_json(array: locations.JobArray) -> dict:
    """A job array's parts for ``status`` (and its --json): done, missing, the commands to run, ignored pointers."""
    return {
        "parts": array.n,
        "done": sorted(array.done),
        "missing": array.missing,
        "finished": max((p.get("finished", "") for p in array.done.values()), default=None),
        "run": array.commands(),
        "ignored": array.ignored,
    }


def _summed(paths: list[str]) -> dict | None:
    """The counts of a scan's summaries, added up over the parts of a job array (one file for a whole scan).

    None when a summary cannot be read: a part's counts alone would pass for the whole scan's."""
    total: dict = {
        "files": 0,
        "bad": 0,
        "quarantined": 0,
        "move_failures": 0,
        "bad_reasons": {},
        "warn_reasons": {},
        "interrupted": False,
        "dry_run": False,
    }
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                full = json.load(f)
        except (OSError, ValueError):
            return None
        if not isinstance(full, dict):
            return None
        for key in ("files", "bad", "quarantined", "move_failures"):
            total[key] += full.get(key) or 0
        for key in ("bad_reasons", "warn_reasons"):
            for reason, n in (full.get(key) or {}).items():
                total[key][reason] = total[key].get(reason, 0) + n
        if len(paths) == 1:  # the set's distributions and inferred norm: a whole scan's only (dsclean.scanning.norm)
            total["distributions"] = full.get("distributions") or {}
            total["norm_flagged"] = full.get("norm_flagged") or {}
            total["splits"] = full.get("splits") or {}  # a split root's files per split (dsclean.splits)
        total["interrupted"] |= bool(full.get("interrupted"))
        total["dry_run"] |= bool(full.get("dry_run"))
    return total if paths else None


def _parts(word: str, parts: list[int], n: int) -> str:
    """``part 2/3`` or ``parts 0/3, 1/3``."""
    return f"{word}{'s' if len(parts) != 1 else ''} {', '.join(f'{i}/{n}' for i in parts)}"


def format_status(st: Status) -> str:
    lines = []
    if st.kind == "root":
        lines.append(f"root {st.path}")
        a = st.array
        if a:
            files = f" ({st.summary['files']:,} files)" if st.summary else ""
            lines.append(
                f"  INCOMPLETE: job array of {a['parts']} parts: {_parts('part', a['done'], a['parts'])} "
                f"done{files}, {_parts('part', a['missing'], a['parts'])} missing — run:"
            )
            lines += [f"    {command}" for command in a["run"]]
            lines.append("  the files of the missing parts were never scanned: nothing below covers them")
        lines.append(f"  results{' (parts done)' if a else ''}: {', '.join(st.results) or 'none'}")
        lines.append(f"  found by: {st.source}")
        if a:
            lines.append(f"  last part finished {a['finished']}")
        if st.last_scan:
            lines.append(f"  last scan finished {st.last_scan.get('finished')}")
        if st.newer_array:
            n = st.newer_array
            lines.append(
                f"  a newer job array of {n['parts']} parts is unfinished ({_parts('part', n['done'], n['parts'])}"
                f" done, {_parts('part', n['missing'], n['parts'])} missing); the results above are used "
                "until every part has run:"
            )
            lines += [f"    {command}" for command in n["run"]]
        if st.summary:
            s = st.summary
            splits = s.get("splits") or {}
            mine = splits.get(st.subdir) if st.scanned_root else None
            if isinstance(mine, dict):
                lines.append(
                    f"  this folder ({st.subdir}/ of {st.scanned_root}): {mine.get('files', 0):,} files, "
                    f"{mine.get('bad', 0):,} bad, {mine.get('warn', 0):,} warn"
                )
            elif splits and not st.scanned_root:
                lines.append(
                    "  splits: "
                    + "; ".join(
                        f"{name} {c.get('files', 0):,} files ({c.get('bad', 0):,} bad)"
                        for name, c in splits.items()
                        if isinstance(c, dict)
                    )
                )
            reasons = ", ".join(f"{r} {n:,}" for r, n in (s.get("bad_reasons") or {}).items())
            lines.append(
                f"  {'in the parts done: ' if a else ''}"
                + (f"in the scan of {st.scanned_root}: " if st.scanned_root else "")
                + f"{s.get('files') or 0:,} files, {s.get('bad') or 0:,} bad"
                + (f" ({reasons})" if reasons else "")
                + (" (dry run)" if s.get("dry_run") else "")
                + (" INTERRUPTED" if s.get("interrupted") else "")
            )
            if s.get("move_failures"):
                lines.append(f"  {s['move_failures']:,} moves failed in that scan (see its problems file)")
            warned = ", ".join(f"{r} {n:,}" for r, n in (s.get("warn_reasons") or {}).items())
            if warned:
                lines.append(f"  warnings: {warned}")
            if s.get("distributions"):
                from ..norm import format_distributions

                lines.append("  the set (distributions):")
                lines += ["  " + line for line in format_distributions(s["distributions"], s.get("norm_flagged"))]
    q = st.quarantine
    if q is not None:
        lines.append(f"quarantine {q.quarantine}" + (f" (root {', '.join(q.roots)})" if q.roots else ""))
        by = ", ".join(f"{r} {n:,}" for r, n in q.by_reason.items())
        lines.append(f"  in quarantine: {q.moved:,} files" + (f" ({by})" if by else ""))
        lines.append(f"  restored:      {q.restored:,}")
        fails = ", ".join(f"{r} {n:,}" for r, n in q.failures.items())
        lines.append(f"  failed moves:  {q.failed:,}" + (f" ({fails})" if fails else ""))
        if q.pending:
            lines.append(f"  half-done:     {q.pending:,} (a killed run; dsclean recover {q.quarantine} finishes them)")
        lines += [f"  unreadable journal line: {b}" for b in q.bad_lines]
    return "\n".join(lines)
