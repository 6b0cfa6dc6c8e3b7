"""JPEG (MPF/MPO), GIF, TIFF and BMP rules of issue 11: every picture a file holds, structure, tolerance.

Where Pillow's usual check (open + load every frame) accepts the damage, the test
asserts that too, so it is proven that the rule under test is what catches it.
"""

from __future__ import annotations

import io
import struct

import pytest
from PIL import Image
from support import synth

from dsclean.scanning.check import CheckOptions, check_bytes


def pillow_loads_all(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data)) as im:
            for i in range(getattr(im, "n_frames", 1)):
                im.seek(i)
                im.load()
        return True
    except Exception:
        return False


def verdict(data: bytes, name: str, **kw):
    v = check_bytes(data, name, CheckOptions(**kw))
    return v.status, v.reason, v.detail


# ---- JPEG: every image of a multi-picture file ----------------------------------------------


def _second_image_start(data: bytes) -> int:
    return data.index(b"\xff\xd8", 2)


def test_mpo_with_two_whole_images_passes():
    v = check_bytes(synth.mpo(2), "stereo.jpg")
    assert (v.status, v.frames, v.width) == ("ok", 2, 48), v.detail


def test_mpo_cut_inside_its_second_image_is_truncated_though_the_first_loads():
    data = synth.mpo(2)
    cut = data[: len(data) - 200]
    with Image.open(io.BytesIO(cut)) as im:
        im.load()  # what a training loader reads: the primary image, intact
    status, reason, detail = verdict(cut, "cut.jpg")
    assert (status, reason) == ("bad", "truncated")
    assert detail.startswith("MPF image 1 of 2") and "Premature end" in detail


def test_mpo_damaged_second_image_is_corrupt():
    data = synth.mpo(2, width=128, height=96)
    at = _second_image_start(data) + (len(data) - _second_image_start(data)) // 2
    damaged = synth.overwrite(data, at / len(data), 32, seed=1)
    status, reason, detail = verdict(damaged, "bad.jpg")
    assert status == "bad" and detail.startswith("MPF image 1 of 2")


def test_mpo_index_pointing_at_no_jpeg_is_corrupt():
    data = synth.mpo(2)
    start = _second_image_start(data)
    damaged = data[:start] + b"\x00\x00" + data[start + 2 :]
    status, reason, detail = verdict(damaged, "x.jpg")
    assert (status, reason) == ("bad", "corrupt") and "no JPEG start-of-image marker" in detail


def test_a_whole_mpo_image_with_a_wrong_recorded_size_is_only_a_warning():
    """Pillow's own MPO writer records the size of the 3rd image wrong (it subtracts the 2nd image's
    size, not its end); decoders locate images by offset and read to the end-of-image marker."""
    data = synth.mpo(3)
    assert pillow_loads_all(data)
    status, reason, detail = verdict(data, "three.jpg")
    assert (
        (status, reason) == ("warn", "nonconforming")
        and "MPF image 2 of 3" in detail
        and "recorded size is wrong" in detail
    )


def test_max_frames_bounds_the_mpf_images_decoded():
    v = check_bytes(synth.mpo(3), "three.jpg", CheckOptions(max_frames=2))
    assert v.frames == 3 and "decoded the first 2 of 3 MPF images" in v.detail


def test_jpeg_with_bytes_after_its_end_marker_passes():
    assert verdict(synth.jpeg(32, 32) + b"trailing junk", "t.jpg")[:2] == ("ok", None)


# ---- GIF ------------------------------------------------------------------------------------


def test_gif_with_bytes_after_its_trailer_is_ok_and_noted():
    """The old rule (file ends with 0x3B) called this truncated: a false alarm, fixed by the block walk."""
    status, reason, detail = verdict(synth.animated_gif() + b"signature junk", "t.gif")
    assert (status, reason) == ("ok", None) and "14 bytes after the GIF trailer" in detail


def test_gif_cut_between_frames_names_the_cut():
    data = synth.animated_gif(frames=3)
    second = data.index(b"\x21\xf9", data.index(b"\x2c"))  # the second frame's graphic control extension
    cut = data[:second]
    assert pillow_loads_all(cut)
    status, reason, detail = verdict(cut, "cut.gif")
    assert (
        (status, reason) == ("bad", "truncated") and "trailer (0x3B) missing" in detail and "after 1 frames" in detail
    )


def test_gif_unknown_block_after_a_frame_is_a_warning():
    data = synth.animated_gif(frames=2)
    status, reason, detail = verdict(data[:-1] + b"\x99junk;", "odd.gif")
    assert (status, reason) == ("warn", "nonconforming") and "unknown block 0x99" in detail


# ---- TIFF: every page, every strip inside the file ---------------------------------------------


def _ifds(data: bytes) -> list[int]:
    """Offsets of the directories of a little-endian classic TIFF."""
    out, ifd = [], struct.unpack_from("<I", data, 4)[0]
    while ifd:
        out.append(ifd)
        n = struct.unpack_from("<H", data, ifd)[0]
        ifd = struct.unpack_from("<I", data, ifd + 2 + 12 * n)[0]
    return out


