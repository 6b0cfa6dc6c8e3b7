"""Quality flags: named conditions derived from the facts, several may hold at once.

Flags are not verdicts: a flagged file is whole and decodable, and ``status`` /
``reason`` stay the integrity verdict. Every threshold is a field of
:class:`FlagOptions`, with the default documented there and in docs/reference/reasons.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the CLI reads FLAGS and FlagOptions without numpy or Pillow
    from .audio import AudioFacts
    from .image import ImageFacts

DARK = "dark"
BRIGHT = "bright"
LOW_INFORMATION = "low_information"
BLURRY = "blurry"
TINY = "tiny"
ODD_ASPECT = "odd_aspect"
SILENT = "silent"
SILENT_CHANNEL = "silent_channel"
CLIPPED = "clipped"
DC_OFFSET = "dc_offset"
TOO_SHORT = "too_short"

#: flag code -> what it means (docs/reference/reasons.md is generated from this)
FLAGS: dict[str, str] = {
    DARK: "image: mean luma below dark (default 0.10 of full scale)",
    BRIGHT: "image: mean luma above bright (default 0.92 of full scale)",
    LOW_INFORMATION: "image: nearly one flat tone (luma std below min_contrast, default 0.02); left out of near-duplicate search",
    BLURRY: "image: Laplacian variance of the 64x64 thumbnail below blurry (default 0.02) times the luma variance; not judged under 64 px or when flat",
    TINY: "image: shorter side below tiny pixels (default 32)",
    ODD_ASPECT: "image: longer side more than odd_aspect times the shorter (default 4)",
    SILENT: "audio: RMS level over all channels below silence (default 0.001, -60 dBFS)",
    SILENT_CHANNEL: "audio: some but not all channels are silent (RMS below -60 dBFS)",
    CLIPPED: "audio: more than clipped of the samples (default 0.001) at or within 1 LSB of full scale",
    DC_OFFSET: "audio: a channel's mean sample value beyond dc_offset (default 0.05 of full scale)",
    TOO_SHORT: "audio: shorter than too_short seconds (default 0.1)",
}


@dataclass(frozen=True)
class FlagOptions:
    """Flag thresholds. Small and picklable (it travels to workers with the check options)."""

    dark: float = 0.10  # mean luma (0..1) below this: dark
    bright: float = 0.92  # mean luma above this: bright
    min_contrast: float = 0.02  # luma std (0..1) below this: low_information (about 5 of 255 levels)
    blurry: float = 0.02  # sharpness / luma variance (both in 0..255 units) below this: blurry (contrast-free)
    tiny: int = 32  # shorter side (pixels) below this: tiny
    odd_aspect: float = 4.0  # longer / shorter side above this: odd_aspect
    silence: float = 1e-3  # RMS (0..1) over all channels below this: silent
    clipped: float = 1e-3  # clipped-sample fraction above this: clipped
    dc_offset: float = 0.05  # |mean sample| above this on any channel: dc_offset
    too_short: float = 0.1  # seconds below this: too_short


def image_flags(
    facts: ImageFacts | None, width: int | None, height: int | None, options: FlagOptions = FlagOptions()
) -> list[str]:
    """The flags of an image from its facts and size (either may be missing: then those flags are not judged)."""
    out = []
    if width and height:
        short, long = min(width, height), max(width, height)
        if short < options.tiny:
            out.append(TINY)
        if long > options.odd_aspect * short:
            out.append(ODD_ASPECT)
    if facts is None:
        return out
    if facts.brightness is not None:
        if facts.brightness < options.dark:
            out.append(DARK)
        elif facts.brightness > options.bright:
            out.append(BRIGHT)
    flat = facts.contrast is not None and facts.contrast < options.min_contrast
    if flat:
        out.append(LOW_INFORMATION)
    elif facts.sharpness is not None and facts.contrast is not None:
        if facts.sharpness < options.blurry * (255.0 * facts.contrast) ** 2:
            out.append(BLURRY)
    return out


def audio_flags(facts: AudioFacts | None, options: FlagOptions = FlagOptions()) -> list[str]:
    """The flags of a sound from its facts."""
    if facts is None:
        return []
    out = []
    if facts.duration is not None and facts.duration < options.too_short:
        out.append(TOO_SHORT)
    if facts.rms is not None and facts.rms < options.silence:
        out.append(SILENT)
    elif facts.silent_channels and facts.channels and facts.channels > 1:
        out.append(SILENT_CHANNEL)
    if facts.clipped is not None and facts.clipped > options.clipped:
        out.append(CLIPPED)
    if facts.dc_offset is not None and facts.dc_offset > options.dc_offset:
        out.append(DC_OFFSET)
    return out
