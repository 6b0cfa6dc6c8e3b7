"""Hostile text made safe for the report: HTML escaping, JSON inside a script tag, no machine paths.

File names and decoder messages are attacker-controlled input: a file named
``<img src=x onerror=alert(1)>.jpg`` must show as those characters. Every
string goes through :func:`esc` (HTML) or :func:`script_json` (data for the
page's script) on its way into the report, and through a :class:`Scrubber`
first, which takes the absolute paths of the user's machine out of messages and
command lines (unless ``--absolute-paths``).
"""

from __future__ import annotations

import html
import json
import os
import re

#: characters that would make a name look like something it is not, shown as escapes instead:
#: C0/C1 controls (a newline in a name) and Unicode bidi controls (right-to-left override tricks)
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape_invisible(m: re.Match) -> str:
    c = m.group()
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c) or (
        f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    )


def display(text: object) -> str:
    """Text as shown to a reader: valid Unicode (undecodable bytes as U+FFFD), controls made visible."""
    s = text if isinstance(text, str) else os.fsdecode(text) if isinstance(text, bytes) else str(text)
    s = s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return _INVISIBLE.sub(_escape_invisible, s)


def esc(text: object) -> str:
    """HTML-escape text for element content and quoted attribute values."""
    return html.escape(display(text), quote=True)


def script_json(obj: object) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``</script>``, no ``<!--``."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# An absolute path with at least two components: "/" not preceded by a path or word character.
_PATH_CHARS = r"[^\s/'\"`<>:;,()\[\]{}|=]"
_ABSOLUTE = re.compile(rf"(?<![\w.~/\\-])/(?:{_PATH_CHARS}+/)+{_PATH_CHARS}*")


class Scrubber:
    """Replaces absolute paths of this machine in text with short stand-ins.

    Known folders become labels (``named={"/abs/data": "ROOT"}`` turns
    ``/abs/data/cats/x.jpg`` into ``ROOT/cats/x.jpg``); the home folder becomes
    ``~``; any other absolute path is cut to ``…/<last part>``. With
    ``keep=True`` text passes unchanged (``--absolute-paths``).
    """

    def __init__(self, named: dict[str, str] | None = None, *, keep: bool = False) -> None:
        self.keep = keep
        prefixes: dict[str, str] = {}
        home = os.path.expanduser("~")
        for path, label in [*(named or {}).items(), (home, "~")]:
            if not path or not os.path.isabs(path) or path.rstrip("/") == "":
                continue
            for variant in {os.path.abspath(path), os.path.realpath(path)}:
                prefixes.setdefault(variant.rstrip("/"), label)
        # longest first, so /data/images wins over /data
        ordered = sorted(prefixes, key=len, reverse=True)
        self._named = [(re.compile(re.escape(p) + r"(?=/|$|[^\w.\-])"), prefixes[p]) for p in ordered]

    def __call__(self, text: str) -> str:
        if self.keep or not text:
            return text
        for pattern, label in self._named:
            text = pattern.sub(lambda _m, label=label: label, text)
        return _ABSOLUTE.sub(_shorten, text)

    def command(self, argv: list[str]) -> str:
        """A command line for display: the program's path cut to its name, paths scrubbed, quoted as a shell would."""
        if not argv:
            return ""
        head = os.path.basename(argv[0]) if not self.keep else argv[0]
        return " ".join(_quote(self(a)) for a in [head, *argv[1:]])


_PLAIN_ARG = re.compile(r"[\w@%+=:,./~…-]+")


def _quote(arg: str) -> str:
    """An argument as a shell would need it typed (the scrubber's ``…`` needs no quotes)."""
    import shlex

    return arg if _PLAIN_ARG.fullmatch(arg) else shlex.quote(arg)


def _shorten(m: re.Match) -> str:
    last = m.group().rstrip("/").rsplit("/", 1)[-1]
    return f"…/{last}"
