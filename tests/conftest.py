"""The suite's conftest: each test's private state folder; the shared fixtures (trees, media, CLI runners) are
the plugins of tests/support/fixtures/."""

from __future__ import annotations

import pytest

pytest_plugins = [
    "support.fixtures.cli",
    "support.fixtures.trees",
    "support.fixtures.media",
    "support.fixtures.s3",
    "support.fixtures.gcs",
    "support.fixtures.azure",
]


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory, monkeypatch):
    """Every test gets its own per-user state folder (the scan cache, last-scan pointers): no test
    sees another's, and none touches the real ~/.cache. Subprocesses inherit the variables."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.delenv("DSCLEAN_STATE_DIR", raising=False)
