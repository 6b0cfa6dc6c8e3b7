"""The tar walk's fast header arithmetic against the plain definitions (property tests)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsclean.pack.tarformat import TarError
from dsclean.shardsets.webdataset import _checksum, _pax


@given(st.binary(min_size=512, max_size=512), st.binary(max_size=600))
def test_the_checksum_from_adler32_is_the_sum_with_the_field_as_spaces(block, before):
    want = sum(block[:148]) + 8 * ord(" ") + sum(block[156:])  # the ustar definition
    assert _checksum(block) == want
    assert _checksum(before + block, len(before)) == want  # a header where it lies in the bytes read ahead


def test_the_checksum_of_the_largest_block_is_exact():
    block = b"\xff" * 512  # each piece's sum (at most 65,280) stays below Adler-32's modulus
    assert _checksum(block) == 504 * 255 + 256


def _pax_by_regex(data: bytes) -> dict[str, str]:
    """The PAX parser as it was written before (a regular expression a record): the reference."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos : pos + 1] != b"\0":
        m = re.match(rb"(\d+) ", data[pos : pos + 21])
        if m is None or int(m.group(1)) <= len(m.group(0)):
            raise TarError("broken")
        length = int(m.group(1))
        if pos + length > len(data):
            raise TarError("past")
        key, sep, value = data[pos + len(m.group(0)) : pos + length - 1].partition(b"=")
        if not sep:
            raise TarError("no =")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _record(key: bytes, value: bytes) -> bytes:
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n += 1
    return str(n).encode() + body


records = st.builds(_record, st.binary(min_size=1, max_size=12).filter(lambda k: b"=" not in k), st.binary(max_size=40))


@given(st.lists(records, max_size=4).map(b"".join), st.binary(max_size=24))
def test_pax_parses_as_the_reference_on_valid_and_damaged_headers(good, noise):
    for data in (good, good + noise, noise + good, good[: len(good) // 2]):
        try:
            want: dict | type = _pax_by_regex(data)
        except TarError:
            want = TarError
        if want is TarError:
            with pytest.raises(TarError):
                _pax(data, "here")
        else:
            assert _pax(data, "here") == want


@pytest.mark.parametrize("digits", ["١٢", "²", "1a", "", " 12"])
def test_a_pax_length_of_other_than_ascii_digits_is_broken(digits):
    with pytest.raises(TarError):
        _pax(f"{digits} path=x\n".encode(), "here")