def _entry(data: bytes, ifd: int, tag: int) -> int:
    """Offset of the entry with ``tag`` in the directory at ``ifd``."""
    n = struct.unpack_from("<H", data, ifd)[0]
    for i in range(n):
        at = ifd + 2 + 12 * i
        if struct.unpack_from("<H", data, at)[0] == tag:
            return at
    raise KeyError(tag)


def test_multipage_tiff_passes_with_every_page_counted():
    v = check_bytes(synth.tiff_pages(3), "p.tif")
    assert (v.status, v.frames) == ("ok", 3), v.detail


def test_strip_of_a_later_page_past_the_end_is_truncated():
    data = bytearray(synth.tiff_pages(3))
    ifd = _ifds(bytes(data))[2]
    at = _entry(bytes(data), ifd, 273)  # StripOffsets of page 2 (one strip: the value is inline)
    assert struct.unpack_from("<HI", data, at + 2) == (4, 1)
    struct.pack_into("<I", data, at + 8, len(data) - 10)
    status, reason, detail = verdict(bytes(data), "p.tif")
    assert (status, reason) == ("bad", "truncated")
    assert detail.startswith("TIFF page 2: strip 0 at byte") and "the file ends at" in detail


def test_directory_chain_loop_is_corrupt():
    data = bytearray(synth.tiff_pages(3))
    ifds = _ifds(bytes(data))
    n = struct.unpack_from("<H", data, ifds[2])[0]
    struct.pack_into("<I", data, ifds[2] + 2 + 12 * n, ifds[0])  # page 2 points back to page 0
    status, reason, detail = verdict(bytes(data), "loop.tif")
    assert (status, reason) == ("bad", "corrupt") and "chain loops" in detail


def test_strip_offsets_and_counts_disagreeing_is_corrupt():
    data = synth.tiff_pages(1, size=64, tiffinfo={278: 8})  # 8 strips: the arrays live outside the entry
    ifd = _ifds(data)[0]
    at = _entry(data, ifd, 279)  # StripByteCounts: claim one fewer
    typ, count = struct.unpack_from("<HI", data, at + 2)
    assert count > 1
    broken = data[: at + 4] + struct.pack("<I", count - 1) + data[at + 8 :]
    status, reason, detail = verdict(broken, "s.tif")
    assert (status, reason) == ("bad", "corrupt") and f"{count} strip offsets but {count - 1} byte counts" in detail


# ---- BMP: run-length encoded bitmaps ------------------------------------------------------------


def test_valid_rle8_and_rle4_bitmaps_pass():
    assert verdict(synth.bmp_rle(20, 10, synth.rle8_rows(20, 10)), "r8.bmp")[:2] == ("ok", None)
    rle4 = (b"\x06\x12" + b"\x00\x00") * 3 + b"\x00\x03\x12\x30\x00\x00" + b"\x00\x01"  # a literal run too
    data = synth.bmp_rle(6, 4, rle4, bits=4)
    assert pillow_loads_all(data)
    assert verdict(data, "r4.bmp")[:2] == ("ok", None)


def test_rle_run_past_the_end_of_its_row_is_corrupt_though_pillow_clips_it():
    rle = b"\x0a\x07\x00\x00" + b"\x0c\x07\x00\x00" + b"\x0a\x07\x00\x01"  # row 1: 12 pixels in a 10-pixel row
    data = synth.bmp_rle(10, 3, rle)
    assert pillow_loads_all(data)
    status, reason, detail = verdict(data, "over.bmp")
    assert (status, reason) == ("bad", "corrupt")
    assert detail == "BMP RLE8: a run of 12 pixels at byte 1082 lies outside the 10x3 bitmap (row 1, column 0)"


def test_rle_delta_outside_the_bitmap_is_corrupt():
    rle = b"\x0a\x07\x00\x00" + b"\x00\x02\x05\x09" + b"\x00\x01"  # move up 9 rows in a 3-row bitmap
    status, reason, detail = verdict(synth.bmp_rle(10, 3, rle), "delta.bmp")
    assert (status, reason) == ("bad", "corrupt") and "delta" in detail


def test_rle_stream_cut_short_is_truncated():
    rle = synth.rle8_rows(20, 10)
    data = synth.bmp_rle(20, 10, rle)
    cut = data[: len(data) - len(rle) // 2]
    status, reason, detail = verdict(cut, "cut.bmp")
    assert (status, reason) == ("bad", "truncated")


@pytest.mark.parametrize("end", [b"\x00\x00", b""])
def test_rle_without_its_end_marker_but_every_row_is_a_warning(end):
    rle = (b"\x0a\x07\x00\x00") * 2 + b"\x0a\x07" + end
    data = synth.bmp_rle(10, 3, rle)
    status, reason, detail = verdict(data, "noeob.bmp")
    assert (status, reason) == ("warn", "nonconforming") and "end-of-bitmap marker is missing" in detail
