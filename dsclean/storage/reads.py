"""Reading one object: into memory (or, past a threshold, a temp file removed after the check), retried
with backoff on throttling (503 SlowDown, 429) and server errors (5xx), refused clearly on 403/404.

The store's own retries are turned down for S3 and Azure (:func:`quiet_store_retries`) so that every retry
is this module's: counted, logged, with exponential backoff and jitter.
"""

from __future__ import annotations

import errno
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from .. import reasons as R
from ..openfile import NotRegularFile

log = logging.getLogger("dsclean.storage.reads")
T = TypeVar("T")

DEFAULT_RETRIES = 6  # attempts after the first
DEFAULT_READ_THREADS = 16  # reads in flight per worker
BASE_DELAY = 0.1  # seconds; doubled each attempt, with full jitter, capped
MAX_DELAY = 20.0
_TRANSIENT_ERRNOS = {
    errno.EBUSY,
    errno.EAGAIN,
    errno.ETIMEDOUT,
    errno.ECONNRESET,
    errno.ECONNREFUSED,
    121,
}  # 121: EREMOTEIO


@dataclass(frozen=True)
class ReadPolicy:
    """How objects are read: retries, and the size past which an object goes through a temp file."""

    retries: int = DEFAULT_RETRIES
    base_delay: float = BASE_DELAY
    max_in_memory: int = 256 << 20  # bytes


class ObjectError(Exception):
    """An object that could not be read: ``reason`` is a reason code (unreadable, vanished), ``detail`` says why."""

    def __init__(self, key: str, reason: str, detail: str) -> None:
        super().__init__(f"{key}: {detail}")
        self.key, self.reason, self.detail = key, reason, detail


def http_status(exc: BaseException) -> int | None:
    """The HTTP status behind an exception (botocore's ClientError, possibly as the cause of s3fs's OSError;
    gcsfs's "Forbidden" OSError)."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 8:  # a cause chain is data too: bounded
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
        status = getattr(e, "status", None) or getattr(e, "status_code", None)
        if isinstance(status, int):
            return status
        if type(e) is OSError and str(e).startswith("Forbidden: "):  # gcsfs's 403: a bare OSError, URL and body
            return 403
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def is_transient(exc: BaseException) -> bool:
    """Throttling, a server error or a dropped connection: worth another try."""
    status = http_status(exc)
    if status is not None:
        return status == 429 or status >= 500
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    name = type(exc).__name__
    return name in {
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "ClientPayloadError",
        "ServiceRequestError",  # azure-core: the request did not reach the service (connection refused, reset)
        "ServiceResponseError",  # azure-core: the response broke off (a reset mid-body, a read timeout)
        "IncompleteReadError",
    }


def describe(exc: BaseException) -> str:
    status = http_status(exc)
    text = str(exc) or type(exc).__name__
    return f"HTTP {status}: {text}" if status else text


def retried(call: Callable[[], T], what: str, policy: ReadPolicy, on_retry: Callable[[], None] | None = None) -> T:
    """``call()``, again after a backoff while it fails transiently, at most ``policy.retries`` more times."""
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc) or attempt >= policy.retries:
                raise
            delay = random.uniform(0, min(MAX_DELAY, policy.base_delay * (2**attempt)))
            attempt += 1
            log.debug("%s: %s; retry %d of %d in %.2f s", what, describe(exc), attempt, policy.retries, delay)
            if on_retry is not None:
                on_retry()
            time.sleep(delay)


def classify(key: str, exc: BaseException) -> ObjectError:
    """What a failed read means for the object ``key``: 404 vanished, 403 refused, anything else unreadable."""
    status = http_status(exc)
    if isinstance(exc, NotRegularFile):
        return ObjectError(key, R.NOT_REGULAR, f"a {exc.kind}, not a regular file: not opened, not moved")
    if isinstance(exc, FileNotFoundError) or status == 404:
        return ObjectError(key, R.VANISHED, f"object not found (404) when read: {key}")
    if isinstance(exc, PermissionError) or status == 403:
        return ObjectError(key, R.UNREADABLE, f"access denied (403) reading {key}: check the credentials' rights")
    if is_transient(exc):
        return ObjectError(key, R.UNREADABLE, f"still failing after retries: {describe(exc)}")
    return ObjectError(key, R.UNREADABLE, describe(exc))


def quiet_store_retries(fs: Any, scheme: str) -> None:
    """Leave retrying to :func:`retried` (s3fs's own loop retries SlowDown without counting it; the Azure SDK's
    under adlfs retries a 503 or 500 three times after 15 s, 18 s, 24 s: two throttled reads of one blob cost
    40 s, uncounted, before dsclean's own retries even start)."""
    if scheme in ("s3", "s3a") and hasattr(fs, "retries"):
        fs.retries = 1
    elif scheme in ("az", "abfs", "abfss"):
        # adlfs passes no retry settings to its BlobServiceClient: its retry policy (one object, shared by every
        # container and blob client it makes) is turned down in place; absent (another SDK layout): left alone
        config = getattr(getattr(fs, "service_client", None), "_config", None)
        policy = getattr(config, "retry_policy", None)
        for name in ("total_retries", "connect_retries", "read_retries", "status_retries"):
            if isinstance(getattr(policy, name, None), int):
                setattr(policy, name, 0)


def read_object(store: Any, rel: str, policy: ReadPolicy = ReadPolicy()) -> bytes:
    """The bytes of the object ``rel`` under ``store``'s prefix (a :class:`~dsclean.storage.fs.Store`): one GET,
    retried with backoff while it fails transiently; an :class:`ObjectError` naming the key otherwise
    (404: not found, 403: access denied). What ``IndexedDataset`` reads a sample of a URL root with."""
    fs = store.fs  # this process's filesystem (a forked worker opens its own)
    quiet_store_retries(fs, store.scheme)
    path = store.path(rel)
    extra = {"max_concurrency": 1} if store.scheme in ("s3", "s3a") else {}
    try:
        return retried(lambda: fs.cat_file(path, **extra), rel, policy)
    except Exception as exc:
        raise classify(rel, exc) from None
