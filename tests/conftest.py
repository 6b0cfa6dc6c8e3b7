"""Shared fixtures: tiny media files written into pytest's tmp_path."""

from __future__ import annotations

import pytest
from support.files import write

from dsclean.scanning.check import CheckOptions, check_file


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory, monkeypatch):
    """Every test gets its own per-user state folder (the scan cache, last-scan pointers): no test
    sees another's, and none touches the real ~/.cache. Subprocesses inherit the variables."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.delenv("DSCLEAN_STATE_DIR", raising=False)


@pytest.fixture
def check(tmp_path):
    """check(name, data, **options) -> Verdict for a file written under tmp_path."""

    def _check(name: str, data: bytes, **options):
        write(tmp_path, name, data)
        return check_file(str(tmp_path), name, CheckOptions(**options))

    return _check
