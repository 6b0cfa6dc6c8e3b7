"""Reading a written report back in tests: its cards (path, thumbnail or placeholder) and sections."""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass

from PIL import Image

_CARD = re.compile(
    r'<figure class="card (?P<status>[^"]*)"><div class="thumb[^"]*">'
    r'(?:<img src="(?P<src>data:[^"]+)"[^>]*>|<div class="ph">(?P<ph>[^<]*)</div>)'
    r'.*?<div class="path" title="[^"]*">(?P<path>[^<]*)</div>(?P<rest>.*?)</figure>',
    re.S,
)
_SECTION = re.compile(r'<section id="(?P<id>[^"]+)">(?P<body>.*?)</section>', re.S)


@dataclass
class Card:
    path: str  # unescaped display text
    status: str
    src: str | None  # data URI
    placeholder: str | None
    rest: str  # the caption's remaining HTML

    def image(self) -> Image.Image:
        header, data = self.src.split(",", 1)
        assert header in ("data:image/jpeg;base64", "data:image/png;base64"), header
        return Image.open(io.BytesIO(base64.b64decode(data)))

    def raw(self) -> bytes:
        return base64.b64decode(self.src.split(",", 1)[1])


def sections(page: str) -> dict[str, str]:
    return {m["id"]: m["body"] for m in _SECTION.finditer(page)}


def cards(fragment: str) -> list[Card]:
    return [
        Card(
            html.unescape(m["path"]),
            m["status"],
            m["src"],
            html.unescape(m["ph"]) if m["ph"] is not None else None,
            m["rest"],
        )
        for m in _CARD.finditer(fragment)
    ]


def by_path(fragment: str) -> dict[str, Card]:
    return {c.path: c for c in cards(fragment)}
