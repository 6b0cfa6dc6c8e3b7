"""The report's "Failed in training" section: failure logs and what ``quarantine --from-log`` concluded.

Sources: failure logs named with ``dsclean report --failures LOG...`` (:mod:`dsclean.failures`, each
with its per-process files), and the re-checks ``dsclean quarantine --from-log`` recorded in the
root's state folder (:mod:`dsclean.rechecked`), which also give each file's conclusion; a shard
sample's conclusion comes from the deny-list beside its shard (:mod:`dsclean.denylist`). Every string
leaves here as display text, scrubbed of this machine's absolute paths; escaping is the renderer's.
"""

from __future__ import annotations

import os
from collections import Counter

from .. import denylist, rechecked
from ..failures import read_failures
from ..jsonpaths import path_bytes
from .model import TrainingFailures
from .safe import Scrubber, display

#: failure lines read at most; examples shown at most
MAX_LINES = 200_000
MAX_EXAMPLES = 50
_CONCLUSION = {
    "quarantined": "bad: quarantined",
    "would_quarantine": "bad: not moved (dry run)",
    "failed": "bad: move failed",
    "left": "checks ok: left in place",
    "missing": "missing on disk",
    "denied": "bad: on the deny-list",
}
NOT_RECHECKED = "not re-checked yet (dsclean quarantine --from-log)"


def _file_key(rec: dict, root: str | None) -> str | None:
    try:
        name = os.fsdecode(path_bytes(rec))
    except (ValueError, TypeError, KeyError):
        return None
    base = rec.get("root") if isinstance(rec.get("root"), str) and rec.get("root") else root
    full = name if os.path.isabs(name) or not base else os.path.join(base, name)
    return os.path.normpath(full)


def collect_training(
    logs: tuple[str, ...], root: str | None, state_dir: str | None, scrub: Scrubber
) -> TrainingFailures | None:
    """The section's data, or None when there is no log and no record (the section is left out)."""
    records = rechecked.read(root, state_dir) if root else []
    if not logs and not records:
        return None
    out = TrainingFailures()
    verdict: dict[str, dict] = {}  # absolute path -> the latest re-check record
    for rec in records:
        key = _file_key(rec, root)
        if key is not None:
            verdict[key] = rec
    if logs:
        got = read_failures(*logs, limit=MAX_LINES)
        if not got.files and not got.refused:
            from ..errors import UserError

            raise UserError(f"--failures: no failure log at {', '.join(logs)} (nor per-process files beside it)")
        lines = got.failures
        out.sources = [display(scrub(f)) for f in got.files]
        out.damaged_lines, out.torn_lines = got.damaged_lines, got.torn_lines
        out.notes += [display(scrub(r)) for r in got.refused]
    else:
        lines = records
        out.sources = [display(scrub(rechecked.record_path(root, state_dir)))]
    out.total = len(lines)
    out.by_error = [
        (e, k, n)
        for (e, k), n in Counter((str(r.get("error") or "?"), str(r.get("kind") or "?")) for r in lines).most_common()
    ]
    seen: dict[tuple, dict] = {}
    denied: dict[str, set] = {}
    for r in lines:
        shard = r.get("shard")
        if isinstance(shard, str) and isinstance(r.get("key"), str):
            base = r.get("root") if isinstance(r.get("root"), str) and r.get("root") else None
            spath = os.path.normpath(shard if os.path.isabs(shard) or not base else os.path.join(base, shard))
            key = ("sample", spath, r["key"])
            if key in seen:
                continue
            folder = os.path.dirname(spath)
            if folder not in denied:
                denied[folder] = denylist.read_denylist(denylist.denylist_path(folder)).keys()
            conclusion = (
                _CONCLUSION["denied"] if (os.path.basename(spath), r["key"]) in denied[folder] else NOT_RECHECKED
            )
            where = f"{scrub(spath)} [{r['key']}]"
        else:
            full = _file_key(r, root) if isinstance(r.get("path"), str) else None
            if full is None:
                continue
            key = ("file", full)
            if key in seen:
                continue
            v = verdict.get(full)
            conclusion = NOT_RECHECKED if v is None else _CONCLUSION.get(str(v.get("outcome")), str(v.get("outcome")))
            if v is not None and v.get("status") not in (None, "ok") and v.get("reason"):
                conclusion += f" ({v.get('reason')})"
            rel = os.path.relpath(full, root) if root and not os.path.relpath(full, root).startswith("..") else None
            where = rel if rel is not None else scrub(full)
        seen[key] = {
            "where": display(where),
            "error": display(r.get("error") or ""),
            "kind": display(r.get("kind") or ""),
            "message": display(scrub(str(r.get("message") or ""))[:500]),
            "conclusion": display(conclusion),
        }
    out.distinct = len(seen)
    out.conclusions = dict(Counter(e["conclusion"].split(" (")[0] for e in seen.values()).most_common())
    out.examples = list(seen.values())[:MAX_EXAMPLES]
    return out
