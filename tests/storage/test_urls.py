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


CONN = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0S2V5VmFsdWU=;EndpointSuffix=core.windows.net"
SAS = "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sv=2024&sig=c2lnbmF0dXJl"


def test_an_azure_connection_string_is_a_secret_under_its_own_key_or_any_other():
    from dsclean.storage.urls import redact_argv, redact_options, scrub

    argv = ["scan", "az://c/p", "--storage-option", f"connection_string={CONN}", f"--storage-option=other={SAS}"]
    shown = " ".join(redact_argv(argv))
    assert "c2VjcmV0S2V5VmFsdWU=" not in shown and "c2lnbmF0dXJl" not in shown
    assert "connection_string=***" in shown and "other=***" in shown
    options = {"connection_string": CONN, "account_name": "acct", "nested": {"x": SAS}}
    assert redact_options(options) == {"connection_string": "***", "account_name": "acct", "nested": {"x": "***"}}
    # an error quoting only the key (not the whole string) is scrubbed too
    assert scrub("bad key c2VjcmV0S2V5VmFsdWU= for acct", options) == "bad key *** for acct"
    assert scrub(f"opening {CONN}", options) == "opening ***"


def test_public_options_leave_out_a_sas_or_account_key_inside_a_non_secret_keys_value():
    from dsclean.storage.urls import public_options

    options = {
        "account_name": "acct",
        "blob_endpoint": SAS,  # the key's name says nothing secret: its value carries the signature
        "nested": {"other": CONN, "region": "westeurope"},
    }
    kept = public_options(options)
    assert kept == {"account_name": "acct", "nested": {"region": "westeurope"}}
    assert "c2lnbmF0dXJl" not in repr(kept) and "c2VjcmV0S2V5VmFsdWU=" not in repr(kept)
