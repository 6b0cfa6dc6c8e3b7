"""Shared fixtures: tiny media files written into pytest's tmp_path."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsclean.check import CheckOptions, check_file


def write(root: Path, rel: str | bytes, data: bytes) -> Path:
    """Write ``data`` at ``root/rel`` (``rel`` may be raw bytes for non-UTF-8 names)."""
    path = os.path.join(os.fsencode(root), os.fsencode(rel))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return Path(os.fsdecode(path))


@pytest.fixture
def check(tmp_path):
    """check(name, data, **options) -> Verdict for a file written under tmp_path."""

    def _check(name: str, data: bytes, **options):
        write(tmp_path, name, data)
        return check_file(str(tmp_path), name, CheckOptions(**options))

    return _check
