"""WebDataset tars from any writer (tarfile, ``webdataset.TarWriter``, img2dataset, GNU tar), streamed.

:func:`read_shard` walks a tar (or ``.tar.gz``) from a plain file object, one header block at a time,
with the hardened walker's rules (:mod:`dsclean.pack.tarformat`: every step moves forward by at least a
block, nothing read past what a header promises, sizes checked before memory is sized) but accepting
what other writers put in a tar (PAX and GNU long-name headers, folders). Members are grouped into
samples as webdataset groups them (``webdataset.tariterators.base_plus_ext`` and ``group_by_keys``:
the key is everything before the first dot of the base name, consecutive members with one key are a
sample). Reported besides each media member's verdict: a tar cut short or with a broken header, a
member name twice in one sample (webdataset raises ``ValueError``), a sample whose members are not
adjacent (streaming readers see two samples).
"""

from __future__ import annotations

import gzip
import io
import re
import struct
import tarfile
import zlib
from typing import IO, Callable, Iterator

from .. import reasons as R
from ..formats import EXT_TO_FORMAT
from ..pack.tarformat import BLOCK, TarError
from .events import Problem, ReadFailed, Sample, ShardDone

#: a media member larger than this is not read into memory (reported too_large)
MAX_SAMPLE = 1 << 30
#: keys of one shard remembered to find a split sample (beyond them the check stops, with a note): bounded memory
#: whatever a hostile shard holds; real shards have thousands
MAX_KEYS = 1_000_000
#: a PAX extended header or GNU long name larger than this is broken (real ones are a few hundred bytes)
MAX_EXTENDED = 1 << 20
_SKIP_PIECE = 1 << 20
_ZERO = bytes(BLOCK)
_DECIMAL = re.compile(r"[0-9]{1,30}")  # a PAX size: ASCII digits (30: a bound before int() sizes anything)
_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext


class CutMember(TarError):
    """The stream ends inside a member's data: ``name`` is that member."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


def base_plus_ext(name: str) -> tuple[str | None, str | None]:
    """Key and suffix of a member name, as webdataset splits them (None, None: not part of a sample)."""
    if "\n" not in name:  # the regular expression's answer when the base name has a dot after its first character
        start = name.rfind("/") + 1
        dot = name.find(".", start)
        if dot > start:
            return name[:dot], name[dot + 1 :]
    m = _KEY.match(name)
    return (m.group(1), m.group(2)) if m else (None, None)


def open_stream(f: IO[bytes], name: str) -> IO[bytes]:
    """The tar bytes of the file object ``f``: gunzipped for ``.tar.gz``/``.tgz`` (or gzip magic)."""
    if name.lower().endswith((".gz", ".tgz")):
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


def _read(f: IO[bytes], n: int) -> bytes:
    """Exactly ``n`` bytes, or fewer only at the end of the stream (each read makes progress or ends)."""
    out = f.read(n)
    if len(out) == n or not out:
        return out
    parts = [out]
    got = len(out)
    while got < n:
        more = f.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _skip(f: IO[bytes], n: int) -> int:
    """Read and drop ``n`` bytes; how many there were."""
    got = 0
    while got < n:
        piece = f.read(min(_SKIP_PIECE, n - got))
        if not piece:
            break
        got += len(piece)
    return got


_USTAR = b"ustar\x0000"


def _header(buf: bytes, at: int = 0) -> tuple[str, int, bytes] | None:
    """Name, size and type of the plain ustar/GNU header at ``buf[at:at + 512]`` whose checksum holds, read
    directly (tarfile's parser costs ~100 us a header, more than a small sample's read); None: let
    :meth:`tarfile.TarInfo.frombuf` judge it (a base-256 size, a signed checksum, anything unusual)."""
    name, size_field, stored_field, kind, magic = _FIELDS.unpack_from(buf, at)
    if size_field[0] & 0x80:
        return None
    try:  # a field's number ends at its first NUL; int() takes the spaces around it (a blank field: tarfile's call)
        size = int(size_field.partition(b"\0")[0], 8)
        stored = int(stored_field.partition(b"\0")[0], 8)
    except ValueError:
        return None
    adler = zlib.adler32  # _checksum(buf, at), inline: a call less on every header
    if stored != (
        (adler(buf[at : at + 148]) & _ADLER_LOW)
        + (adler(buf[at + 156 : at + 256]) & _ADLER_LOW)
        + (adler(buf[at + 256 : at + 512]) & _ADLER_LOW)
        + 253
    ):
        return None
    name = name.split(b"\0", 1)[0]
    if magic == _USTAR and buf[at + 345] != 0:
        name = buf[at + 345 : at + 500].split(b"\0", 1)[0] + b"/" + name
    text = name.decode("utf-8", "surrogateescape")
    if kind == tarfile.AREGTYPE and text.endswith("/"):
        kind = tarfile.DIRTYPE
    return text, size, kind


#: a header's name, size, checksum, type and magic fields (at bytes 0, 124, 148, 156 and 257)
_FIELDS = struct.Struct("100s24x12s12x8s1s100x8s")
_ADLER_LOW = 0xFFFF


def _checksum(buf: bytes, at: int = 0) -> int:
    """The unsigned checksum of the header at ``buf[at:at + 512]``: the sum of its bytes with the checksum field
    (bytes 148-155) counted as 8 spaces. From zlib's Adler-32 of three pieces (bytes 0-147, 156-255, 256-511):
    its low 16 bits are 1 + the piece's byte sum modulo 65521, and no piece's sum (256 x 255 at most) reaches
    65521, so exact — in C, where ``sum(block)`` walks 512 Python ints."""
    adler = zlib.adler32
    return (
        (adler(buf[at : at + 148]) & _ADLER_LOW)
        + (adler(buf[at + 156 : at + 256]) & _ADLER_LOW)
        + (adler(buf[at + 256 : at + 512]) & _ADLER_LOW)
        + 253  # - 3 (the pieces' 1s) + 256 (8 spaces)
    )


def _pax(data: bytes, where: str) -> dict[str, str]:
    """The records of a PAX extended header (``"%d %s=%s\\n"``); TarError when they do not parse."""
    out: dict[str, str] = {}
    pos = 0
    end = len(data)
    while pos < end and data[pos] != 0:
        space = data.find(b" ", pos, pos + 21)
        digits = data[pos:space] if space > pos else b""
        if not digits.isdigit() or int(digits) <= space + 1 - pos:  # bytes.isdigit: ASCII digits only
            raise TarError(f"{where}: broken PAX record at byte {pos} of the extended header")
        length = int(digits)
        if pos + length > end:
            raise TarError(f"{where}: PAX record at byte {pos} runs past the extended header")
        record = data[space + 1 : pos + length - 1]
        key, sep, value = record.partition(b"=")
        if not sep:
            raise TarError(f"{where}: PAX record at byte {pos} has no '='")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length  # length > 0 checked: the loop advances
    return out


def iter_members(
    f: IO[bytes], max_sample: int = MAX_SAMPLE, wanted: Callable[[str], bool] | None = None
) -> Iterator[tuple[str, int, bytes | None, tuple[str, str] | None]]:
    """``(name, header offset, data or None, (reason, detail) or None)`` of each member of a tar stream.

    ``data`` is None when the member is not read (larger than ``max_sample``: too_large; a link or
    device member: broken_shard, skipped; a regular member ``wanted`` says no to: passed over, no reason).
    Raises :class:`TarError` where the stream stops being a tar (a broken header, no end-of-archive),
    :class:`CutMember` when it ends inside a member's data.

    A local file (or bytes in memory) is read :data:`READ_AHEAD` bytes at a time: headers are parsed where they
    lie in those bytes and small members sliced from them (one copy); a member larger than that is read on its
    own. Any other stream (gunzipped, an object in a bucket) is read exactly as far as the walk has got, so
    whatever breaks it (a damaged gzip stream, a failed read) stops the walk at the same member.
    """
    ahead = READ_AHEAD if isinstance(f, _PLAIN) else 0
    buf = b""  # the bytes read ahead; the walk is at buf[at]
    at = 0
    pos = 0  # the stream offset of the next header
    long_name: str | None = None
    pax: dict[str, str] | None = None
    known: dict[bytes, tuple[str, int, bytes]] = {}  # extended header blocks parsed already (same bytes, same parse)
    n = 0  # len(buf)
    while True:
        if at + BLOCK > n:
            buf, at = _ahead(f, buf, at, BLOCK, ahead), 0
            n = len(buf)
            if n < BLOCK:
                if not buf:
                    raise TarError(f"cut short at byte {pos}: no end-of-archive blocks")
                raise TarError(f"cut short at byte {pos}: a partial header block ({len(buf)} bytes)")
        if buf[at] == 0 and buf[at : at + BLOCK] == _ZERO:
            return  # the end (a second zero block, and the record's padding, are not needed to read it)
        if buf[at + 156] in _EXTENDED_TYPES:  # often the very block before each member (a PAX header for mtime)
            block = buf[at : at + BLOCK]
            fast = known.get(block)
            if fast is None:
                fast = _header(block)
                if fast is not None and len(known) < _KNOWN:
                    known[block] = fast
        else:
            fast = _header(buf, at)
        if fast is None:
            try:
                info = tarfile.TarInfo.frombuf(buf[at : at + BLOCK], "utf-8", "surrogateescape")
            except tarfile.HeaderError as exc:
                raise TarError(f"bad header at byte {pos}: {exc}") from None
            fast = (info.name, info.size, info.type)
        at += BLOCK
        header_name, size, kind = fast
        if pax and "size" in pax:
            if _DECIMAL.fullmatch(pax["size"]) is None:  # ASCII digits only: str.isdigit takes "²" and "١٢"
                raise TarError(f"header at byte {pos}: PAX size {pax['size'][:40]!r} is not a decimal number")
            size = int(pax["size"])
        if size < 0:
            raise TarError(f"member {header_name!r} at byte {pos} has a negative size ({size})")
        padded = size + (-size % BLOCK)
        here = pos
        pos += BLOCK + padded  # >= pos + BLOCK: every step moves forward
        if kind in _EXTENDED:
            if size > MAX_EXTENDED:
                raise TarError(f"extended header at byte {here} is {size:,} bytes (at most {MAX_EXTENDED:,})")
            if at + padded > n:
                buf, at = _ahead(f, buf, at, padded, ahead), 0
                n = len(buf)
                if padded > n:
                    raise TarError(f"cut short inside the extended header at byte {here}")
            data = buf[at : at + size]
            at += padded
            if kind == tarfile.GNUTYPE_LONGNAME:
                long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            else:
                pax = _pax(data, f"header at byte {here}")
            continue
        name = (pax.get("path") if pax else None) or long_name or header_name
        long_name, pax = None, None
        if kind not in _REGULAR or size > max_sample:
            if at + padded <= n:
                at += padded
            else:
                buf, at, got = _passed(f, buf, at, padded)
                n = len(buf)
                if got < padded:
                    raise TarError(f"cut short inside member {name!r} at byte {here}")
            if kind in _PASSED:
                continue
            if kind not in _REGULAR:
                why = f"not a regular file (tar type {kind!r}): readers skip or fail on it"
                yield name, here, None, (R.BROKEN_SHARD, why)
            else:
                yield (
                    name,
                    here,
                    None,
                    (R.TOO_LARGE, f"{size:,} bytes, more than the {max_sample:,} a sample is read for"),
                )
            continue
        read = wanted is None or wanted(name)
        if at + padded <= n:  # the member and its padding in the bytes read ahead
            data = buf[at : at + size] if read else None
            at += padded
            yield name, here, data, None
            continue
        if not read:
            data = None
            buf, at, got = _passed(f, buf, at, size)
        else:
            buf, at, data = _taken(f, buf, at, size, ahead)
            got = len(data)
        n = len(buf)
        if got < size:
            raise CutMember(
                f"member {name!r} at byte {here} is cut short: {got:,} of its {size:,} bytes before the end of the file",
                name,
            )
        pad = padded - size
        if at + pad <= n:
            at += pad
        else:
            buf, at, got = _passed(f, buf, at, pad)
            n = len(buf)
            if got < pad:
                raise TarError(f"cut short in the padding of member {name!r} at byte {here}")
        yield name, here, data, None


#: bytes read from a tar stream at once: headers, PAX records and small members come from one read (a couple
#: of reads a megabyte instead of four a member); a member larger than this is read on its own (memory bounded)
READ_AHEAD = 1 << 20


#: the streams read ahead (a gzip stream is a BufferedIOBase too, but not one of these)
_PLAIN = (io.BufferedReader, io.FileIO, io.BytesIO)


def _ahead(f: IO[bytes], buf: bytes, at: int, n: int, ahead: int) -> bytes:
    """The unread bytes ``buf[at:]`` and the next read of ``f``: at least ``n`` bytes (fewer only at its end), and
    up to ``ahead`` bytes."""
    head = buf[at:]
    more = _read(f, max(ahead, n - len(head)))
    return head + more if head else more


def _taken(f: IO[bytes], buf: bytes, at: int, n: int, ahead: int) -> tuple[bytes, int, bytes]:
    """The next ``n`` bytes (fewer only at the end of ``f``), the unread ``buf[at:]`` first: (buf, at, data)."""
    if at + n <= len(buf):
        return buf, at + n, buf[at : at + n]
    head = buf[at:]
    if n - len(head) >= ahead:  # a large member (or a stream not read ahead): read on its own, nothing kept
        data = _read(f, n - len(head))
        return b"", 0, head + data if head else data
    buf = _ahead(f, buf, at, n, ahead)
    return buf, min(n, len(buf)), buf[:n]


def _passed(f: IO[bytes], buf: bytes, at: int, n: int) -> tuple[bytes, int, int]:
    """The next ``n`` bytes passed over, the unread ``buf[at:]`` first: (buf, at, how many there were)."""
    left = len(buf) - at
    if n <= left:
        return buf, at + n, n
    return b"", 0, left + _skip(f, n - left)


_EXTENDED = (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.SOLARIS_XHDTYPE)
_EXTENDED_TYPES = b"".join(_EXTENDED)  # their type bytes (``int in bytes``)
#: extended header blocks a walk remembers parsed (a writer repeats one: the same record length, no other field)
_KNOWN = 64
_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_PASSED = (tarfile.XGLTYPE, tarfile.GNUTYPE_LONGLINK, tarfile.DIRTYPE)  # walked over without a word


#: samples in a row that go to one part of a shard checked in several parts (see :func:`read_shard`)
PART_RUN = 64


def part_filter(part: int, parts: int) -> Callable[[str], bool]:
    """Whether a member's data belongs to ``part`` of ``parts``: runs of :data:`PART_RUN` consecutive samples
    (keys as they change, header after header) dealt round-robin, so every member goes to exactly one part."""
    key: list = [None, -1]  # the last key, its sample's number

    def wanted(name: str) -> bool:
        k = base_plus_ext(name)[0]
        if k != key[0]:
            key[0], key[1] = k, key[1] + 1
        return (key[1] // PART_RUN) % parts == part

    return wanted


def read_shard(
    f: IO[bytes], shard: str, max_sample: int = MAX_SAMPLE, part: int = 0, parts: int = 1
) -> Iterator[Sample | Problem | ShardDone]:
    """Every media member of the tar shard ``f`` (named ``shard``) as a Sample, and what is wrong with it.

    ``parts > 1``: only the samples of ``part`` (:func:`part_filter`) are read and yielded; the problems of
    the shard's structure and its end come from part 0 only (every part walks every header)."""
    if parts > 1:
        for event in _read_shard(f, shard, max_sample, part_filter(part, parts)):
            if part == 0 or isinstance(event, Sample):
                yield event
        return
    yield from _read_shard(f, shard, max_sample, None)


