"""The shared definitions every stage uses: the content hash and the JSON path rule."""
from __future__ import annotations

import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from dsclean.hashing import content_hash, content_hash_file, new_hasher
from dsclean.jsonpaths import path_bytes, path_fields


def test_content_hash_is_blake2b_128(tmp_path):
    data = b"\xff\xd8" + bytes(range(256)) * 5000
    expected = hashlib.blake2b(data, digest_size=16).digest()
    assert content_hash(data) == expected
    (tmp_path / "f").write_bytes(data)
    assert content_hash_file(str(tmp_path / "f")) == expected
    h = new_hasher()
    h.update(data[:7]), h.update(data[7:])
    assert h.digest() == expected and len(expected) == 16


def test_utf8_names_have_no_b64():
    assert path_fields("cats/é.jpg") == {"path": "cats/é.jpg"}


@given(st.binary(min_size=1, max_size=40).filter(lambda b: b"\x00" not in b))
def test_any_name_bytes_survive_json(raw):
    obj = json.loads(json.dumps(path_fields(raw)))
    assert path_bytes(obj) == raw
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        assert "path_b64" in obj
