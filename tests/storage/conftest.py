"""A real S3 API server (moto in server mode) on 127.0.0.1 for the whole session, and a fresh bucket per test."""

from __future__ import annotations

import uuid

import pytest
from support.s3server import start_moto

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


@pytest.fixture(scope="session")
def s3_endpoint():
    server, endpoint = start_moto()
    yield endpoint
    server.stop()


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, s3_endpoint):
    """Test credentials in the standard variables (subprocesses inherit them); no real AWS config read."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.fixture
def s3fs_direct(s3_endpoint):
    import s3fs

    return s3fs.S3FileSystem(endpoint_url=s3_endpoint, key="testing", secret="testing", skip_instance_cache=True)


@pytest.fixture
def bucket(s3fs_direct):
    """A new empty bucket's name."""
    name = f"b-{uuid.uuid4().hex[:12]}"
    s3fs_direct.mkdir(name)
    return name
