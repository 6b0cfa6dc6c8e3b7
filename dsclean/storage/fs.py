"""The fsspec filesystem of a storage URL, with its storage options and the standard credential places.

Credentials and endpoints come from where each backend looks (for S3: ``AWS_ACCESS_KEY_ID`` /
``AWS_PROFILE`` / ``~/.aws``, ``AWS_ENDPOINT_URL``; fsspec's own config files) plus the
``--storage-option KEY=VALUE`` the user gives. Nothing here logs the options' values.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from .urls import normalize, redact_options, scheme_of, scrub

log = logging.getLogger("dsclean.storage")

#: scheme -> the package (and dsclean extra) that implements it
BACKENDS = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
}


@dataclass
class Store:
    """A bucket prefix: its URL, the options to open it, and (opened lazily, per process) its filesystem."""

    url: str
    options: dict = field(default_factory=dict, repr=False)  # may hold secrets: never shown (repr=False)
    _fs: Any = field(default=None, repr=False, compare=False)
    _root: str = field(default="", repr=False, compare=False)
    _pid: int = field(default=0, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.url = normalize(self.url)

    def __getstate__(self) -> dict:  # to a worker process: the URL and options, not an open filesystem
        return {"url": self.url, "options": self.options, "_fs": None, "_root": "", "_pid": 0}

    @property
    def scheme(self) -> str:
        return scheme_of(self.url)

    @property
    def fs(self) -> Any:
        """The filesystem, opened in this process: a forked child (a DataLoader worker) opens its own, since an
        async filesystem made in the parent is bound to the parent's event loop thread, which the child lacks.
        Always a fresh instance, never one of fsspec's instance cache: a cached one may have been made before a
        fork, or by other code of the process with its own settings (dsclean turns an S3 store's retries down)."""
        if self._fs is None or self._pid != os.getpid():
            self._fs, self._root = open_filesystem(self.url, self.options, fresh=True)
            self._pid = os.getpid()
        return self._fs

    @property
    def root(self) -> str:
        """The prefix as the filesystem names it (``bucket/prefix``, no scheme, no trailing slash)."""
        self.fs  # noqa: B018 - opens it
        return self._root

    def path(self, rel: str) -> str:
        """The filesystem path of the object ``rel`` (relative to the prefix)."""
        return f"{self.root}/{rel}" if self.root else rel

    def url_of(self, rel: str) -> str:
        return f"{self.url}/{rel}"

    def describe_options(self) -> dict:
        return redact_options(self.options)


def open_filesystem(url: str, options: dict, fresh: bool = False) -> tuple[Any, str]:
    """``(filesystem, path)`` of ``url``; a :class:`UserError` naming the missing package or bad option.

    ``fresh``: a new instance, never one of fsspec's instance cache (which a forked child may have inherited)."""
    try:
        import fsspec
    except ImportError as exc:
        raise UserError("object storage needs fsspec: pip install 'dsclean[s3]'") from exc
    scheme = scheme_of(url)
    kwargs = _with_own_retries(scheme, options)
    if fresh:
        kwargs = {**kwargs, "skip_instance_cache": True}
    try:
        fs, path = fsspec.core.url_to_fs(url, **kwargs)
    except ImportError as exc:
        pkg = BACKENDS.get(scheme, "an fsspec implementation")
        raise UserError(f"{scheme}:// URLs need {pkg}: pip install 'dsclean[s3]' (or {pkg})") from exc
    except (TypeError, ValueError) as exc:
        raise UserError(f"cannot open {url}: {scrub(str(exc), options)}") from None
    log.debug("opened %s with options %s", url, redact_options(options))
    return fs, path.rstrip("/")


def _with_own_retries(scheme: str, options: dict) -> dict:
    """For S3, botocore's own retries off (unless the user set them): dsclean's reads retry, count and log
    each throttled or failed request themselves (:mod:`.reads`)."""
    if scheme not in ("s3", "s3a"):
        return options
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
    return {**options, "config_kwargs": config}