def _read_shard(
    f: IO[bytes], shard: str, max_sample: int, wanted: Callable[[str], bool] | None
) -> Iterator[Sample | Problem | ShardDone]:
    current: str | None = None
    suffixes: set[str] = set()
    ended: set[str] = set()  # keys whose sample has ended (one shard's, at most MAX_KEYS)
    samples = 0
    stream = open_stream(f, shard)
    members = iter_members(stream, max_sample, wanted)
    while True:
        try:
            item = next(members, None)
        except CutMember as exc:
            cut_key = base_plus_ext(exc.name)[0]
            yield Problem(shard, cut_key, exc.name, None, R.TRUNCATED, str(exc), deny=cut_key is not None)
            break
        except TarError as exc:
            yield Problem(shard, current, None, None, R.BROKEN_SHARD, str(exc))
            break
        except ReadFailed as exc:  # an object in a bucket: 403, 404, still failing after retries
            yield Problem(shard, current, None, None, exc.reason, str(exc))
            break
        except (OSError, EOFError, zlib.error) as exc:  # gzip: a damaged or cut stream (BadGzipFile is an OSError)
            yield Problem(shard, current, None, None, R.BROKEN_SHARD, f"cannot decompress: {exc}")
            break
        if item is None:
            break
        name, offset, data, why = item
        key, suffix = base_plus_ext(name)
        if key is None or suffix is None:
            continue  # webdataset skips a member without an extension; so does the check
        suffix = suffix.lower()
        if key != current:
            if current is not None and len(ended) < MAX_KEYS:
                ended.add(current)
                if len(ended) == MAX_KEYS:
                    why = f"more than {MAX_KEYS:,} samples: split samples are not looked for past this one"
                    yield Problem(shard, current, name, None, R.BROKEN_SHARD, why)
            if key in ended:
                yield Problem(
                    shard,
                    key,
                    name,
                    None,
                    R.SPLIT_SAMPLE,
                    f"member {name} at byte {offset} is apart from the earlier members of its key: "
                    "webdataset reads two samples with this key",
                )
            else:
                samples += 1
            current, suffixes = key, set()
        if suffix in suffixes:
            yield Problem(
                shard,
                key,
                name,
                None,
                R.DUPLICATE_KEY,
                f"member {name} at byte {offset} appears twice in one sample: webdataset raises ValueError "
                "(duplicate file name in tar file)",
            )
        suffixes.add(suffix)
        if why is not None:
            yield Problem(shard, key, name, None, why[0], why[1])
            continue
        if data is not None and EXT_TO_FORMAT.get("." + suffix.rpartition(".")[2]):  # format_of_name(name)
            yield Sample(shard, key, name, None, data, f"{shard}/{name}")
    yield ShardDone(shard, samples)
