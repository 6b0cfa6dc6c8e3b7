"""PNG and APNG rules (issue 11): every checksum in every frame, the structural rules, what decoders tolerate.

Each damaged file is built so that only the rule under test can catch it (chunk CRCs
recomputed, so the chunk walk passes); where Pillow's load() accepts the damage, the
test asserts that too, proving the rule is what catches it. No pixel is unfiltered by
the check: the last test shows it still flags whatever Pillow's full decode refuses.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image
from support import synth

from dsclean.reasons import CONSISTENCY
from dsclean.scanning.check import check_bytes
from dsclean.scanning.formats import png


def pillow_loads_all(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data)) as im:
            for i in range(getattr(im, "n_frames", 1)):
                im.seek(i)
                im.load()
        return True
    except Exception:
        return False


def verdict(data: bytes, name: str = "x.png", **kw):
    from dsclean.scanning.check import CheckOptions

    v = check_bytes(data, name, CheckOptions(**kw))
    return v.status, v.reason, v.detail


def replace_idat_stream(data: bytes, stream: bytes) -> bytes:
    """The same PNG with its image data replaced by ``stream`` in one IDAT (CRC recomputed)."""
    chunks = [(t, p) for t, p in synth.png_chunks(data) if t != b"IDAT"]
    at = next(i for i, (t, _) in enumerate(chunks) if t == b"IEND")
    return synth.png_build(chunks[:at] + [(b"IDAT", stream)] + chunks[at:])


def idat_stream(data: bytes) -> bytes:
    return b"".join(p for t, p in synth.png_chunks(data) if t == b"IDAT")


# ---- valid variants pass -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["1", "L", "LA", "RGB", "RGBA", "P", "I;16"])
def test_valid_pngs_of_every_kind_pass(mode):
    img = synth.photo_like(37, 23).convert(mode)  # odd sizes: partial bytes in a row
    data = synth.encode_image(img, "PNG")
    status, reason, detail = verdict(data)
    assert (status, reason) == ("ok", None) or (status == "warn" and reason in CONSISTENCY), detail
    with Image.open(io.BytesIO(data)) as im:  # the facts are Pillow's, no pixel decoded
        v = check_bytes(data, "x.png")
        assert (v.mode, v.width, v.height, v.frames) == (im.mode, 37, 23, 1)


@pytest.mark.parametrize("width, height", [(1, 1), (1, 9), (9, 1), (3, 5), (8, 8), (17, 2), (37, 23)])
@pytest.mark.parametrize("bit_depth, colour_type", [(8, 2), (1, 0), (4, 0), (16, 6)])
def test_adam7_interlaced_pngs_pass(width, height, bit_depth, colour_type):
    """rows x (1 + stride) summed over the non-empty Adam7 passes, for whole and partial bytes per row;
    Pillow decodes each file, so the synthetic interlacing is right."""
    data = synth.png_interlaced(width, height, bit_depth=bit_depth, colour_type=colour_type)
    assert pillow_loads_all(data)
    layout = png.read_chunks(data)
    assert layout.header.interlaced
    assert png.row_layout(layout.header, width, height)[-1][1] == len(zlib.decompress(idat_stream(data)))
    assert verdict(data)[:2] in {("ok", None), ("warn", "high_bit_depth")}  # 16-bit: issue 27's warning


def test_valid_apng_passes_and_counts_frames():
    for default_image in (False, True):
        data = synth.apng(frames=4, default_image=default_image)
        v = check_bytes(data, "a.png")
        assert (v.status, v.frames) == ("ok", 4 + default_image), v.detail


# ---- principle 3: every checksum -------------------------------------------------------------


def test_adler32_failure_is_caught_though_pillow_loads_it():
    data = synth.png(32, 32)
    stream = idat_stream(data)
    chunks = [c for c in synth.png_chunks(data) if c[0] != b"IDAT"]
    wrong = struct.pack(">I", zlib.adler32(b"other") & 0xFFFFFFFF)
    # the check value in an IDAT of its own, as libpng-style writers often leave it
    broken = synth.png_build(chunks[:-1] + [(b"IDAT", stream[:-4]), (b"IDAT", wrong)] + chunks[-1:])
    assert pillow_loads_all(broken)  # Pillow stops reading once the last row is inflated: it never sees it
    assert verdict(broken) == ("bad", "corrupt", "PNG image data: zlib data check failed (Adler-32)")


def test_adler32_failure_in_one_apng_frame_names_the_frame():
    data = synth.apng(frames=4)
    chunks = synth.png_chunks(data)
    fdats = [i for i, (t, _) in enumerate(chunks) if t == b"fdAT"]
    i = fdats[1]  # frame 2's data (frame 0 is the IDAT image)
    payload = chunks[i][1]
    chunks[i] = (b"fdAT", payload[:-4] + bytes(4))
    broken = synth.png_build(chunks)
    status, reason, detail = verdict(broken)
    assert (status, reason) == ("bad", "corrupt")
    assert detail == "APNG frame 2: zlib data check failed (Adler-32)"


def test_chunk_crc_is_named():
    status, reason, detail = verdict(synth.png_break_crc(synth.png()))
    assert (status, reason) == ("bad", "corrupt") and "IDAT" in detail and "CRC-32" in detail


# ---- principle 5: structure -------------------------------------------------------------------


def test_inflated_length_short_of_the_rows_is_truncated_and_named():
    rows = synth.png_filtered_rows(10, 8)
    data = synth.png_from_stream(10, 8, zlib.compress(rows[:-31]))  # the last row is cut
    status, reason, detail = verdict(data)
    assert (status, reason) == ("bad", "truncated")
    assert "inflates to 217 of the 248 bytes its rows need (10x8, 24 bits per pixel)" in detail


def test_interlaced_header_over_non_interlaced_data_is_caught():
    rows = synth.png_filtered_rows(16, 16)
    data = synth.png_from_stream(16, 16, zlib.compress(rows), interlace=1)
    status, reason, detail = verdict(data)
    assert status == "bad" and "PNG image data" in detail


def test_invalid_filter_type_byte_is_corrupt_and_names_the_row():
    rows = bytearray(synth.png_filtered_rows(10, 8))
    rows[5 * 31] = 7  # row 5's filter type
    data = synth.png_from_stream(10, 8, zlib.compress(bytes(rows)))
    assert not pillow_loads_all(data)
    assert verdict(data) == ("bad", "corrupt", "PNG image data: row 5 (inflated byte 155) has filter type 7, not 0-4")


def test_filter_type_checked_in_every_adam7_pass():
    data = synth.png_interlaced(13, 11)
    raw = bytearray(zlib.decompress(idat_stream(data)))
    layout = png.read_chunks(data)
    start, _end, _row = png.row_layout(layout.header, 13, 11)[4]  # pass 5
    raw[start] = 9
    status, reason, detail = verdict(replace_idat_stream(data, zlib.compress(bytes(raw))))
    assert (status, reason) == ("bad", "corrupt") and "pass 5" in detail and "filter type 9" in detail


def test_more_data_than_the_rows_need_is_a_warning():
    rows = synth.png_filtered_rows(10, 8)
    data = synth.png_from_stream(10, 8, zlib.compress(rows + b"\0" * 31))
    assert pillow_loads_all(data)  # decoders ignore the extra row
    assert verdict(data) == (
        "warn",
        "nonconforming",
        "PNG image data: image data inflates to 279 bytes, 31 more than its rows need (decoders ignore them)",
    )


def test_bytes_after_the_zlib_stream_are_a_warning():
    data = synth.png(16, 16)
    status, reason, detail = verdict(replace_idat_stream(data, idat_stream(data) + b"\0\0\0"))
    assert (status, reason) == ("warn", "nonconforming") and "3 bytes after the end of its zlib stream" in detail


def test_zlib_stream_without_its_end_is_a_warning_when_all_rows_are_there():
    rows = synth.png_filtered_rows(10, 8)
    z = zlib.compressobj()
    stream = z.compress(rows) + z.flush(zlib.Z_SYNC_FLUSH)  # every row, no final block, no Adler-32
    data = synth.png_from_stream(10, 8, stream)
    status, reason, detail = verdict(data)
    assert (status, reason) == ("warn", "nonconforming") and "Adler-32 check value is missing" in detail


def test_broken_zlib_header_and_deflate_data_are_corrupt():
    data = synth.png(16, 16)
    stream = idat_stream(data)
    assert "zlib header" in verdict(replace_idat_stream(data, b"\x78\x00" + stream[2:]))[2]
    garbage = stream[:2] + bytes([0xFF]) * 40 + stream[42:]
    status, reason, detail = verdict(replace_idat_stream(data, garbage))
    assert (status, reason) == ("bad", "corrupt") and "deflate data invalid" in detail


def test_palette_image_without_plte_before_idat_is_corrupt():
    data = synth.png(16, 16, mode="P")
    chunks = synth.png_chunks(data)
    plte = next(c for c in chunks if c[0] == b"PLTE")
    moved = [c for c in chunks if c[0] != b"PLTE"]
    moved.insert(len(moved) - 1, plte)  # after the IDAT
    status, reason, detail = verdict(synth.png_build(moved))
    assert (status, reason) == ("bad", "corrupt") and "no PLTE chunk before its image data" in detail


def _split_idat(data: bytes, at: float, between: tuple[bytes, bytes]) -> bytes:
    chunks = synth.png_chunks(data)
    i = next(i for i, (t, _) in enumerate(chunks) if t == b"IDAT")
    stream = chunks[i][1]
    cut = int(len(stream) * at)
    return synth.png_build(chunks[:i] + [(b"IDAT", stream[:cut]), between, (b"IDAT", stream[cut:])] + chunks[i + 1 :])


def test_idat_chunks_not_consecutive_is_corrupt():
    data = _split_idat(synth.png(32, 32), 0.5, (b"tEXt", b"Comment\0between"))
    assert not pillow_loads_all(data)
    status, reason, detail = verdict(data)
    assert (status, reason) == ("bad", "corrupt") and "IDAT chunks are not consecutive" in detail and "tEXt" in detail


def test_empty_idat_after_the_image_is_a_warning():
    data = _split_idat(synth.png(32, 32), 1.0, (b"tEXt", b"Comment\0after"))
    assert pillow_loads_all(data)
    status, reason, detail = verdict(data)
    assert (status, reason) == ("warn", "nonconforming") and "comes after a tEXt chunk" in detail


def test_ihdr_with_an_impossible_pixel_format_is_corrupt():
    data = synth.png(8, 8)
    chunks = synth.png_chunks(data)
    chunks[0] = (b"IHDR", synth.png_ihdr(8, 8, bit_depth=4, colour_type=2))
    assert verdict(synth.png_build(chunks))[:2] == ("bad", "corrupt")


def test_an_ancillary_chunk_pillow_refuses_after_the_image_data_stays_bad():
    """Pillow parses chunks after IDAT while loading; one it refuses makes load() fail, so the check fails too."""
    chunks = synth.png_chunks(synth.png(8, 8))
    chunks.insert(len(chunks) - 1, (b"pHYs", b"\0\0\0\1"))  # 4 bytes, not 9
    data = synth.png_build(chunks)
    assert not pillow_loads_all(data)
    status, reason, detail = verdict(data)
    assert status == "bad" and "pHYs" in detail


# ---- APNG structure ---------------------------------------------------------------------------


def _apng_chunks():
    return synth.png_chunks(synth.apng(frames=3))


def test_apng_sequence_error_is_corrupt():
    chunks = _apng_chunks()
    i = [i for i, (t, _) in enumerate(chunks) if t == b"fdAT"][0]
    chunks[i] = (b"fdAT", struct.pack(">I", 99) + chunks[i][1][4:])
    status, reason, detail = verdict(synth.png_build(chunks))
    assert (status, reason) == ("bad", "corrupt") and "sequence number 99" in detail


def test_apng_fewer_frames_than_actl_declares_is_corrupt():
    chunks = _apng_chunks()
    chunks = [(t, struct.pack(">II", 5, 0) if t == b"acTL" else p) for t, p in chunks]
    status, reason, detail = verdict(synth.png_build(chunks))
    assert (status, reason) == ("bad", "corrupt") and "acTL declares 5 frames; the file holds 3" in detail


def test_apng_frame_outside_the_canvas_is_corrupt():
    chunks = _apng_chunks()
    i = [i for i, (t, _) in enumerate(chunks) if t == b"fcTL"][1]
    p = bytearray(chunks[i][1])
    p[12:16] = struct.pack(">I", 20)  # x offset: 20 + 24 > 24
    chunks[i] = (b"fcTL", bytes(p))
    status, reason, detail = verdict(synth.png_build(chunks))
    assert (status, reason) == ("bad", "corrupt") and "APNG frame 1: region" in detail


def test_apng_frame_without_data_is_corrupt():
    chunks = _apng_chunks()
    drop = [i for i, (t, _) in enumerate(chunks) if t == b"fdAT"]
    first_fd = drop[0]
    kept = [c for j, c in enumerate(chunks) if j != first_fd]
    # renumber the sequence so that only the missing data is wrong
    seq, out = 0, []
    for t, p in kept:
        if t in (b"fcTL", b"fdAT"):
            p = struct.pack(">I", seq) + p[4:]
            seq += 1
        out.append((t, p))
    status, reason, detail = verdict(synth.png_build(out))
    assert (status, reason) == ("bad", "corrupt") and "has no image data" in detail


def test_max_frames_bounds_inflating_but_frames_are_counted():
    v = check_bytes(synth.apng(frames=5), "a.png", __import__("dsclean").scanning.check.CheckOptions(max_frames=2))
    assert (v.status, v.frames) == ("ok", 5) and "inflated the first 2 of 5 frames" in v.detail


# ---- the check without unfiltering flags whatever Pillow's full decode refuses ----------------


def test_no_damaged_png_that_pillow_refuses_passes():
    """Random damage (cuts, overwrites, bit flips, deletions) with CRCs recomputed where the damage
    hit a chunk, so the decode-level rules are exercised: whenever Pillow's load() of every frame
    fails, the check is bad. (The reverse does not hold: the check also sees what Pillow misses.)"""
    bases = [
        synth.png(24, 20),
        synth.encode_image(synth.photo_like(19, 13), "PNG", interlace=1),
        synth.png(16, 16, mode="P"),
        synth.apng(frames=3, size=12),
    ]
    rng = np.random.default_rng(0)
    refused = caught_more = 0
    for i in range(400):
        chunks = synth.png_chunks(bases[i % len(bases)])
        j = int(rng.integers(0, len(chunks) - 1))
        t, p = chunks[j]
        if p:
            k = int(rng.integers(0, len(p)))
            how = i % 3
            if how == 0:
                p = p[:k] + bytes([p[k] ^ (1 << int(rng.integers(0, 8)))]) + p[k + 1 :]
            elif how == 1:
                p = p[:k] + rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8).tobytes() + p[k + 16 :]
            else:
                p = p[:k] + p[k + int(rng.integers(1, 8)) :]
        chunks[j] = (t, p)
        data = synth.png_build(chunks)
        v = check_bytes(data, "d.png")
        if not pillow_loads_all(data):
            refused += 1
            assert v.status == "bad", (i, t, v.detail)
        elif v.status == "bad":
            caught_more += 1
    assert refused > 50 and caught_more > 0  # both kinds really occur in this mix
