"""AAC audio: the MPEG-4 audio file (``.m4a``, ISOBMFF) and the raw ADTS stream (``.aac``).

M4A: every top-level box whole (the box walk of :mod:`.isobmff`), ``ftyp`` first, a ``moov`` (the
index) and an ``mdat`` (the samples); in every track's sample table (``moov/trak/mdia/minf/stbl``)
each chunk (``stco``/``co64`` offset, its bytes from ``stsc`` samples-per-chunk and ``stsz`` sizes)
lies inside the file and inside an ``mdat``, and ``stsc``, ``stsz`` and ``stts`` count the same samples. A file fragmented for streaming (``mvex`` in ``moov``)
keeps its samples in ``moof``/``mdat`` pairs: their boxes are walked, its empty sample table is not.

ADTS: every frame starts with the 12-bit sync word and layer 0, its 13-bit frame length at least its
header, each frame's length leading to the next frame's sync and the last one ending at the end of
the file (ID3 tags around the stream are skipped). A frame with ``protection_absent = 0`` carries a
CRC-16 over its header and parts of each channel element (ISO/IEC 14496-3 1.A.3.2.1): its header is
read past (9 bytes, not 7); the CRC itself is not verified here (the protected bits depend on the
element syntax), the decode judges those frames.

Then a real decode through PyAV (FFmpeg's AAC decoder, the extra ``dsclean[av]``), every packet: an
error is ``corrupt``. Without PyAV a file whose container is whole is ``warn``/``unsupported`` naming
the extra — never ``ok`` unchecked, never ``bad`` for a missing decoder. Each loop over the structure
consumes bytes; every count is held against its box's size before it sizes an array.
"""

from __future__ import annotations

import io
import struct
import sys

import numpy as np

from ... import reasons as R
from ...quality.audio import AudioStats
from .. import facts as facts_of
from .. import importguard
from ..verdict import Finding, Verdict, bad
from . import id3, isobmff

#: the boxes on the path from ``moov`` to a sample table
_CONTAINERS = (b"trak", b"mdia", b"minf", b"stbl")
#: what to install for the decode
INSTALL = "pip install 'dsclean[av]'"


# --------------------------------------------------------------------------- M4A (ISOBMFF)


def walk_m4a(buf) -> list[Finding]:
    """M4A container rules: boxes whole, ``ftyp`` first, ``moov`` and ``mdat`` present, every chunk of
    every sample table inside the file and inside an ``mdat``."""
    out = isobmff.Walk()
    top = isobmff.boxes(buf, 0, len(buf), "M4A", out)
    if out.findings:
        return out.findings
    if not top or top[0].type != b"ftyp":
        return [bad(R.CORRUPT, "M4A: the first box is not 'ftyp'")]
    moov = next((b for b in top if b.type == b"moov"), None)
    mdats = [b for b in top if b.type == b"mdat"]
    if moov is None:
        return [bad(R.TRUNCATED, "M4A: no 'moov' box (the sample index): the file was cut before it was written")]
    if not mdats:
        return [bad(R.CORRUPT, "M4A: no 'mdat' box: the file holds no samples")]
    inner = isobmff.boxes(buf, moov.body, moov.end, "'moov' box", out)
    if out.findings:
        return out.findings
    if any(b.type == b"mvex" for b in inner):
        return []  # fragmented: samples in moof/mdat pairs, the top-level walk above checked them whole
    tables = 0
    for trak in (b for b in inner if b.type == b"trak"):
        stbl = _descend(buf, trak, _CONTAINERS[1:], out)
        if out.findings:
            return out.findings
        if stbl is None:
            continue
        tables += 1
        finding = _chunks(buf, stbl, mdats, out)
        if finding is not None or out.findings:
            return out.findings + ([finding] if finding else [])
    if not tables:
        return [bad(R.CORRUPT, "M4A: no track in 'moov' has a sample table ('stbl')")]
    return []


def _descend(buf, box: isobmff.Box, path: tuple[bytes, ...], out: isobmff.Walk) -> isobmff.Box | None:
    """The box at ``path`` below ``box`` (each step the first child of that type), or None."""
    for kind in path:
        children = isobmff.boxes(buf, box.body, box.end, f"{isobmff._name(box.type)} box", out)
        found = next((b for b in children if b.type == kind), None)
        if out.findings or found is None:
            return None
        box = found
    return box


