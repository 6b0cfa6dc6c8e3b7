"""Storage URLs: credentials never ride in a URL (it would be kept in the journal, the state folder's name and
every message naming the object)."""

from __future__ import annotations

import pytest

from dsclean.errors import UserError
from dsclean.storage.urls import normalize


def test_credentials_in_a_url_are_refused_without_echoing_them():
    with pytest.raises(UserError) as exc:
        normalize("s3://AKIDEXAMPLE:s3cr3tValue@bucket/prefix/")
    text = str(exc.value)
    assert "s3cr3tValue" not in text and "AKIDEXAMPLE" not in text
    assert "credentials in the URL are not accepted" in text and "bucket/prefix" in text


def test_a_plain_url_is_normalized():
    assert normalize("s3://bucket/prefix/") == "s3://bucket/prefix"
