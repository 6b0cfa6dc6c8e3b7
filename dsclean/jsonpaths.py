"""How a file path is written into JSON, everywhere dsclean writes JSON.

File names are bytes; JSON holds text. The rule, for problems, pack, dups and
report files alike: ``path`` is the name decoded with ``surrogateescape`` (what
``os.fsdecode`` gives: readable, and lossless inside Python), and when the bytes
are not valid UTF-8, ``path_b64`` carries them exactly (standard base64), so any
reader in any language recovers the real name.
"""

from __future__ import annotations

import base64
import os


def path_fields(path: str | bytes) -> dict:
    """``{"path": ...}`` plus ``"path_b64"`` when the name is not valid UTF-8."""
    raw = os.fsencode(path)
    fields = {"path": os.fsdecode(raw)}
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        fields["path_b64"] = base64.b64encode(raw).decode("ascii")
    return fields


def path_bytes(obj: dict) -> bytes:
    """The exact name bytes of a JSON object written with :func:`path_fields`."""
    if "path_b64" in obj:
        return base64.b64decode(obj["path_b64"], validate=True)
    return os.fsencode(obj["path"])
