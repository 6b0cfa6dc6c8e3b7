"""The tar layout: headers equal tarfile's own, and the strict member walk rejects what it must."""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsclean.pack.tarformat import BLOCK, TarError, end_of_archive, header, iter_members, library_header, padding


@given(
    st.text(alphabet="0123456789abcdef.clsjonpgw", min_size=1, max_size=99),
    st.integers(min_value=0, max_value=(8 << 30) + 5),
)
def test_fast_headers_are_tarfiles_headers(name, size):
    assert header(name, size) == library_header(name, size)


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    out, pos = io.BytesIO(), 0
    for name, data in members:
        out.write(header(name, len(data)) + data + padding(len(data)))
        pos += BLOCK + len(data) + len(padding(len(data)))
    out.write(end_of_archive(pos))
    return out.getvalue()


def test_what_we_write_tarfile_reads_and_the_walk_agrees():
    buf = _tar([("a.cls", b"1"), ("a.jpg", b"x" * 700), ("a.json", b"{}")])
    assert len(buf) % 10240 == 0
    with tarfile.open(fileobj=io.BytesIO(buf)) as t:
        got = [(m.name, m.offset_data, m.size) for m in t.getmembers()]
    assert [(m.name, m.offset, m.size) for m in iter_members(buf)] == got


def test_the_walk_is_strict():
    buf = _tar([("a.cls", b"1"), ("a.jpg", b"x" * 700)])
    with pytest.raises(TarError, match="runs past the end"):
        list(iter_members(buf[:1800]))
    with pytest.raises(TarError, match="no end-of-archive"):
        list(iter_members(buf[:2560]))
    broken = bytearray(buf)
    broken[1024 + 5] ^= 1  # a byte of the second header
    with pytest.raises(TarError, match="bad header"):
        list(iter_members(bytes(broken)))
    link = io.BytesIO()
    with tarfile.open(fileobj=link, mode="w", format=tarfile.USTAR_FORMAT) as t:
        info = tarfile.TarInfo("a.jpg")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        t.addfile(info)
    with pytest.raises(TarError, match="not a regular file"):
        list(iter_members(link.getvalue()))


def test_any_valid_ustar_member_is_read_not_only_dsclean_headers():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        info = tarfile.TarInfo("k.jpg")  # another tool's fields: its own mtime, mode, owner
        info.size, info.mtime, info.mode, info.uname = 3, 1_700_000_000, 0o600, "someone"
        t.addfile(info, io.BytesIO(b"abc"))
    assert [(m.name, m.offset, m.size) for m in iter_members(buf.getvalue())] == [("k.jpg", 512, 3)]
