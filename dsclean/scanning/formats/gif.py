"""GIF structure: the block walk from the screen descriptor to the trailer (GIF89a spec).

Pillow decodes a GIF cut between two frames without complaint, and a byte-level
"does it end with 0x3B" test calls a GIF with anything after its trailer truncated.
Walking the blocks (extensions and images, each a chain of length-prefixed
sub-blocks) finds where the GIF really ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import reasons as R
from ..verdict import Finding, bad, warn


@dataclass
class Walk:
    frames: int = 0  # image descriptors seen
    trailer: int | None = None  # offset of the trailer byte
    findings: list[Finding] = field(default_factory=list)


def walk(data) -> Walk:
    """Follow every block; note a cut (truncated), an unknown block, the bytes after the trailer."""
    out, n = Walk(), len(data)
    if n < 13:
        out.findings.append(bad(R.TRUNCATED, f"GIF ends at byte {n} inside its 13-byte header"))
        return out
    pos = 13 + _colour_table(data[10])
    while pos < n:
        block = data[pos]
        if block == 0x3B:
            out.trailer = pos
            return out
        if block == 0x21:  # extension: label, then sub-blocks
            end = _sub_blocks(data, pos + 2)
            what = f"extension 0x{data[pos + 1]:02x}" if pos + 1 < n else "an extension"
        elif block == 0x2C:  # image: descriptor, local colour table, LZW code size, sub-blocks
            if pos + 10 > n:
                end = None
            else:
                end = _sub_blocks(data, pos + 10 + _colour_table(data[pos + 9]) + 1)
            what = f"frame {out.frames}"
            out.frames += 1
        elif out.frames:
            out.findings.append(
                warn(
                    R.NONCONFORMING,
                    f"GIF has an unknown block 0x{block:02x} at byte {pos} after frame "
                    f"{out.frames - 1}, not the trailer: decoders stop there",
                )
            )
            return out
        else:
            out.findings.append(
                bad(R.CORRUPT, f"GIF has an unknown block 0x{block:02x} at byte {pos} before any frame")
            )
            return out
        if end is None:
            out.findings.append(bad(R.TRUNCATED, f"GIF ends at byte {n} inside {what} (started at byte {pos})"))
            return out
        pos = end
    out.findings.append(
        bad(R.TRUNCATED, f"GIF trailer (0x3B) missing: the file ends at byte {n} after {out.frames} frames")
    )
    return out


def _colour_table(packed: int) -> int:
    """Bytes of the colour table a descriptor's packed field announces."""
    return 3 << ((packed & 7) + 1) if packed & 0x80 else 0


def _sub_blocks(data, pos: int) -> int | None:
    """Offset after a chain of sub-blocks starting at ``pos`` (None if the file ends inside it)."""
    n = len(data)
    while pos < n:
        size = data[pos]
        if size == 0:
            return pos + 1
        pos += 1 + size
    return None