def _chunks(buf, stbl: isobmff.Box, mdats: list[isobmff.Box], out: isobmff.Walk) -> Finding | None:
    """Every chunk of the sample table: offset + bytes (its samples' sizes) inside the file and an ``mdat``."""
    kids = {b.type: b for b in isobmff.boxes(buf, stbl.body, stbl.end, "'stbl' box", out)}
    if out.findings:
        return None
    offsets_box = kids.get(b"stco") or kids.get(b"co64")
    if offsets_box is None or b"stsz" not in kids or b"stsc" not in kids:
        missing = [n for n in ("stco", "stsz", "stsc") if not (kids.get(n.encode()) or n == "stco" and b"co64" in kids)]
        return bad(R.CORRUPT, f"M4A sample table: no {'/'.join(missing)} box: the samples cannot be located")
    wide = offsets_box.type == b"co64"
    offsets = _table(buf, offsets_box, ">u8" if wide else ">u4", 1)
    runs = _table(buf, kids[b"stsc"], ">u4", 3)
    stsz = _sizes(buf, kids[b"stsz"])
    for name, table in (("stco/co64", offsets), ("stsc", runs), ("stsz", stsz)):
        if isinstance(table, str):
            return bad(R.CORRUPT, f"M4A sample table: '{name}' {table}")
    assert not isinstance(offsets, str) and not isinstance(runs, str) and not isinstance(stsz, str)
    samples, sizes = stsz
    offsets = offsets.reshape(-1).astype(np.int64)
    per_chunk = _samples_per_chunk(runs, len(offsets))
    if isinstance(per_chunk, str):
        return bad(R.CORRUPT, f"M4A sample table: 'stsc' {per_chunk}")
    if int(per_chunk.sum()) != samples:
        return bad(
            R.CORRUPT,
            f"M4A sample table: 'stsc' puts {int(per_chunk.sum())} samples in {len(offsets)} chunks, "
            f"'stsz' sizes {samples}",
        )
    if b"stts" in kids:  # the decoding times: one per sample
        times = _table(buf, kids[b"stts"], ">u4", 2)
        if isinstance(times, str):
            return bad(R.CORRUPT, f"M4A sample table: 'stts' {times}")
        timed = int(times[:, 0].sum(dtype=np.int64))
        if timed != samples:
            return bad(R.CORRUPT, f"M4A sample table: 'stts' times {timed} samples, 'stsz' sizes {samples}")
    if not len(offsets):
        return None
    if isinstance(sizes, int):  # one size for every sample (PCM has a sample per frame: never materialised)
        if samples * sizes > len(buf):
            return bad(
                R.TRUNCATED,
                f"M4A sample table: 'stsz' says {samples} samples of {sizes} bytes, more than the file holds "
                f"({len(buf)} bytes)",
            )
        chunk_bytes = per_chunk * sizes
    else:
        cum = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))  # bytes before each sample
        first = np.concatenate(([0], np.cumsum(per_chunk)))  # index of each chunk's first sample
        chunk_bytes = cum[first[1:]] - cum[first[:-1]]
    chunk_ends = offsets + chunk_bytes
    size = len(buf)
    past = np.flatnonzero(chunk_ends > size)
    if len(past):
        k = int(past[0])
        return bad(
            R.TRUNCATED,
            f"M4A sample table: chunk {k} at bytes {int(offsets[k])}..{int(chunk_ends[k])} lies past the end of "
            f"the file ({size} bytes; 'stco' offset + 'stsz' sizes)",
        )
    inside = np.zeros(len(offsets), dtype=bool)
    for m in mdats:
        inside |= (offsets >= m.body) & (chunk_ends <= m.end)
    outside = np.flatnonzero(~inside & (chunk_bytes > 0))
    if len(outside):
        k = int(outside[0])
        return bad(
            R.CORRUPT,
            f"M4A sample table: chunk {k} at bytes {int(offsets[k])}..{int(chunk_ends[k])} is not inside an "
            "'mdat' box ('stco' offset + 'stsz' sizes)",
        )
    return None


def _table(buf, box: isobmff.Box, dtype: str, fields: int) -> np.ndarray | str:
    """A FullBox's ``entry_count`` entries of ``fields`` values each, or why they cannot be read."""
    if box.end - box.body < 8:
        return "is shorter than its header"
    (count,) = struct.unpack_from(">I", buf, box.body + 4)
    width = np.dtype(dtype).itemsize * fields
    if count * width > box.end - box.body - 8:  # checked before it sizes an array
        return f"declares {count} entries, its box holds {(box.end - box.body - 8) // width}"
    return np.frombuffer(buf, dtype=dtype, count=count * fields, offset=box.body + 8).reshape(count, fields)


def _sizes(buf, box: isobmff.Box) -> tuple[int, int | np.ndarray] | str:
    """``stsz``: (sample count, the one size of every sample or a table of sizes), or why it cannot be read."""
    if box.end - box.body < 12:
        return "is shorter than its header"
    uniform, count = struct.unpack_from(">II", buf, box.body + 4)
    if uniform:
        return count, uniform
    if count * 4 > box.end - box.body - 12:  # checked before it sizes an array
        return f"declares {count} sizes, its box holds {(box.end - box.body - 12) // 4}"
    return count, np.frombuffer(buf, dtype=">u4", count=count, offset=box.body + 12).astype(np.int64)


def _samples_per_chunk(runs: np.ndarray, chunks: int) -> np.ndarray | str:
    """Samples in each chunk from ``stsc``'s runs (first chunk, samples per chunk, description index)."""
    firsts = runs[:, 0].astype(np.int64)
    if len(firsts) and (firsts[0] != 1 or np.any(np.diff(firsts) <= 0) or firsts[-1] > max(chunks, 1)):
        return f"runs start at chunks {firsts[:4].tolist()}...: not 1, increasing, within the {chunks} chunks"
    if not len(firsts):
        return np.zeros(chunks, dtype=np.int64) if not chunks else "has no run for the chunks 'stco' lists"
    lengths = np.diff(np.append(firsts, chunks + 1))
    return np.repeat(runs[:, 1].astype(np.int64), lengths)


