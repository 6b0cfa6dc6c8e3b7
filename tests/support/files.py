"""Writing test files (raw-bytes names allowed)."""

from __future__ import annotations

import os
from pathlib import Path


def write(root: Path, rel: str | bytes, data: bytes) -> Path:
    """Write ``data`` at ``root/rel`` (``rel`` may be raw bytes for non-UTF-8 names)."""
    path = os.path.join(os.fsencode(root), os.fsencode(rel))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return Path(os.fsdecode(path))
