"""The verdict record: what dsclean decided about one file.

Check functions build a :class:`Verdict`; the scan writes them as rows of the
results table (:data:`dsclean.scanning.results.SCHEMA`); later stages read them back.
Its fields are the results columns of :data:`dsclean.schema.RESULTS`, in order (checked below).
Kept free of pyarrow so checking processes start light.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from .. import reasons
from ..jsonpaths import path_fields
from ..schema import DECODED_FACTS, RESULTS_NAMES


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
    # BLAKE2b-128 of the bytes the check read (dsclean.hashing.content_hash); None if not read or facts off
    content_hash: bytes | None = None
    # quality facts (docs/reference/facts.md, dsclean.quality), from the check's own decode; None = not computed
    phash: int | None = None
    brightness: float | None = None
    contrast: float | None = None
    entropy: float | None = None
    sharpness: float | None = None
    grayscale: bool | None = None
    orientation: int | None = None
    peak: float | None = None
    rms: float | None = None
    clipped: float | None = None
    dc_offset: float | None = None
    silent_channels: int | None = None
    # quality flag codes, set by the scan from the facts and its thresholds (None: facts off, or bad)
    flags: list[str] | None = None

    def set_facts(self, facts: object) -> None:
        """Copy the fact fields an ImageFacts or AudioFacts (dsclean.quality) has into this verdict."""
        for name in FACT_FIELDS:
            value = getattr(facts, name, None)
            if value is not None:
                setattr(self, name, value)

    def mark(self, status: str, reason: str | None, detail: str = "") -> "Verdict":
        """Set the outcome, keeping the worse one if a verdict is already bad."""
        if reasons.STATUSES.index(status) >= reasons.STATUSES.index(self.status):
            self.status, self.reason = status, reason
            if detail:
                self.detail = f"{self.detail}; {detail}" if self.detail else detail
        return self

    def add(self, findings: Iterable["Finding"]) -> "Verdict":
        """Apply rule findings: the worst status wins, with the reason of the *first* finding of that
        status (rules run most specific first); every finding's detail is kept, in order."""
        for f in findings:
            if reasons.STATUSES.index(f.status) > reasons.STATUSES.index(self.status):
                self.status, self.reason = f.status, f.reason
            self.detail = f"{self.detail}; {f.detail}" if self.detail else f.detail
        return self

    def to_json(self) -> dict:
        """A JSON-safe dict (``path`` and, for a non-UTF-8 name, ``path_b64``; ``content_hash`` as hex)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        out.update(path_fields(self.path))  # plus path_b64 when the name is not UTF-8: one rule (jsonpaths)
        if self.content_hash is not None:
            out["content_hash"] = self.content_hash.hex()
        return out


class Finding(NamedTuple):
    """What one integrity rule found. ``detail`` names the rule and where it fired,
    e.g. "PNG frame 3: zlib data check failed (Adler-32)"."""

    status: str  # reasons.WARN or reasons.BAD
    reason: str
    detail: str


def bad(reason: str, detail: str) -> Finding:
    return Finding(reasons.BAD, reason, detail)


def warn(reason: str, detail: str) -> Finding:
    return Finding(reasons.WARN, reason, detail)


FIELDS = tuple(f.name for f in dataclasses.fields(Verdict))
assert FIELDS == RESULTS_NAMES, "Verdict's fields must be dsclean.schema.RESULTS, in order"
#: the per-file fact fields the check fills from its decode (the flags come later, in the scan)
FACT_FIELDS = DECODED_FACTS

_FS_ENCODING = sys.getfilesystemencoding()


def encode_path(rel: str) -> bytes:
    """The exact file-name bytes of a path str (``os.fsencode`` without its per-call overhead)."""
    return rel.encode(_FS_ENCODING, "surrogateescape")


def decode_path(raw: bytes) -> str:
    """The path str of exact file-name bytes (the inverse of :func:`encode_path`)."""
    return raw.decode(_FS_ENCODING, "surrogateescape")


def verdict_of_row(row: tuple) -> Verdict:
    """One results-table row (path as bytes, then the other :data:`FIELDS` in order) back as a Verdict."""
    return Verdict(decode_path(row[0]), *row[1:])
