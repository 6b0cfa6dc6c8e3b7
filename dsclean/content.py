"""What a file is when it is not the media its name says: the words and the fix for ``not_media``.

A scraped or synced dataset's non-media files are few kinds: a Git LFS or git-annex pointer
(the content was never fetched), an HTML page or a JSON/XML error body saved in place of the
image (a CDN's 403, an S3 ``AccessDenied``), a whole HTTP response with its headers, an archive
(the download was never unpacked), an executable or a file of zeros (a disk or transfer
accident). :func:`describe_content` names them from the first bytes, so the verdict's detail
says what to do. Plain functions over bytes: no file access, no decoder, no import past stdlib.
"""

from __future__ import annotations

import json
import re

#: how many leading bytes :func:`describe_content` looks at (an HTML <title>, an error body's code)
HEAD_BYTES = 4096

_ARCHIVE_FIX = "the download was not unpacked (or was saved under a media name): unpack it, or fetch the file again"
#: magic bytes -> (what it is, the fix); checked in order, at offset 0
_MAGIC: tuple[tuple[bytes, str, str], ...] = (
    (b"\x1f\x8b", "gzip-compressed data", _ARCHIVE_FIX),
    (b"PK\x03\x04", "a zip archive", _ARCHIVE_FIX),
    (b"PK\x05\x06", "an empty zip archive", _ARCHIVE_FIX),
    (b"BZh", "bzip2-compressed data", _ARCHIVE_FIX),
    (b"\xfd7zXZ\x00", "xz-compressed data", _ARCHIVE_FIX),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data", _ARCHIVE_FIX),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", _ARCHIVE_FIX),
    (b"Rar!\x1a\x07", "a RAR archive", _ARCHIVE_FIX),
    (b"%PDF-", "a PDF document", "a document saved under a media name: remove it from the dataset"),
    (b"\x7fELF", "an ELF executable", "a program saved under a media name: remove it from the dataset"),
)

_LFS = b"version https://git-lfs.github.com/spec/"
_ANNEX = re.compile(rb"(?:^|/)\.git/annex/objects/|^/annex/objects/|(?:^|/)annex/objects/[^/]+/[^/]+/[A-Z0-9]+E?-s\d+")
_ANNEX_KEY = re.compile(r"[A-Z0-9]+E?-s(\d+)(?:-m\d+)?--")


def describe_content(head: bytes) -> str | None:
    """``"<what it is> — <fix>"`` for recognisable non-media bytes, else None.

    ``head`` is the file's first bytes (:data:`HEAD_BYTES` is enough for every rule here).
    """
    if not head:
        return None
    if head.startswith(_LFS):
        size = re.search(rb"\nsize (\d+)", head)
        of = f" (of a {int(size.group(1)):,}-byte file)" if size else ""
        return f"a Git LFS pointer{of} — the content was never fetched: run git lfs pull"
    if head.startswith((b"/annex/objects/", b".git/annex/objects/")) or (
        len(head) < 512 and b"\n" not in head.rstrip(b"\n") and _ANNEX.search(head)
    ):
        return (
            describe_symlink_target(head.decode("utf-8", "replace").strip())
            or "a git-annex pointer — the content was never fetched: run git annex get"
        )
    for magic, what, fix in _MAGIC:
        if head.startswith(magic):
            return f"{what} — {fix}"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return f"a tar archive — {_ARCHIVE_FIX}"
    if not head.strip(b"\x00"):
        return (
            "all zero bytes — the data never reached the disk (an interrupted copy, a preallocated file): "
            "copy or download it again"
        )
    if re.match(rb"HTTP/[\d.]+ \d{3}", head):  # the headers are text, the body after them may be anything
        head = head.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    text = _text(head)
    if text is None:
        return None
    return _describe_text(text)


def describe_symlink_target(target: str) -> str | None:
    """A dangling symlink's target, when it names a git-annex object: the pointer and its fix."""
    if "annex/objects/" not in target:
        return None
    key = _ANNEX_KEY.search(target.rsplit("/", 1)[-1])
    of = f" (of a {int(key.group(1)):,}-byte file)" if key else ""
    return f"a git-annex pointer{of} — the content was never fetched: run git annex get"


def _text(head: bytes) -> str | None:
    """The bytes as text, when they are text (UTF-8, no control bytes but whitespace)."""
    body = head.lstrip(b"\xef\xbb\xbf")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(body) - 4:  # a character cut at the end of the head is still text
            return None
        text = body[: exc.start].decode("utf-8")
    if any(ord(c) < 32 and c not in "\t\n\r\f" for c in text):
        return None
    return text


_REFETCH = "the server sent an error page instead of the file: fetch it again (check the URL, the credentials)"


def _describe_text(text: str) -> str:
    stripped = text.lstrip()
    status = re.match(r"HTTP/[\d.]+ (\d{3})([^\r\n]*)", stripped)
    if status:
        code, phrase = status.group(1), status.group(2).strip()
        return (
            f"an HTTP response with its headers (status {code}{' ' + phrase if phrase else ''}) — the download "
            "saved the headers with the body: fetch it again without them (curl without -i/-D -)"
        )
    lower = stripped[:200].lower()
    if lower.startswith(("<!doctype html", "<html")) or re.match(r"<(head|body|meta|title)\b", lower):
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        named = f" titled {' '.join(title.group(1).split())[:80]!r}" if title and title.group(1).strip() else ""
        return f"an HTML page{named} — {_REFETCH}"
    if lower.startswith("<?xml") or lower.startswith("<error"):
        code = re.search(r"<Code>([^<]{1,80})</Code>", text)
        message = re.search(r"<Message>([^<]{1,120})</Message>", text)
        if code:
            said = code.group(1) + (f": {message.group(1)}" if message else "")
            return f"an XML error body ({said}) — {_REFETCH}"
        return "an XML document — a text file saved under a media name: remove it or fetch the media again"
    if stripped.startswith(("{", "[")):
        said = _json_error(stripped)
        if said is not None:
            return f"a JSON error body ({said}) — {_REFETCH}" if said else f"a JSON document — {_TEXT_FIX}"
    return f"plain text ({_first_line(stripped)!r}) — {_TEXT_FIX}"


_TEXT_FIX = "a text file saved under a media name: remove it or fetch the media again"


def _json_error(text: str) -> str | None:
    """The message of a JSON error body; "" for JSON without one; None when it is not JSON."""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if doc is None:  # a head cut mid-document: look for the usual keys in the text
        m = re.search(r'"(?:message|error_description|error|detail)"\s*:\s*"([^"]{1,120})"', text)
        return m.group(1) if m else ("" if re.match(r'[{\[]\s*"', text) else None)
    if isinstance(doc, dict):
        for key in ("message", "error_description", "error", "detail", "errors"):
            value = doc.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value.get("code")
            if isinstance(value, list) and value:
                value = value[0].get("message") if isinstance(value[0], dict) else value[0]
            if isinstance(value, (str, int)) and str(value):
                return str(value)[:120]
    return ""


def _first_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0].strip()
    return line if len(line) <= 40 else line[:40] + "…"
