"""The bucket tests: every one runs with the test credentials of the shared S3 server (support.fixtures.s3)."""

from __future__ import annotations

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


@pytest.fixture(autouse=True)
def _aws(aws_env):
    """Every test here has the test credentials set (``aws_env``), bucket or not."""
