"""Checkers for the image formats phones and scraped sets now carry: AVIF, HEIF/HEIC, JPEG XL.

Each gets its container's rules first (:mod:`dsclean.scanning.isobmff`: every box whole, every
image item's extents inside the file, JPEG XL's codestream parts in sequence), then a full decode
through Pillow with the format's plugin: AVIF by Pillow itself (libavif), HEIF by ``pillow-heif``
(libheif), JPEG XL by ``pillow-jxl-plugin`` (libjxl). The plugins are optional (extras
``dsclean[heif]`` and ``dsclean[jxl]``): without one, a file whose container is whole is
``warn``/``unsupported`` naming the extra to install — never ``ok`` unchecked, never ``bad``
because a decoder is missing. A damaged container is ``bad`` whatever is installed.
"""
from __future__ import annotations

import contextlib
import importlib

from .. import reasons as R
from . import check, check_image, isobmff
from .verdict import Verdict

#: format -> (the module whose import registers its Pillow decoder, or None for Pillow's own; how to install it)
DECODERS: dict[str, tuple[str | None, str]] = {
    "avif": (None, "pip install -U 'pillow>=11.3' (its wheels carry libavif)"),
    "heif": ("pillow_heif", "pip install 'dsclean[heif]'"),
    "jxl": ("pillow_jxl", "pip install 'dsclean[jxl]'"),
}
_ready: dict[str, str | None] = {}  # format -> None (decoder ready) or why it is not


def decoder_missing(fmt: str) -> str | None:
    """None if this format's decoder is installed (registering it with Pillow on first use), else why not."""
    if fmt not in _ready:
        module, install = DECODERS[fmt]
        hint = f"install it with {install}"
        with check.import_guard() if check.import_guard is not None else contextlib.nullcontext():
            try:
                if module is None:
                    from PIL import features

                    _ready[fmt] = None if features.check("avif") else f"this Pillow has no AVIF support; {hint}"
                else:
                    plugin = importlib.import_module(module)
                    if module == "pillow_heif":
                        plugin.register_heif_opener()
                    _ready[fmt] = None
            except ImportError:
                _ready[fmt] = f"no {fmt.upper()} decoder is installed ({module}); {hint}"
    return _ready[fmt]


def _check(walk: isobmff.Walk, data, v: Verdict, opts, fmt: str) -> None:
    v.add(walk.findings)
    if v.status == R.BAD:
        return
    missing = decoder_missing(fmt)
    if missing is not None:
        v.mark(R.WARN, R.UNSUPPORTED, f"the {fmt.upper()} container is whole, the image was not decoded: {missing}")
        return
    check_image._check_with_pillow(data, v, opts)


def check_avif(data, v: Verdict, opts) -> None:
    """AVIF: the ISOBMFF box walk and item extents, then Pillow's AVIF decoder (libavif), every frame."""
    _check(isobmff.walk_heif(data), data, v, opts, "avif")


def check_heif(data, v: Verdict, opts) -> None:
    """HEIF/HEIC: the ISOBMFF box walk and item extents, then libheif through pillow-heif."""
    _check(isobmff.walk_heif(data), data, v, opts, "heif")


def check_jxl(data, v: Verdict, opts) -> None:
    """JPEG XL: the container's boxes and codestream part numbers (a bare codestream has none), then libjxl."""
    walk = isobmff.walk_jxl(data)
    _check(walk, data, v, opts, "jxl")
    if v.status == R.BAD and v.reason == R.CORRUPT and not walk.boxes and "Generic Error" in (v.detail or ""):
        # libjxl's only words for a bad codestream; a bare one carries no sizes to tell a cut from damage
        v.detail = "libjxl cannot decode the codestream (a bare JPEG XL codestream has no sizes to tell a cut " \
                   "file from a damaged one)"


CHECKERS = {"avif": check_avif, "heif": check_heif, "jxl": check_jxl}