# --------------------------------------------------------------------------- ADTS


def walk_adts(buf) -> tuple[list[Finding], int]:
    """ADTS frame chain: (findings, frames). Sync word and layer, frame length, the chain to the end."""
    start = id3.id3v2_end(buf, 0) or 0
    if start > len(buf):
        return [bad(R.TRUNCATED, f"ADTS: the ID3v2 tag runs to byte {start}, past the end ({len(buf)} bytes)")], 0
    end = id3.trailing_tags_start(buf, start)
    pos, frames = start, 0
    while pos < end:
        if end - pos < 7:
            return [bad(R.TRUNCATED, f"ADTS frame {frames} at byte {pos}: the file ends inside its header")], frames
        b0, b1, b2, b3, b4, b5 = struct.unpack_from("6B", buf, pos)
        if b0 != 0xFF or (b1 & 0xF6) != 0xF0:
            return [
                bad(R.CORRUPT, f"ADTS frame {frames} at byte {pos}: no sync word (0xFFF, layer 0): the chain is broken")
            ], frames
        header = 7 if b1 & 1 else 9  # protection_absent = 0: a CRC-16 follows the header
        length = (b3 & 3) << 11 | b4 << 3 | b5 >> 5
        if (b2 >> 2) & 15 > 12:
            return [
                bad(R.CORRUPT, f"ADTS frame {frames} at byte {pos}: sampling frequency index {(b2 >> 2) & 15}")
            ], frames
        if length < header:
            return [
                bad(R.CORRUPT, f"ADTS frame {frames} at byte {pos}: frame length {length}, shorter than its header")
            ], frames
        if pos + length > end:
            return [
                bad(
                    R.TRUNCATED,
                    f"ADTS frame {frames} at byte {pos}: frame length {length}, {end - pos} bytes left (the file was cut)",
                )
            ], frames
        pos, frames = pos + length, frames + 1
    if not frames:
        return [bad(R.EMPTY, "ADTS: no frame")], 0
    return [], frames


# --------------------------------------------------------------------------- decode and checkers


def _decode(data, v: Verdict, facts: bool) -> Finding | None:
    """Decode every packet of the first audio stream through PyAV; fill the audio facts. A finding when
    the decode fails (``corrupt``), finds nothing (``empty``) or PyAV is missing (``unsupported``, warn)."""
    try:
        if "av" in sys.modules:
            import av
        else:
            with importguard.guarded():  # a library loading is not the file's doing: outside its ceiling
                import av
    except ImportError:
        return Finding(
            R.WARN,
            R.UNSUPPORTED,
            f"the container is whole, the audio was not decoded: PyAV is not installed; install it with {INSTALL}",
        )
    frames, stats = 0, None
    try:
        with av.open(io.BytesIO(bytes(data)), "r") as container:
            if not container.streams.audio:
                return bad(R.CORRUPT, "no audio stream FFmpeg finds")
            stream = container.streams.audio[0]
            ctx = stream.codec_context
            for packet in container.demux(stream):
                for frame in stream.decode(packet):
                    frames += frame.samples
                    if facts:
                        block = frame.to_ndarray()
                        block = block.reshape(-1, ctx.channels) if not frame.format.is_planar else block.T
                        stats = stats or AudioStats(block.shape[1], ctx.sample_rate, None)
                        stats.add(block)
            v.sample_rate, v.channels, v.subtype = ctx.sample_rate, ctx.channels, ctx.name.upper()
    except MemoryError:
        raise
    except Exception as exc:  # FFmpeg's own words on the stream: the decode error is the finding
        return bad(R.CORRUPT, f"decoder error after {frames} frames (PyAV/FFmpeg): {type(exc).__name__}: {exc}")
    v.frames = frames
    v.duration = frames / v.sample_rate if v.sample_rate else None
    if not frames:
        return bad(R.EMPTY, "no audio frames")
    if stats is not None:
        facts_of.from_audio(v, stats)
    return None


def check_m4a(data, v: Verdict, opts) -> None:
    """M4A: the box walk and every chunk of the sample table inside the file, then PyAV decodes every packet."""
    v.add(walk_m4a(data))
    if v.status != R.BAD:
        _finish(data, v, opts)


def check_aac(data, v: Verdict, opts) -> None:
    """ADTS AAC: the frame chain (sync, lengths to the end), then PyAV decodes every frame."""
    findings, _frames = walk_adts(data)
    v.add(findings)
    if v.status != R.BAD:
        _finish(data, v, opts)


def _finish(data, v: Verdict, opts) -> None:
    finding = _decode(data, v, opts.facts)
    if finding is not None:
        v.add([finding])


CHECKERS = {"m4a": check_m4a, "aac": check_aac}
