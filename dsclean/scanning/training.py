"""The files of ROOT that failed in training, for the scan to check again whatever its cache says.

Two sources: what ``dsclean quarantine --from-log`` recorded in the root's state folder
(:mod:`dsclean.rechecked`, the records after the last scan's marker), and failure logs handed to
``dsclean scan --from-log LOG`` directly (:mod:`dsclean.failures`; lines naming a file under ROOT:
a relative path whose logged root is ROOT, or an absolute path inside it).
"""

from __future__ import annotations

import os

from .. import rechecked
from ..errors import UserError
from ..failures import read_failures
from ..jsonpaths import path_bytes

#: files taken from logs at most (a runaway log cannot size memory)
MAX_PATHS = 1_000_000


def paths_to_recheck(root: str, state_dir: str | None = None, logs: tuple[str, ...] = ()) -> frozenset[str]:
    """Relative paths (str, surrogateescape) under ``root`` to check again in this scan."""
    root = os.path.abspath(root)
    real = os.path.realpath(root)
    out = set(rechecked.pending_paths(root, state_dir))
    got = read_failures(*logs, limit=MAX_PATHS) if logs else None
    if got is not None and got.refused:
        raise UserError(f"--from-log: cannot read {'; '.join(got.refused)}")
    if got is not None and not got.files:
        raise UserError(f"--from-log: no failure log at {', '.join(logs)} (nor per-process files beside it)")
    for rec in got.failures if got is not None else ():
        if rec.get("shard") is not None or not isinstance(rec.get("path"), str):
            continue
        try:
            name = os.fsdecode(path_bytes(rec))
        except ValueError:
            continue
        base = rec.get("root") if isinstance(rec.get("root"), str) and rec.get("root") else root
        full = name if os.path.isabs(name) else os.path.join(base, name)
        for top in (root, real):
            rel = os.path.relpath(os.path.normpath(full), top)
            if not rel.startswith(os.pardir) and rel != os.curdir and not os.path.isabs(rel):
                out.add(rel)
                break
    return frozenset(out)
