"""The verdict record: what dsclean decided about one file.

Check functions build a :class:`Verdict`; the scan writes them as rows of the
results table (:data:`dsclean.scanning.results.SCHEMA`); later stages read them back.
Kept free of pyarrow so checking processes start light.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

from .. import reasons


@dataclass
class Verdict:
    """What dsclean decided about one file.

    ``path`` is relative to the scan root, as a ``str`` decoded from the file
    system's bytes with ``surrogateescape`` (``os.fsencode(path)`` gives the exact
    name back, even for non-UTF-8 names).
    """

    path: str
    kind: str  # "image" / "audio"
    status: str = reasons.OK
    reason: str | None = None
    detail: str = ""
    size: int | None = None
    mtime_ns: int | None = None
    format: str | None = None  # the real format, from the content
    # image facts
    width: int | None = None
    height: int | None = None
    mode: str | None = None
    # image: frames checked/in the file; audio: sample frames decoded
    frames: int | None = None
    # audio facts
    sample_rate: int | None = None
    channels: int | None = None
    duration: float | None = None
    subtype: str | None = None

    def mark(self, status: str, reason: str | None, detail: str = "") -> "Verdict":
        """Set the outcome, keeping the worse one if a verdict is already bad."""
        if reasons.STATUSES.index(status) >= reasons.STATUSES.index(self.status):
            self.status, self.reason = status, reason
            if detail:
                self.detail = f"{self.detail}; {detail}" if self.detail else detail
        return self

    def to_json(self) -> dict:
        """A JSON-safe dict (lone surrogates survive ``json.dumps`` with its default ensure_ascii)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


FIELDS = tuple(f.name for f in dataclasses.fields(Verdict))

_FS_ENCODING = sys.getfilesystemencoding()


def encode_path(rel: str) -> bytes:
    """The exact file-name bytes of a path str (``os.fsencode`` without its per-call overhead)."""
    return rel.encode(_FS_ENCODING, "surrogateescape")
