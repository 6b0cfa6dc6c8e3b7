"""One file's facts and flags, as one record (the row the results table stores).

The fact columns are :data:`dsclean.schema.FACTS` (the fields of :class:`Facts`, checked below; their
Arrow types: :data:`dsclean.quality.columns.FACT_COLUMNS`); this module stays free of pyarrow so
checking processes start light.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..schema import AUDIO_FACTS, FACT_NAMES, IMAGE_FACTS
from .flags import FlagOptions, audio_flags, image_flags

if TYPE_CHECKING:  # annotations only: the results' columns need this module without numpy or Pillow
    from .audio import AudioFacts
    from .image import ImageFacts


@dataclass
class Facts:
    """Facts of one file; None = not computed or not applicable. Field names are the column names."""

    content_hash: bytes | None = None
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
    flags: list[str] = field(default_factory=list)

    @classmethod
    def of_image(
        cls,
        facts: ImageFacts | None,
        width: int | None,
        height: int | None,
        options: FlagOptions = FlagOptions(),
        content_hash: bytes | None = None,
    ) -> "Facts":
        """An image's record: its facts (None if its pixels were not decoded) and flags."""
        out = cls(content_hash=content_hash, flags=image_flags(facts, width, height, options))
        if facts is not None:
            for name in IMAGE_FACTS:
                setattr(out, name, getattr(facts, name))
        return out

    @classmethod
    def of_audio(
        cls, facts: AudioFacts | None, options: FlagOptions = FlagOptions(), content_hash: bytes | None = None
    ) -> "Facts":
        """A sound's record: its level facts and flags."""
        out = cls(content_hash=content_hash, flags=audio_flags(facts, options))
        if facts is not None:
            for name in AUDIO_FACTS:
                setattr(out, name, getattr(facts, name))
        return out

    def row(self) -> dict:
        """Column name -> value, every fact column present (docs/reference/facts.md)."""
        return dataclasses.asdict(self)


FIELDS = tuple(f.name for f in dataclasses.fields(Facts))
assert FIELDS == FACT_NAMES, "Facts' fields must be dsclean.schema.FACTS, in order"
