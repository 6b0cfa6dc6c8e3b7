"""Store.fs: a fresh filesystem in each process, never one of fsspec's instance cache."""

from __future__ import annotations

import pytest

pytest.importorskip("s3fs")

from dsclean.storage.fs import Store  # noqa: E402


def test_a_store_never_shares_fsspecs_cached_instance():
    opts = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}  # nothing is requested
    first, second = Store("s3://b/p", dict(opts)), Store("s3://b/p", dict(opts))
    assert first.fs is first.fs  # opened once per process
    assert first.fs is not second.fs  # the same URL and options: fsspec's cache would have given the same one
