"""Shard file name templates (``pack --name``, the packed index's ``packed.name``): one grammar, read as data.

A template is a literal prefix, exactly one integer field for the shard number, and a
literal suffix: ``data-{:06d}.tar``, ``{}.tar``, ``part{0:d}-x.tar``. The field may
say ``0`` (the only positional argument), an optional ``0`` fill flag, a width of at
most :data:`MAX_WIDTH` and ``d``; nothing else (no attribute or index access, no
``!s``/``!r`` conversion, no precision, fill character, alignment or sign). ``{{`` and
``}}`` are literal braces as in ``str.format``.

The template is never handed to ``str.format``: :meth:`ShardNames.name` writes the
prefix, the number and the suffix itself. So a template costs bounded work and
memory whatever it says, and it is injective by construction (different shard
numbers give different names: a number's digits are never cut).
"""

from __future__ import annotations

import functools
import re
import string
from dataclasses import dataclass

from .. import locations

#: the widest field accepted (int64 has 19 digits)
MAX_WIDTH = 20
#: a file name's bytes at most (NAME_MAX on Linux and macOS)
MAX_NAME_BYTES = 255
_SPEC = re.compile(r"(0?)([0-9]{0,3})(d?)")
#: what a template looks like, for messages
EXAMPLE = "data-{:06d}.tar"


class NameTemplateError(ValueError):
    """The template does not follow the grammar; the message says why (without the template itself)."""


@dataclass(frozen=True)
class ShardNames:
    """A parsed template: ``name(k)`` is ``prefix``, ``k`` in decimal (zero- or space-padded to ``width``), ``suffix``."""

    template: str
    prefix: str
    width: int
    zero: bool
    suffix: str

    def name(self, shard: int) -> str:
        if shard < 0:
            raise ValueError(f"shard numbers start at 0, not {shard}")
        digits = str(shard)
        pad = max(0, self.width - len(digits))
        return f"{self.prefix}{('0' if self.zero else ' ') * pad}{digits}{self.suffix}"


def parse(template: str) -> ShardNames:
    """The template as data, or :class:`NameTemplateError` saying what is wrong with it."""
    if not isinstance(template, str):
        raise NameTemplateError(f"it is a {type(template).__name__}, not text")
    if len(template.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise NameTemplateError(f"it is longer than a file name can be ({MAX_NAME_BYTES} bytes)")
    try:
        parts = list(string.Formatter().parse(template))  # (literal, field, spec, conversion); parses only
    except ValueError as exc:
        raise NameTemplateError(f"it is not a format string ({exc})") from None
    fields = [(i, f, spec, conv) for i, (_, f, spec, conv) in enumerate(parts) if f is not None]
    if len(fields) != 1:
        raise NameTemplateError(f"it has {len(fields)} {{}} fields; it needs exactly one, for the shard number")
    at, field, spec, conversion = fields[0]
    if field not in ("", "0"):
        raise NameTemplateError(
            f"its field {{{field}}} is not the shard number ({{}} or {{0}}; no attribute or index access)"
        )
    if conversion is not None:
        raise NameTemplateError(f"its field converts with !{conversion}; the shard number is written as an integer")
    m = _SPEC.fullmatch(spec or "")
    if m is None or "{" in (spec or ""):
        raise NameTemplateError(f"its field's format {spec!r} is not an optional 0 fill, a width and d (like {{:06d}})")
    zero, width_text, _ = m.groups()
    width = int(width_text) if width_text else 0
    if width > MAX_WIDTH:
        raise NameTemplateError(f"its field's width {width} is over {MAX_WIDTH}")
    prefix = "".join(p[0] for p in parts[: at + 1])
    suffix = "".join(p[0] for p in parts[at + 1 :])
    names = ShardNames(template, prefix, width, bool(zero), suffix)
    _check_plain(names)
    return names


def _check_plain(names: ShardNames) -> None:
    """Every name the template gives is a plain file name in the shard folder, not one of dsclean's own."""
    for text in (names.prefix, names.suffix):
        bad = next((c for c in ("/", "\\", "\0") if c in text), None)
        if bad is not None:
            raise NameTemplateError(f"it puts {bad!r} in the names: a shard name must be a plain file name")
    longest = names.name(10 ** (MAX_WIDTH - 1))
    if len(longest.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise NameTemplateError(f"its names can be longer than a file name can be ({MAX_NAME_BYTES} bytes)")
    first = names.name(0)
    if first.startswith("."):
        raise NameTemplateError("its names start with '.' (dsclean's temp files do)")
    if not first.strip():
        raise NameTemplateError("its names are blank")
    if names.prefix.startswith("pack.part-"):
        raise NameTemplateError("its names start with 'pack.part-', as dsclean's own files do")
    own = (locations.PACKED_INDEX_FILE, locations.SHARD_LIST_FILE, locations.PACK_STATE_FILE)
    if any(_could_give(names, n) for n in own):
        raise NameTemplateError(f"it can give one of dsclean's own file names ({', '.join(own)})")


def _could_give(names: ShardNames, target: str) -> bool:
    """Whether some shard number's name is ``target``."""
    if not (
        target.startswith(names.prefix)
        and target.endswith(names.suffix)
        and len(target) >= len(names.prefix) + len(names.suffix)
    ):
        return False
    middle = target[len(names.prefix) : len(target) - len(names.suffix)].strip(" ")
    return middle.isascii() and middle.isdigit() and names.name(int(middle)) == target


@functools.lru_cache(maxsize=32)
def cached(template: str) -> ShardNames:
    """:func:`parse`, remembered (a plan names every shard from the same template)."""
    return parse(template)


def brace_pattern(template: str, shards: int) -> str | None:
    """Shards ``0..shards-1`` as one brace pattern webdataset expands (``data-{000000..000011}.tar``), or None
    when the names cannot be one (space padding, a brace in the literal parts)."""
    names = cached(template)
    if shards < 1 or "{" in names.prefix + names.suffix or "}" in names.prefix + names.suffix:
        return None
    if shards == 1:
        return names.name(0)
    last = names.name(shards - 1)[len(names.prefix) : len(names.name(shards - 1)) - len(names.suffix)]
    if names.width and (not names.zero or len(last) > names.width):
        return None  # braceexpand pads both ends to one width: only zero padding that never overflows
    first = names.name(0)[len(names.prefix) : len(names.name(0)) - len(names.suffix)]
    return f"{names.prefix}{{{first}..{last}}}{names.suffix}"
