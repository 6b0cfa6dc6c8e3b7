"""Which quarantine folders hold the copies ``dsclean dups --quarantine`` moved out of a root.

Before dups moves a root's first copy it records the root's quarantine subfolder in
the root's state folder (``dups_quarantines.json``, next to the last-scan pointer), so
``dsclean report ROOT`` finds those files through their journal: they are no longer
duplicates in the dataset, and their thumbnails come from the quarantine.
"""

from __future__ import annotations

import json
import os

from .. import locations
from ..atomic import atomic_output

#: in a root's state folder: the quarantine folders dups moved the root's copies into (named in locations)
DUPS_QUARANTINES_FILE = locations.DUPS_QUARANTINES_FILE


def recorded_quarantines(root: str, state_dir: str | None = None) -> list[str]:
    """The quarantine folders recorded for ``root`` that still exist (absolute paths)."""
    path = os.path.join(locations.root_state_dir(root, state_dir), DUPS_QUARANTINES_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            folders = json.load(f).get("quarantines")
    except FileNotFoundError:
        return []
    except (OSError, ValueError, AttributeError):
        return []  # a damaged record: the report then only misses these moves, as before dups recorded them
    return (
        [q for q in folders if isinstance(q, str) and os.path.isabs(q) and os.path.isdir(q)]
        if isinstance(folders, list)
        else []
    )


def record_quarantine(root: str, folder: str, state_dir: str | None = None) -> str | None:
    """Add ``folder`` to ``root``'s record (before anything moves there); a note if the state folder is not
    writable (the moves still happen, journaled; only the report will not know of them)."""
    folder = os.path.abspath(folder)
    try:
        state = locations.make_root_state_dir(root, state_dir)
        known = recorded_quarantines(root, state_dir)
        if folder in known:
            return None
        with atomic_output(os.path.join(state, DUPS_QUARANTINES_FILE)) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"root": os.path.realpath(root), "quarantines": [*known, folder]}, f, indent=2)
    except OSError as exc:
        return (
            f"could not record {folder} in the state folder of {root} ({exc.strerror or exc}): "
            "dsclean report will not know these copies were moved"
        )
    return None
