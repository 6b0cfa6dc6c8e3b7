"""Storage URLs and ``--storage-option KEY=VALUE``: parsing, and keeping secrets out of every output."""

from __future__ import annotations

import re
from typing import Iterable

from ..errors import UserError

#: URL schemes routed to object storage (fsspec implementations: s3fs, gcsfs, adlfs; file:// is local)
SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "file")
_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)
#: storage option keys whose values are secrets (never printed, logged or stored); ``connection``: an Azure
#: connection string (``connection_string``, adlfs) holds the account key or a SAS token
_SECRET = re.compile(
    r"secret|token|password|passwd|credential|key|sas|signature|auth|session|connection|conn_str", re.IGNORECASE
)
#: the parts of an Azure connection string that are secrets: scrubbed on their own too (an error may quote one)
_CONN_SECRET = re.compile(r"(?:AccountKey|SharedAccessSignature)=([^;]+)", re.IGNORECASE)
#: keys that match the pattern above but are not secrets
_NOT_SECRET = {"endpoint_url", "key_prefix", "use_listings_cache"}
REDACTED = "***"


def is_url(text: str) -> bool:
    """True for ``scheme://...`` with a scheme dsclean sends to object storage."""
    m = _URL.match(text)
    return bool(m) and m.group(1).lower() in SCHEMES


def scheme_of(url: str) -> str:
    m = _URL.match(url)
    return m.group(1).lower() if m else ""


def normalize(url: str) -> str:
    """The URL without trailing slashes (``s3://b/p/`` and ``s3://b/p`` are the same prefix)."""
    scheme = scheme_of(url)
    rest = url[len(scheme) + 3 :].rstrip("/")
    if not rest and scheme != "file":
        raise UserError(f"{url}: no bucket in the URL (e.g. s3://BUCKET/PREFIX)")
    if "@" in rest.split("/", 1)[0]:  # s3://KEY:SECRET@bucket/...: never kept in a journal, a path or a message
        raise UserError(
            f"{scheme}://…@{rest.split('@', 1)[1]}: credentials in the URL are not accepted: give them through the "
            "environment (AWS_ACCESS_KEY_ID, ...), a profile or --storage-option"
        )
    return f"{scheme}://{rest}"


def parse_value(text: str) -> object:
    """A storage option's value: true/false, an int, a float, JSON-ish none, else the string."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_storage_options(items: Iterable[str]) -> dict[str, object]:
    """``["KEY=VALUE", ...]`` as fsspec keyword arguments; a dotted key nests (``client_kwargs.region_name=x``)."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--storage-option {redact_item(item)!r}: give KEY=VALUE (e.g. endpoint_url=http://...)")
        parts = key.split(".")
        target = out
        for p in parts[:-1]:
            nested = target.setdefault(p, {})
            if not isinstance(nested, dict):
                raise UserError(f"--storage-option {key}: {p} is already set to a value, not a group")
            target = nested
        target[parts[-1]] = parse_value(value)
    return out


def is_secret(key: str) -> bool:
    """Whether a storage option's value must never appear in output."""
    last = key.rsplit(".", 1)[-1]
    return last not in _NOT_SECRET and bool(_SECRET.search(last))


def is_secret_value(value: object) -> bool:
    """Whether a value holds a secret whatever its key's name (an Azure connection string's account key or SAS)."""
    return isinstance(value, str) and _CONN_SECRET.search(value) is not None


def redact_item(item: str) -> str:
    """``KEY=VALUE`` with a secret's value replaced by ``***``."""
    key, sep, value = item.partition("=")
    return f"{key}={REDACTED}" if sep and (is_secret(key.strip()) or is_secret_value(value)) else item


def redact_options(options: dict) -> dict:
    """A copy of storage options safe to show: secret values replaced by ``***``."""
    return {
        k: redact_options(v) if isinstance(v, dict) else (REDACTED if is_secret(k) or is_secret_value(v) else v)
        for k, v in options.items()
    }


def public_options(options: dict) -> dict:
    """A copy of storage options with every secret left out (not masked: what may be recorded and used again,
    e.g. an endpoint or a region); a value carrying credentials in a URL (``scheme://user:pass@host``) or an
    Azure key or SAS (:func:`is_secret_value`, whatever its key) too."""
    out: dict = {}
    for k, v in options.items():
        if isinstance(v, dict):
            out[k] = public_options(v)
        elif not is_secret(str(k)) and not is_secret_value(v) and not (isinstance(v, str) and _USERINFO.search(v)):
            out[k] = v
    return out


_USERINFO = re.compile(r"://[^/@]*@")


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line safe to record: every ``--storage-option`` secret value replaced by ``***``.

    argparse also takes a shortened flag (``--storage-opt``, ``--st``: any prefix it resolves to the option), so
    any such prefix counts, alone or in the ``=`` form; one that argparse would resolve to another option is only
    redacted where its value looks like a secret ``KEY=VALUE`` (never less safe)."""
    out: list[str] = []
    after_flag = False
    for arg in argv:
        if after_flag:
            out.append(redact_item(arg))
            after_flag = False
            continue
        flag, sep, value = arg.partition("=")
        if not _is_storage_flag(flag):
            out.append(arg)
        elif sep:
            out.append(f"{flag}={redact_item(value)}")
        else:
            out.append(arg)
            after_flag = True
    return out


_STORAGE_FLAG = "--storage-option"


def _is_storage_flag(flag: str) -> bool:
    """Whether argparse could read ``flag`` as ``--storage-option`` (the whole name or a prefix of it)."""
    return len(flag) > 2 and _STORAGE_FLAG.startswith(flag)


def secret_values(options: dict) -> list[str]:
    """Every secret value of ``options`` (for scrubbing an error message that might quote one)."""
    found: list[str] = []
    for k, v in options.items():
        if isinstance(v, dict):
            found += secret_values(v)
        elif (is_secret(k) or is_secret_value(v)) and v is not None and str(v):
            found.append(str(v))
            found += [m.group(1) for m in _CONN_SECRET.finditer(str(v))]  # each secret part alone as well
    return found


def scrub(text: str, options: dict) -> str:
    """``text`` with any secret value of ``options`` replaced by ``***``."""
    for secret in secret_values(options):
        text = text.replace(secret, REDACTED)
    return text
