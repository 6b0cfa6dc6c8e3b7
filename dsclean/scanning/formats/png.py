"""PNG and APNG integrity rules, on the file's bytes: chunks, checksums, and the inflated image data.

The integrity of a PNG is in its structure, not its pixels (PNG spec, 3rd edition;
APNG's acTL/fcTL/fdAT chunks):

- every chunk: a sane length, a letters-only type, the bytes it declares, its CRC-32;
- chunk order: IHDR first, PLTE before the image data of a palette image, the IDAT
  chunks of one image consecutive, IEND last; an unknown *critical* chunk is refused;
- every image (the still image and each APNG frame): its zlib stream (header, deflate
  data, Adler-32) inflates to exactly the bytes its rows need (rows x (1 + stride) for
  each of the 7 Adam7 passes when interlaced), and each row starts with a filter type 0-4;
- APNG: one sequence number across fcTL/fdAT counting up from 0, frame regions inside
  the canvas, as many frames as acTL declares.

No pixel is unfiltered: that is the decoder's job, and it cannot fail on data that passes
these rules. Inflating uses ISA-L (``isal``), ~3x zlib's speed; the Adler-32 is computed
here on the raw deflate output, so a failing check value is reported as exactly that.
Deviations every decoder tolerates (data after the zlib stream, more rows than the image
needs, a stray IDAT after the image is complete) are warnings; see :data:`Finding`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from isal import isal_zlib

from ... import reasons as R
from ..verdict import Finding, bad, warn

SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: the critical chunks of the PNG specification; any other chunk whose name starts upper-case
#: is critical-but-unknown, which a decoder must refuse (APNG's acTL/fcTL/fdAT are ancillary)
CRITICAL = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND"})
#: bit depths allowed for each colour type, and its samples per pixel
COLOUR_TYPES = {0: ((1, 2, 4, 8, 16), 1), 2: ((8, 16), 3), 3: ((1, 2, 4, 8), 1), 4: ((8, 16), 2), 6: ((8, 16), 4)}
#: Adam7 passes: (x start, y start, x step, y step)
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))

_INPUT_PIECE = 1 << 16  # compressed bytes fed to the inflater at a time
_OUTPUT_CAP = 1 << 20  # inflated bytes handled at a time: memory stays bounded for any image size
_EXCESS_CAP = 64 << 20  # inflated bytes past what the rows need that are still inflated (to reach the Adler-32)
_FILTER_TYPES = bytes(range(5))


@dataclass
class Header:
    """IHDR."""

    width: int
    height: int
    bit_depth: int
    colour_type: int
    interlaced: bool

    @property
    def bits_per_pixel(self) -> int:
        return self.bit_depth * COLOUR_TYPES[self.colour_type][1]


@dataclass
class Image:
    """One image to inflate: the still image, or one APNG frame."""

    name: str  # how details call it: "PNG image data", "APNG frame 3"
    width: int
    height: int
    pieces: list[tuple[int, int]] = field(default_factory=list)  # (start, end) of its compressed bytes
    start: int = 0  # file offset of its first data chunk
    split_at: tuple[int, str] | None = None  # the first data chunk found after a gap: (offset, chunk before it)


@dataclass
class Layout:
    """What the chunk walk found."""

    findings: list[Finding] = field(default_factory=list)
    header: Header | None = None
    images: list[Image] = field(default_factory=list)
    #: (type, data offset, length) of the ancillary chunks after the first image data (Pillow reads
    #: them while loading: dsclean.scanning.check_image runs Pillow's own handlers on them)
    late_chunks: list[tuple[bytes, int, int]] = field(default_factory=list)
    trailing: int = 0  # bytes after IEND

    @property
    def failed(self) -> bool:
        return any(f.status == R.BAD for f in self.findings)


def read_chunks(data) -> Layout:
    """Walk every chunk: lengths, CRCs, order; collect the images' compressed data. Stops at the first
    bad finding (the rest of the file cannot be trusted to be where its lengths say)."""
    out = Layout()
    view = memoryview(data) if isinstance(data, bytes) else data
    n, pos = len(data), 8
    walk = _Walk(out)
    while True:
        if pos + 8 > n:
            out.findings.append(bad(R.TRUNCATED, f"PNG ends at byte {n} without an IEND chunk"))
            return out
        length, ctype = struct.unpack_from(">I4s", data, pos)
        name = ctype.decode("latin-1")
        if pos == 8 and ctype != b"IHDR":
            out.findings.append(bad(R.CORRUPT, f"PNG first chunk is {name!r}, not IHDR"))
            return out
        if length > 0x7FFFFFFF or not ctype.isalpha():
            out.findings.append(
                bad(R.CORRUPT, f"PNG chunk at byte {pos} is malformed (type {ctype!r}, length {length})")
            )
            return out
        if ctype[0] < 0x61 and ctype not in CRITICAL:  # upper-case first letter: critical
            out.findings.append(
                bad(R.UNSUPPORTED, f"PNG has a critical chunk {name!r} no PNG decoder knows (PNG spec: reject it)")
            )
            return out
        end = pos + 12 + length
        if end > n:
            out.findings.append(
                bad(R.TRUNCATED, f"PNG chunk {name} at byte {pos} needs {length} bytes; file ends at {n}")
            )
            return out
        (stored,) = struct.unpack_from(">I", data, end - 4)
        if isal_zlib.crc32(view[pos + 4 : end - 4]) != stored:
            out.findings.append(bad(R.CORRUPT, f"PNG chunk {name} at byte {pos} fails its CRC-32"))
            return out
        if ctype == b"IEND":
            walk.finish(pos)
            out.trailing = n - end
            return out
        walk.chunk(ctype, pos, length, data)
        if out.failed:
            return out
        pos = end


class _Walk:
    """The order rules, fed one chunk at a time (CRC already checked)."""

    def __init__(self, out: Layout) -> None:
        self.out = out
        self.palette = False  # PLTE seen
        self.prev = b""  # type of the previous chunk
        self.still: Image | None = None  # the image the IDAT chunks hold
        self.idat_done = False  # a chunk other than IDAT came after the IDATs
        self.frames_declared: int | None = None  # acTL num_frames (None: not an APNG)
        self.seq = 0  # next APNG sequence number
        self.frame: Image | None = None  # the APNG frame the next fdAT chunks belong to
        self.fctl_before_idat = False
        self.fctl_frames = 0

    def fail(self, reason: str, detail: str) -> None:
        self.out.findings.append(bad(reason, detail))

    def chunk(self, ctype: bytes, pos: int, length: int, data) -> None:
        body = pos + 8
        out = self.out
        if ctype == b"IHDR":
            if out.header is not None:
                return self.fail(R.CORRUPT, f"PNG has a second IHDR chunk at byte {pos}")
            self.ihdr(data, pos, length)
        elif ctype == b"PLTE":
            if length % 3 or not 0 < length <= 768:
                if out.header.colour_type == 3:
                    return self.fail(
                        R.CORRUPT, f"PNG palette (PLTE at byte {pos}) is {length} bytes, not 1-256 RGB entries"
                    )
                out.findings.append(
                    warn(
                        R.NONCONFORMING,
                        f"PNG PLTE chunk at byte {pos} is {length} bytes, not 1-256 RGB entries (decoders ignore it in a non-palette image)",
                    )
                )
            self.palette = True
        elif ctype == b"IDAT":
            self.idat(pos, length)
        elif ctype == b"acTL" and length >= 8:
            if self.still is not None:
                out.findings.append(
                    warn(
                        R.NONCONFORMING,
                        f"APNG acTL chunk at byte {pos} comes after the image data: decoders show the still image",
                    )
                )
            elif self.frames_declared is None:
                (frames,) = struct.unpack_from(">I", data, body)
                if 0 < frames <= 0x80000000:
                    self.frames_declared = frames
                else:
                    out.findings.append(
                        warn(R.NONCONFORMING, f"APNG acTL declares {frames} frames: decoders show the still image")
                    )
        elif ctype == b"fcTL" and self.frames_declared is not None:
            self.fctl(data, pos, length)
        elif ctype == b"fdAT" and self.frames_declared is not None:
            self.fdat(data, pos, length)
        if ctype != b"IDAT" and self.still is not None:
            if self.prev == b"IDAT":
                self.idat_done = True
            if ctype not in (b"fcTL", b"fdAT"):
                out.late_chunks.append((ctype, body, length))
        self.prev = ctype

    def ihdr(self, data, pos: int, length: int) -> None:
        if length != 13:
            return self.fail(R.CORRUPT, f"PNG IHDR chunk is {length} bytes, not 13")
        width, height, depth, colour, compression, filtering, interlace = struct.unpack_from(">IIBBBBB", data, pos + 8)
        allowed = COLOUR_TYPES.get(colour, ((), 0))[0]
        if depth not in allowed:
            return self.fail(
                R.CORRUPT, f"PNG IHDR: bit depth {depth} with colour type {colour} is not a PNG pixel format"
            )
        if compression or filtering or interlace > 1:
            return self.fail(
                R.CORRUPT,
                f"PNG IHDR: unknown compression method {compression}, filter method "
                f"{filtering} or interlace method {interlace} (all must be 0; interlace 0 or 1)",
            )
        if width > 0x7FFFFFFF or height > 0x7FFFFFFF:
            return self.fail(R.CORRUPT, f"PNG IHDR: {width}x{height} exceeds the 2^31-1 limit")
        self.out.header = Header(width, height, depth, colour, bool(interlace))

    def idat(self, pos: int, length: int) -> None:
        out = self.out
        if self.still is None:
            if out.header.colour_type == 3 and not self.palette:
                return self.fail(
                    R.CORRUPT, f"PNG palette image has no PLTE chunk before its image data (IDAT at byte {pos})"
                )
            h = out.header
            name = (
                "APNG frame 0"
                if self.fctl_before_idat
                else ("APNG default image" if self.frames_declared else "PNG image data")
            )
            self.still = Image(name, h.width, h.height, start=pos)
            out.images.insert(0, self.still)
            self.frame = None  # fdAT chunks after this belong to the next fcTL
        elif self.idat_done:
            if self.still.split_at is None:
                self.still.split_at = (pos, self.prev.decode("latin-1"))
            return  # not part of the image's data: see check_image_data
        self.still.pieces.append((pos + 8, pos + 8 + length))

    def fctl(self, data, pos: int, length: int) -> None:
        if length < 26:
            return self.fail(R.CORRUPT, f"APNG fcTL chunk at byte {pos} is {length} bytes, not 26")
        seq, width, height, x, y = struct.unpack_from(">IIIII", data, pos + 8)
        if not self.sequence(seq, pos, "fcTL"):
            return
        h, k = self.out.header, self.fctl_frames
        if (self.frame is not None and not self.frame.pieces) or (self.still is None and k):
            return self.fail(
                R.CORRUPT, f"APNG frame {k - 1} has no image data (the fcTL at byte {pos} follows its fcTL)"
            )
        if width == 0 or height == 0 or x + width > h.width or y + height > h.height:
            return self.fail(
                R.CORRUPT,
                f"APNG frame {k}: region {width}x{height} at ({x}, {y}) is not inside the {h.width}x{h.height} canvas",
            )
        self.fctl_frames += 1
        if self.still is None:  # the still image is the animation's first frame: it must fill the canvas
            if (width, height, x, y) != (h.width, h.height, 0, 0):
                return self.fail(
                    R.CORRUPT,
                    f"APNG frame {k}: the fcTL before the image data must cover the whole "
                    f"{h.width}x{h.height} image, not {width}x{height} at ({x}, {y})",
                )
            self.fctl_before_idat = True
            self.frame = None
            return
        self.frame = Image(f"APNG frame {k}", width, height, start=pos)
        self.out.images.append(self.frame)

    def fdat(self, data, pos: int, length: int) -> None:
        if length < 4:
            return self.fail(R.CORRUPT, f"APNG fdAT chunk at byte {pos} is {length} bytes: no sequence number")
        (seq,) = struct.unpack_from(">I", data, pos + 8)
        if not self.sequence(seq, pos, "fdAT"):
            return
        if self.frame is None:
            return self.fail(
                R.CORRUPT, f"APNG fdAT chunk at byte {pos} belongs to no frame (no fcTL after the image data before it)"
            )
        self.frame.pieces.append((pos + 12, pos + 8 + length))

    def sequence(self, seq: int, pos: int, name: str) -> bool:
        if seq != self.seq:
            self.fail(
                R.CORRUPT,
                f"APNG {name} at byte {pos} has sequence number {seq}, expected {self.seq} (frames lost or reordered)",
            )
            return False
        self.seq += 1
        return True

    def finish(self, pos: int) -> None:
        """At IEND: image data present, the last frame has data, as many frames as acTL declares."""
        out = self.out
        if out.header is None:
            return self.fail(R.CORRUPT, "PNG has no IHDR chunk")  # unreachable: IHDR is checked first
        if self.still is None:
            return self.fail(R.CORRUPT, f"PNG has no image data (no IDAT chunk before IEND at byte {pos})")
        if self.frames_declared is None:
            return
        if self.frame is not None and not self.frame.pieces:
            return self.fail(
                R.CORRUPT, f"APNG frame {self.fctl_frames - 1} has no image data (IEND at byte {pos} follows its fcTL)"
            )
        if self.fctl_frames < self.frames_declared:
            self.fail(R.CORRUPT, f"APNG acTL declares {self.frames_declared} frames; the file holds {self.fctl_frames}")
        elif self.fctl_frames > self.frames_declared:
            out.findings.append(
                warn(
                    R.NONCONFORMING,
                    f"APNG acTL declares {self.frames_declared} frames; the file holds "
                    f"{self.fctl_frames} (decoders show the first {self.frames_declared})",
                )
            )


# --------------------------------------------------------------------------- image data


def row_layout(header: Header, width: int, height: int) -> list[tuple[int, int, int]]:
    """(start, end, row length) in the inflated data of each non-empty pass: rows x (1 + stride)."""
    passes = ADAM7 if header.interlaced else ((0, 0, 1, 1),)
    out, pos = [], 0
    for x0, y0, dx, dy in passes:
        w, h = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if w <= 0 or h <= 0:
            continue
        row = 1 + (w * header.bits_per_pixel + 7) // 8
        out.append((pos, pos + h * row, row))
        pos += h * row
    return out


def check_image_data(data, layout: Layout, max_frames: int) -> list[Finding]:
    """Inflate every image (up to ``max_frames`` of them) and check its length, filter bytes and Adler-32."""
    found: list[Finding] = []
    view = memoryview(data) if isinstance(data, bytes) else data
    for image in layout.images[:max_frames]:
        found += _check_image(view, layout.header, image)
        if any(f.status == R.BAD for f in found):
            break
    return found


def _check_image(view, header: Header, image: Image) -> list[Finding]:
    name, rows = image.name, row_layout(header, image.width, image.height)
    need = rows[-1][1] if rows else 0
    compressed = _Pieces(view, image.pieces)
    zhead = compressed.take(2)
    if len(zhead) < 2:
        return [
            bad(
                R.TRUNCATED,
                f"{name}: {len(zhead)} bytes of zlib data, no room for its header (IDAT at byte {image.start})",
            )
        ]
    cmf, flg = zhead[0], zhead[1]
    if cmf & 15 != 8 or cmf >> 4 > 7 or (cmf << 8 | flg) % 31 or flg & 0x20:
        return [
            bad(
                R.CORRUPT,
                f"{name}: zlib header {bytes(zhead).hex()} is invalid (deflate, window <= 32 KiB, "
                f"check bits, no preset dictionary)",
            )
        ]
    inflater = isal_zlib.decompressobj(wbits=-15)
    adler, got = 1, 0  # Adler-32 so far, bytes inflated
    try:
        for piece in compressed:
            while True:
                out = inflater.decompress(piece, _OUTPUT_CAP)
                if out:
                    if got < need:
                        problem = _bad_filter_byte(out, got, rows)
                        if problem:
                            return [bad(R.CORRUPT, f"{name}: {problem}")]
                    adler = isal_zlib.adler32(out, adler)
                    got += len(out)
                    if got > need + _EXCESS_CAP:
                        return [
                            warn(
                                R.NONCONFORMING,
                                f"{name}: inflates to more than {got:,} bytes, its rows need {need:,} "
                                "(decoders ignore the rest; Adler-32 not checked)",
                            )
                        ]
                if inflater.eof:
                    break
                piece = inflater.unconsumed_tail
                if not piece and len(out) < _OUTPUT_CAP:
                    break  # needs more input
            if inflater.eof:
                break
    except isal_zlib.error as exc:
        return [bad(R.CORRUPT, f"{name}: deflate data invalid after {got:,} inflated bytes ({exc})")]
    found: list[Finding] = []
    if got < need:
        detail = (
            f"{name}: image data inflates to {got:,} of the {need:,} bytes its rows need ({_rows_text(header, image)})"
        )
        if not inflater.eof and image.split_at is not None:
            at, before = image.split_at
            return [
                bad(
                    R.CORRUPT,
                    f"{detail}; its IDAT chunks are not consecutive: more at byte {at}, after a {before} chunk",
                )
            ]
        return [bad(R.TRUNCATED, detail + ("" if inflater.eof else ": the zlib stream stops without its end"))]
    if not inflater.eof:
        return [
            warn(
                R.NONCONFORMING,
                f"{name}: zlib stream has no end (all rows present, its Adler-32 check value is missing)",
            )
        ]
    tail = inflater.unused_data + compressed.rest()
    if len(tail) < 4:
        return [
            warn(
                R.NONCONFORMING, f"{name}: zlib stream ends without its 4-byte Adler-32 check value (all rows present)"
            )
        ]
    if int.from_bytes(tail[:4], "big") != adler:
        return [bad(R.CORRUPT, f"{name}: zlib data check failed (Adler-32)")]
    if got > need:
        found.append(
            warn(
                R.NONCONFORMING,
                f"{name}: image data inflates to {got:,} bytes, {got - need:,} more than its rows need (decoders ignore them)",
            )
        )
    if len(tail) > 4:
        found.append(
            warn(
                R.NONCONFORMING,
                f"{name}: {len(tail) - 4:,} bytes after the end of its zlib stream (decoders ignore them)",
            )
        )
    if image.split_at is not None:
        at, before = image.split_at
        found.append(
            warn(
                R.NONCONFORMING,
                f"{name}: an IDAT chunk at byte {at} comes after a {before} chunk, "
                "after the image data ended (decoders ignore it)",
            )
        )
    return found


def _rows_text(header: Header, image: Image) -> str:
    kind = "Adam7-interlaced " if header.interlaced else ""
    return f"{kind}{image.width}x{image.height}, {header.bits_per_pixel} bits per pixel"


def _bad_filter_byte(out: bytes, offset: int, rows: list[tuple[int, int, int]]) -> str | None:
    """The first row starting inside ``out`` (which begins at ``offset`` of the inflated data) whose
    filter type is not 0-4, as a message; None if all are valid. Slices at C speed, no per-row Python."""
    end = offset + len(out)
    for number, (start, stop, row) in enumerate(rows):
        lo, hi = max(start, offset), min(stop, end)
        if lo >= hi:
            continue
        first = start + -(-(lo - start) // row) * row  # the first row start at or after lo
        types = out[first - offset : hi - offset : row]
        if types.translate(None, _FILTER_TYPES):
            i = next(i for i, t in enumerate(types) if t > 4)
            where = f"pass {number + 1}, " if len(rows) > 1 else ""
            return f"row {(first - start) // row + i} ({where}inflated byte {first + i * row:,}) has filter type {types[i]}, not 0-4"
    return None


class _Pieces:
    """An image's compressed bytes across its chunks, handed out in pieces of at most _INPUT_PIECE."""

    def __init__(self, view, spans: list[tuple[int, int]]) -> None:
        self.view = view
        self.spans = [(a, b) for a, b in spans if b > a]
        self.i = 0  # current span
        self.pos = self.spans[0][0] if self.spans else 0

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer at the end)."""
        got = b""
        while len(got) < n and self.i < len(self.spans):
            end = self.spans[self.i][1]
            part = bytes(self.view[self.pos : min(end, self.pos + n - len(got))])
            got += part
            self._advance(len(part))
        return got

    def _advance(self, k: int) -> None:
        self.pos += k
        if self.pos >= self.spans[self.i][1]:
            self.i += 1
            if self.i < len(self.spans):
                self.pos = self.spans[self.i][0]

    def __iter__(self):
        while self.i < len(self.spans):
            end = self.spans[self.i][1]
            piece = self.view[self.pos : min(end, self.pos + _INPUT_PIECE)]
            self._advance(len(piece))
            yield piece

    def rest(self) -> bytes:
        """Everything not handed out yet."""
        return b"".join(bytes(p) for p in self)
