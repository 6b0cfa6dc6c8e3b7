"""The tar layout of a shard: fixed header fields, so equal input gives equal bytes.

Plain POSIX ustar, readable by GNU tar, Python's ``tarfile``, webdataset and
wids. Headers are :class:`tarfile.TarInfo`'s (the library formats the fields
and the header checksum); every field but the name and size is fixed.
Each member is a 512-byte header, its data, zero padding to 512; the archive
ends with two zero blocks, padded to a 10240-byte record like ``tar`` does.

:func:`iter_members` walks a shard strictly (every header checked, nothing
past the end of the file, a proper end-of-archive), for reading shards back
and for ``dsclean verify``.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from typing import Iterator

BLOCK = tarfile.BLOCKSIZE  # 512
RECORD = tarfile.RECORDSIZE  # 10240
#: 2000-01-01T00:00:00Z: fixed (reproducible) and not so old that tar -x warns about it
MTIME = 946_684_800
MODE = 0o644


def library_header(name: str, size: int) -> bytes:
    """The 512-byte header of a regular file member with fixed owner, mode and time, as tarfile writes it.

    ustar; a member of 8 GiB or more gets GNU's base-256 size field (still one header block).
    """
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = MTIME
    info.mode = MODE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    fmt = tarfile.USTAR_FORMAT if size < _MAX_USTAR_SIZE else tarfile.GNU_FORMAT
    return info.tobuf(fmt, "ascii", "strict")


# tarfile takes ~90 us per header, more than the rest of a small sample's work; so headers are
# tarfile's own header for a template name and size with those two fields (and the checksum that
# covers them) filled in: the byte-for-byte same result (tests/pack/test_tarformat.py compares them).
_MAX_USTAR_SIZE = 8 << 30  # 11 octal digits
_NAME, _SIZE, _CHKSUM = slice(0, 100), slice(124, 136), slice(148, 156)
_TEMPLATE = bytearray(library_header("x", 0))
_TEMPLATE[_NAME] = bytes(100)
_TEMPLATE[_SIZE] = bytes(12)
_TEMPLATE[_CHKSUM] = b" " * 8
_BASE_SUM = sum(_TEMPLATE)
#: a member header with the name and size fields zeroed and the checksum field blank (spaces), for bulk building
HEADER_TEMPLATE = bytes(_TEMPLATE)


_PADS = [bytes(n) for n in range(101)]  # NUL padding of the name field, by length
_MIDDLE = bytes(_TEMPLATE[100:124])  # mode, uid, gid
_MTIME_FIELD = bytes(_TEMPLATE[136:148])
_REST = bytes(_TEMPLATE[156:])  # type, link name, ustar magic, owner names, ...


def header(name: str, size: int) -> bytes:
    """The 512-byte header of a regular file member with fixed owner, mode and time (= :func:`library_header`)."""
    raw = name.encode("ascii")
    if len(raw) >= 100 or size >= _MAX_USTAR_SIZE:
        return library_header(name, size)
    size_field = b"%011o\0" % size
    checksum = b"%06o\0 " % (_BASE_SUM + sum(raw) + sum(size_field))
    return b"".join((raw, _PADS[100 - len(raw)], _MIDDLE, size_field, _MTIME_FIELD, checksum, _REST))


def padding(size: int) -> bytes:
    """Zeros that pad ``size`` bytes of data to a whole block."""
    return _ZEROS[-size % BLOCK]


_ZEROS = [bytes(n) for n in range(BLOCK)]


def member_bytes(size: int) -> int:
    """Bytes a member of ``size`` bytes takes: header, data, padding."""
    return BLOCK + size + (-size % BLOCK)


def end_of_archive(position: int) -> bytes:
    """Two zero blocks, then zeros to the end of the record (``position``: bytes written so far)."""
    end = position + 2 * BLOCK
    return b"\0" * (2 * BLOCK + (-end % RECORD))


class TarError(Exception):
    """The shard's tar structure is broken; the message says where."""


@dataclass
class Member:
    name: str
    offset: int  # of the data (the header is the 512 bytes before it)
    size: int


#: the most bytes a sidecar member (``.json``, ``.cls``) is read into memory for: pack writes a few
#: hundred; a hostile shard's multi-GiB ``.json`` is refused by its header's size, never copied
MAX_SIDECAR = 1 << 20


def sidecar_bytes(buf, member: Member) -> bytes:
    """The bytes of a small member (``.json``/``.cls``) of the shard mapped as ``buf``, or TarError when too big."""
    if member.size > MAX_SIDECAR:
        raise TarError(
            f"member {member.name} is {member.size:,} bytes, more than the {MAX_SIDECAR:,} a "
            "sample's .json or .cls is read for"
        )
    return bytes(buf[member.offset : member.offset + member.size])


def iter_members(buf, total: int | None = None) -> Iterator[Member]:
    """The members of a tar held in ``buf`` (an mmap or bytes), strictly; raises :class:`TarError`.

    Only regular-file ustar members are allowed (no PAX / GNU long-name headers:
    dsclean writes none). Stops at the end-of-archive blocks, which must be there.
    Every step moves forward by at least one block or raises (a size that is negative,
    as a GNU base-256 field can say, or that runs past the file is broken tar), so a
    hostile header can never make the walk stand still.
    """
    total = len(buf) if total is None else total
    pos = 0
    while True:
        if pos + BLOCK > total:
            raise TarError(f"cut short at byte {pos}: no end-of-archive blocks")
        block = buf[pos : pos + BLOCK]
        if block == b"\0" * BLOCK:
            if pos + 2 * BLOCK > total or buf[pos + BLOCK : pos + 2 * BLOCK] != b"\0" * BLOCK:
                raise TarError(f"a single zero block at byte {pos}: the end-of-archive needs two")
            return
        name, size = _parse(block, pos)
        data = pos + BLOCK
        if size < 0:  # (GNU base-256 allows it): the next header would be at or before this one
            raise TarError(f"member {name!r} at byte {pos} has a negative size ({size})")
        if data + size > total:
            raise TarError(
                f"member {name!r} at byte {pos} runs past the end of the file "
                f"({size} bytes from {data}, file is {total})"
            )
        yield Member(name, data, size)
        following = data + size + (-size % BLOCK)
        if following <= pos:  # never reached (size >= 0 above); the walk must advance on every step
            raise TarError(f"member {name!r} at byte {pos} does not advance the walk")
        pos = following


def _parse(block: bytes, pos: int) -> tuple[str, int]:
    """Name and size of a regular-file header.

    Fast path: read the name and size, and check the block is exactly the header
    dsclean writes for them (so every other field and the checksum are right).
    Anything else goes through :meth:`tarfile.TarInfo.frombuf`, which accepts any
    valid header and says precisely what is wrong with an invalid one.
    """
    try:
        name = block[:100].split(b"\0", 1)[0].decode("ascii")
        size = int(block[124:135], 8)
        if name and block == header(name, size):
            return name, size
    except (ValueError, UnicodeError):
        pass  # not a header dsclean writes: the general parser below accepts it or says what is wrong
    try:
        info = tarfile.TarInfo.frombuf(block, "ascii", "strict")
    except (tarfile.HeaderError, UnicodeError) as exc:
        raise TarError(f"bad header at byte {pos}: {exc}") from None
    if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        raise TarError(f"member {info.name!r} at byte {pos} is not a regular file (type {info.type!r})")
    return info.name, info.size
