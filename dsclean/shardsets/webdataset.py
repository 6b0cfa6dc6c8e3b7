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
import re
import tarfile
import zlib
from typing import IO, Callable, Iterator

from .. import reasons as R
from ..formats import format_of_name
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


def _header(block: bytes) -> tuple[str, int, bytes] | None:
    """Name, size and type of a plain ustar/GNU header whose checksum holds, read directly (tarfile's parser
    costs ~100 us a header, more than a small sample's read); None: let :meth:`tarfile.TarInfo.frombuf`
    judge it (a base-256 size, a signed checksum, anything unusual)."""
    size_field = block[124:136]
    if size_field[0] & 0x80:
        return None
    try:
        size = int(size_field.split(b"\0", 1)[0].strip() or b"0", 8)
        stored = int(block[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return None
    if stored != _byte_sum(block) - sum(block[148:156]) + 256:  # the checksum field counts as 8 spaces
        return None
    kind = block[156:157]
    name = block[:100].split(b"\0", 1)[0]
    if block[257:265] == _USTAR and block[345] != 0:
        name = block[345:500].split(b"\0", 1)[0] + b"/" + name
    text = name.decode("utf-8", "surrogateescape")
    if kind == tarfile.AREGTYPE and text.endswith("/"):
        kind = tarfile.DIRTYPE
    return text, size, kind


def _byte_sum(block: bytes) -> int:
    """The sum of a header block's 512 bytes (its checksum before the field's own bytes are taken out), from
    zlib's Adler-32 of each half: its low 16 bits are 1 + the half's byte sum modulo 65521, and a half's sum
    (256 x 255 at most) is below 65521, so exact — in C, where ``sum(block)`` walks 512 Python ints."""
    return (zlib.adler32(block[:256]) & 0xFFFF) + (zlib.adler32(block[256:]) & 0xFFFF) - 2


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
    device member: broken_shard, skipped; a regular member ``wanted`` says no to: passed over, no reason). Raises :class:`TarError` where the stream stops being a
    tar (a broken header, no end-of-archive), :class:`CutMember` when it ends inside a member's data.
    """
    pos = 0
    long_name: str | None = None
    pax: dict[str, str] = {}
    while True:
        block = _read(f, BLOCK)
        if not block:
            raise TarError(f"cut short at byte {pos}: no end-of-archive blocks")
        if len(block) < BLOCK:
            raise TarError(f"cut short at byte {pos}: a partial header block ({len(block)} bytes)")
        if block == _ZERO:
            return  # the end (a second zero block, and the record's padding, are not needed to read it)
        fast = _header(block)
        if fast is None:
            try:
                info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            except tarfile.HeaderError as exc:
                raise TarError(f"bad header at byte {pos}: {exc}") from None
            fast = (info.name, info.size, info.type)
        header_name, size, kind = fast
        if "size" in pax:
            if _DECIMAL.fullmatch(pax["size"]) is None:  # ASCII digits only: str.isdigit takes "²" and "١٢"
                raise TarError(f"header at byte {pos}: PAX size {pax['size'][:40]!r} is not a decimal number")
            size = int(pax["size"])
        if size < 0:
            raise TarError(f"member {header_name!r} at byte {pos} has a negative size ({size})")
        padded = size + (-size % BLOCK)
        here = pos
        pos += BLOCK + padded  # >= pos + BLOCK: every step moves forward
        if kind in (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.SOLARIS_XHDTYPE):
            if size > MAX_EXTENDED:
                raise TarError(f"extended header at byte {here} is {size:,} bytes (at most {MAX_EXTENDED:,})")
            data = _read(f, padded)
            if len(data) < padded:
                raise TarError(f"cut short inside the extended header at byte {here}")
            if kind == tarfile.GNUTYPE_LONGNAME:
                long_name = data[:size].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            else:
                pax = _pax(data[:size], f"header at byte {here}")
            continue
        name = pax.get("path") or long_name or header_name
        long_name, pax = None, {}
        if kind in (tarfile.XGLTYPE, tarfile.GNUTYPE_LONGLINK) or kind == tarfile.DIRTYPE:
            if _skip(f, padded) < padded:
                raise TarError(f"cut short inside member {name!r} at byte {here}")
            continue
        if kind not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
            got = _skip(f, padded)
            if got < padded:
                raise TarError(f"cut short inside member {name!r} at byte {here}")
            why = f"not a regular file (tar type {kind!r}): readers skip or fail on it"
            yield name, here, None, (R.BROKEN_SHARD, why)
            continue
        if size > max_sample:
            if _skip(f, padded) < padded:
                raise TarError(f"cut short inside member {name!r} at byte {here}")
            yield name, here, None, (R.TOO_LARGE, f"{size:,} bytes, more than the {max_sample:,} a sample is read for")
            continue
        if wanted is not None and not wanted(name):
            got = _skip(f, size)
            data = None
        else:
            data = _read(f, size)
            got = len(data)
        if got < size:
            raise CutMember(
                f"member {name!r} at byte {here} is cut short: {got:,} of its {size:,} bytes before the end of the file",
                name,
            )
        if _skip(f, padded - size) < padded - size:
            raise TarError(f"cut short in the padding of member {name!r} at byte {here}")
        yield name, here, data, None


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
        if data is not None and format_of_name(name):
            yield Sample(shard, key, name, None, data, f"{shard}/{name}")
    yield ShardDone(shard, samples)
