"""Fixtures of the quarantine --from-log tests."""

from __future__ import annotations

import pytest
from support.failurelogs import dataset


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "data"
    files = dataset(root)
    return root, files
