"""How a sample's media member is named (``pack --ext-policy``), and the webdataset recipe that reads a set.

webdataset picks a sample's fields by member extension: ``to_tuple("jpg", "cls")`` raises
``ValueError: didn't find ['jpg']`` at the first sample whose image is ``.png``, so a set of
mixed formats named by format stops part-way through the one-line recipe. Its decoders
decode by content (``decode("pil")`` hands the bytes to ``PIL.Image.open`` for any image
extension it knows), so one name per kind reads every sample with the bytes unchanged:

- ``by-kind`` (the default): every image member is ``<key>.jpg``, every audio member
  ``<key>.flac``, whatever the real format (the bytes are never re-encoded; the real format
  is the bytes' own, and the source's name is in the ``.json``);
- ``keep``: the real format's canonical extension (magic bytes first: a PNG saved as
  ``.jpg`` is ``.png``), as packs before ``--ext-policy`` did; a set of several formats then
  needs every extension in its keys (``to_tuple("jpg;png", "cls")``), which the recipe says.

:func:`recipe` is what ``pack`` records in ``pack.json`` and prints: the keys, the decode
call, one line of Python (tested by running it, ``tests/pack/test_recipe.py``).
"""

from __future__ import annotations

import json
from typing import Iterable

from ..formats import AUDIO, EXT_TO_FORMAT, IMAGE, kind_of

BY_KIND = "by-kind"
KEEP = "keep"
#: the policies, the default first
POLICIES = (BY_KIND, KEEP)
DEFAULT = BY_KIND
#: the member extension of each kind under ``by-kind``: names webdataset's image decoder and torch_audio take
KIND_EXT = {IMAGE: "jpg", AUDIO: "flac"}
#: the audio decoder of the recipe: soundfile (libsndfile) reads WAV, FLAC, Ogg and MP3 by content
AUDIO_DECODER = 'webdataset.handle_extension("{exts}", lambda data: soundfile.read(io.BytesIO(data)))'


def kind_of_ext(ext: str) -> str:
    """``image`` or ``audio``: the kind of a canonical media extension (no dot)."""
    return kind_of(EXT_TO_FORMAT["." + ext])


def member_ext(real: str, policy: str) -> str:
    """The media member's extension of a sample whose real format's canonical extension is ``real``."""
    return real if policy == KEEP else KIND_EXT[kind_of_ext(real)]


def recipe(exts: Iterable[str], labelled: str, urls: str | None) -> dict:
    """The webdataset pipeline that reads a set whose media members have these extensions.

    ``labelled``: ``all``, ``some`` or ``none`` of the samples have a label (a ``.cls`` member).
    ``urls``: the shards as a brace pattern relative to the folder (:func:`.names.brace_pattern`),
    None when the names cannot be one (then ``shardindex.json`` lists them). ``python`` reads
    ``urls`` (the pattern joined to the folder) and yields ``(media, label)`` tuples (``(media,)``
    unlabelled; the label None for a sample without one when only some have one): a PIL image, or
    ``(samples, rate)`` from soundfile for audio.
    """
    present = sorted(set(exts))
    images = [e for e in present if kind_of_ext(e) == IMAGE]
    audio = [e for e in present if kind_of_ext(e) == AUDIO]
    keys = [";".join(images + audio)] + (["cls"] if labelled != "none" else [])
    handlers = (['"pil"'] if images else []) + ([AUDIO_DECODER.format(exts=" ".join(audio))] if audio else [])
    decode = f"decode({', '.join(handlers)})"
    imports = ["webdataset"] + (["io", "soundfile"] if audio else [])
    args = [json.dumps(k) for k in keys] + (["missing_is_error=False"] if labelled == "some" else [])
    python = f"webdataset.WebDataset(urls, shardshuffle=False).{decode}.to_tuple({', '.join(args)})"
    return {"urls": urls, "keys": keys, "decode": decode, "imports": imports, "python": python}


def mixed_warning(exts: Iterable[str], policy: str) -> str | None:
    """Under ``keep``, a set whose images (or sounds) have more than one extension: what it breaks and the fix."""
    present = sorted(set(exts))
    if policy != KEEP:
        return None
    for kind in (IMAGE, AUDIO):
        mine = [e for e in present if kind_of_ext(e) == kind]
        if len(mine) > 1:
            shown = ", ".join("." + e for e in mine)
            return (
                f"the set's {kind} members have {len(mine)} extensions ({shown}, --ext-policy keep): a reader "
                f'asking for one of them (webdataset\'s to_tuple("{mine[0]}", ...)) stops at the first sample of '
                f'another; read it with every key ("{";".join(mine)}", the recipe below), or pack with '
                f"--ext-policy {BY_KIND} (the default: one extension per kind, the bytes unchanged)"
            )
    return None
