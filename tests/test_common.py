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


def test_max_memory_hint_only_for_a_bare_number(tmp_path, capsys):
    """`--max-memory 512` probably meant 512M; `--max-memory 1M` has its unit: no "did you mean 1MM?"."""
    import pytest

    from dsclean.argtypes import memory_floor_problem
    from dsclean.cli import main

    assert "did you mean 512M?" in memory_floor_problem(512, "512")
    assert "did you mean" not in memory_floor_problem(1 << 20, "1M") and "at least 16M" in memory_floor_problem(
        1 << 20, "1M"
    )
    assert "did you mean" not in memory_floor_problem(8 << 20, " 8m ")
    assert "in bytes" in memory_floor_problem(1000)  # the Python API's max_memory=1000
    for command in (["dups", str(tmp_path)], ["scan", str(tmp_path), "--dry-run"]):
        with pytest.raises(SystemExit) as exc:
            main([*command, "--max-memory", "1M"])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "below the 16M" in err and "1MM" not in err and "did you mean" not in err
