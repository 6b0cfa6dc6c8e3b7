"""The tar walk's fast header arithmetic against the plain definitions (property tests)."""

from __future__ import annotations

import io
import re
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsclean.pack.tarformat import TarError
from dsclean.shardsets.webdataset import _checksum, _pax, base_plus_ext, iter_members


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


_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset.tariterators.base_plus_ext's expression


@given(st.text(alphabet="ab./\n", max_size=12))
def test_key_and_suffix_are_webdatasets_on_any_name(name):
    m = _BASE_PLUS_EXT.match(name)
    assert base_plus_ext(name) == ((m.group(1), m.group(2)) if m else (None, None))


def _pax_tar(n: int) -> bytes:
    """n members, each after the same PAX header block (a record of one length), as TarWriter writes them."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(n):
            info = tarfile.TarInfo(f"k{i}.jpg")
            info.size = 3
            info.mtime = 1_700_000_000.25  # a float: a PAX mtime record before each member
            tf.addfile(info, io.BytesIO(b"abc"))
    return out.getvalue()


def test_a_damaged_copy_of_a_repeated_extended_header_still_breaks_the_walk():
    data = bytearray(_pax_tar(4))
    assert data[0:512] == data[4096:4608]  # the PAX block before the third member is the first one's bytes
    assert [n for n, _, _, _ in iter_members(io.BytesIO(bytes(data)))] == [f"k{i}.jpg" for i in range(4)]
    data[4096 + 3] ^= 1  # its name: the checksum no longer holds
    walked = []
    with pytest.raises(TarError, match="bad header at byte 4096"):
        for name, _, _, _ in iter_members(io.BytesIO(bytes(data))):
            walked.append(name)
    assert walked == ["k0.jpg", "k1.jpg"]
