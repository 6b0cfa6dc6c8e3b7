"""Shared fixtures: tiny media files written into pytest's tmp_path."""
from __future__ import annotations

import pytest
from support.files import write

from dsclean.scanning.check import CheckOptions, check_file


@pytest.fixture
def check(tmp_path):
    """check(name, data, **options) -> Verdict for a file written under tmp_path."""

    def _check(name: str, data: bytes, **options):
        write(tmp_path, name, data)
        return check_file(str(tmp_path), name, CheckOptions(**options))

    return _check
