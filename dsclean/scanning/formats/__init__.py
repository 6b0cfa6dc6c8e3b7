"""The formats dsclean checks: one module per format's structure, and the one table the checker reads.

Each module here reads one format's structure from its bytes — :mod:`.jpeg`, :mod:`.png`, :mod:`.gif`,
:mod:`.bmp`, :mod:`.tiff`, :mod:`.isobmff` (AVIF, HEIF, JPEG XL), :mod:`.pnm` (PPM/PGM), :mod:`.wav`,
:mod:`.flac`, :mod:`.ogg` (and :mod:`.oggpackets`), :mod:`.mp3`, :mod:`.m4a` (M4A and ADTS AAC; and :mod:`.id3`, the tags MP3 and FLAC files carry) — and says what
is wrong with it as findings; the checks of :mod:`dsclean.scanning.check_image` and
:mod:`dsclean.scanning.check_audio` combine those with a real decode, and a module with a check of its own
(:mod:`.pnm`, :mod:`.isobmff`, :mod:`.m4a`) holds it.

:data:`REGISTRY` is the table :mod:`dsclean.scanning.check` dispatches on: format name -> where its check
function lives. The check modules are imported on the first file of their formats, by the loader functions
below (plain imports an IDE follows), so their decoders load only when needed: a tree of JPEGs never loads
libsndfile or Pillow. Adding a format: its module here, one row in :data:`REGISTRY` (and its name, extensions
and magic bytes in :mod:`dsclean.formats`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:
    from ..check import Checker


@dataclass(frozen=True)
class CheckModule:
    """A module holding check functions: its full name (what a forkserver preloads) and how to import it."""

    name: str
    load: Callable[[], Mapping[str, Checker]]  # imports the module, returns its CHECKERS (format -> check function)


@dataclass(frozen=True)
class Row:
    """One format's entry: the module with its check function; whether that check decodes through Pillow."""

    checks: CheckModule
    pillow: bool = False  # Pillow (and PNG's chunk walker) are preloaded with it: check_image imports them lazily


def _check_image() -> Mapping[str, Checker]:
    from .. import check_image

    return check_image.CHECKERS


def _check_audio() -> Mapping[str, Checker]:
    from .. import check_audio

    return check_audio.CHECKERS


def _pnm() -> Mapping[str, Checker]:
    from . import pnm

    return pnm.CHECKERS


def _isobmff() -> Mapping[str, Checker]:
    from . import isobmff

    return isobmff.CHECKERS


def _m4a() -> Mapping[str, Checker]:
    from . import m4a

    return m4a.CHECKERS


IMAGE = CheckModule("dsclean.scanning.check_image", _check_image)
AUDIO = CheckModule("dsclean.scanning.check_audio", _check_audio)
PNM = CheckModule("dsclean.scanning.formats.pnm", _pnm)
ISOBMFF = CheckModule("dsclean.scanning.formats.isobmff", _isobmff)
M4A = CheckModule("dsclean.scanning.formats.m4a", _m4a)

#: format name (a key of dsclean.formats.FORMATS) -> its row; tests/scanning/test_registry.py checks that
#: every format has one and that each row's module name is the module its check function is in
REGISTRY: dict[str, Row] = {
    "jpeg": Row(IMAGE),  # libjpeg-turbo, not Pillow
    "png": Row(IMAGE, pillow=True),
    "gif": Row(IMAGE, pillow=True),
    "bmp": Row(IMAGE, pillow=True),
    "tiff": Row(IMAGE, pillow=True),
    "webp": Row(IMAGE, pillow=True),
    "ppm": Row(PNM),  # imports Pillow itself
    "avif": Row(ISOBMFF, pillow=True),
    "heif": Row(ISOBMFF, pillow=True),
    "jxl": Row(ISOBMFF, pillow=True),
    "wav": Row(AUDIO),
    "flac": Row(AUDIO),
    "ogg": Row(AUDIO),
    "mp3": Row(AUDIO),
    "m4a": Row(M4A),  # PyAV (FFmpeg), not libsndfile
    "aac": Row(M4A),
}

#: what check_image imports on its first file checked through Pillow (check_image._load_pillow)
PILLOW_MODULES = ("PIL.PngImagePlugin", "dsclean.scanning.formats.png")
