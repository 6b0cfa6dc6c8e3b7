"""Sequence rules: a format that numbers its parts promises their order.

Each case moves, doubles or renumbers whole parts of a valid file, so every part still passes its
own checksum and the decoder reads the file without an error: only the sequence rule finds it.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from dsclean import reasons as R
from dsclean.scanning.check import check_bytes
from dsclean.scanning.formats import flac
from dsclean.scanning.formats.ogg import ogg_crc


def _flac(seconds: float = 1.0, seed: int = 0) -> bytes:
    x = 0.3 * np.random.default_rng(seed).standard_normal((int(44100 * seconds), 1))
    buf = io.BytesIO()
    sf.write(buf, x, 44100, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def _frames(data: bytes) -> tuple[bytes, list[bytes]]:
    """The bytes before the first frame, and each frame's bytes (found by their headers)."""
    walk = flac.walk(data)
    starts, pos = [], walk.audio_start
    while (pos := data.find(b"\xff\xf8", pos)) >= 0:
        header = flac.frame_header(data, pos, len(data), walk.info.max_block)
        if header is not None and header[0] == len(starts) * walk.info.max_block:
            starts.append(pos)
        pos += 1
    ends = starts[1:] + [len(data)]
    return data[: starts[0]], [data[a:b] for a, b in zip(starts, ends)]


def test_valid_flac_follows_its_sequence():
    for seed in range(5):
        data = _flac(2.0, seed)
        assert check_bytes(data, "ok.flac").status == R.OK


def test_flac_frames_in_the_wrong_order_are_corrupt():
    head, frames = _frames(_flac())
    swapped = head + b"".join([frames[0], frames[2], frames[1], *frames[3:]])
    sf.read(io.BytesIO(swapped))  # the decoder reads it without a word
    v = check_bytes(swapped, "swapped.flac")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "frame sequence" in v.detail and "out of order" in v.detail


def test_a_doubled_flac_frame_is_corrupt():
    head, frames = _frames(_flac())
    doubled = head + b"".join([*frames[:3], frames[2], *frames[3:]])
    v = check_bytes(doubled, "doubled.flac")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "doubled" in v.detail


def test_a_smallest_frame_size_that_lies_costs_no_frame():
    """STREAMINFO's min frame size only speeds the walk: a header that overstates it is no damage."""
    data = bytearray(_flac())
    body = data.index(b"fLaC") + 8  # STREAMINFO's body
    data[body + 4 : body + 7] = (60_000).to_bytes(3, "big")
    assert check_bytes(bytes(data), "lying.flac").status == R.OK


def _ogg_pages(data: bytes) -> list[bytearray]:
    pages, pos = [], 0
    while pos < len(data):
        nseg = data[pos + 26]
        end = pos + 27 + nseg + sum(data[pos + 27 : pos + 27 + nseg])
        pages.append(bytearray(data[pos:end]))
        pos = end
    return pages


def _recrc(page: bytearray) -> bytes:
    page[22:26] = b"\0\0\0\0"
    page[22:26] = struct.pack("<I", ogg_crc(bytes(page)))
    return bytes(page)


def test_ogg_granule_positions_that_go_back_are_corrupt():
    buf = io.BytesIO()
    sf.write(buf, 0.3 * np.random.default_rng(1).standard_normal((44100 * 2, 1)), 44100, format="OGG", subtype="VORBIS")
    pages = _ogg_pages(buf.getvalue())
    audio = [i for i, p in enumerate(pages) if struct.unpack_from("<q", p, 6)[0] > 0]
    assert len(audio) >= 3
    a, b = audio[0], audio[1]  # swap the granule positions of two audio pages, CRCs made good again
    ga, gb = pages[a][6:14], pages[b][6:14]
    pages[a][6:14], pages[b][6:14] = gb, ga
    data = b"".join(_recrc(p) for p in pages)
    v = check_bytes(data, "granule.ogg")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "granule position goes back" in v.detail


def _tiff_pages(numbers: list[tuple[int, int]]) -> bytes:
    tifffile = pytest.importorskip("tifffile")
    buf = io.BytesIO()
    with tifffile.TiffWriter(buf) as w:
        for i, pn in enumerate(numbers):
            w.write(np.full((8, 8, 3), i * 40, np.uint8), extratags=[(297, "H", 2, pn, True)])
    return buf.getvalue()


def test_tiff_page_numbers_in_order_or_not_are_fine():
    assert check_bytes(_tiff_pages([(0, 3), (1, 3), (2, 3)]), "a.tif").status == R.OK
    assert check_bytes(_tiff_pages([(2, 3), (0, 3), (1, 3)]), "b.tif").status == R.OK  # the spec asks no order
    assert check_bytes(_tiff_pages([(4, 10)]), "c.tif").status == R.OK  # page 4 of a split document


def test_tiff_page_number_given_twice_is_a_doubled_directory():
    v = check_bytes(_tiff_pages([(0, 3), (1, 3), (1, 3)]), "d.tif")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "both say they are page 1" in v.detail


def test_tiff_page_number_past_the_total_is_corrupt():
    v = check_bytes(_tiff_pages([(0, 2), (2, 2)]), "e.tif")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "page 2 of 2" in v.detail


def test_pillow_multipage_tiff_without_page_numbers_is_fine():
    buf = io.BytesIO()
    ims = [Image.new("RGB", (8, 8), (i * 40, 0, 0)) for i in range(3)]
    ims[0].save(buf, "TIFF", save_all=True, append_images=ims[1:])
    assert check_bytes(buf.getvalue(), "f.tif").status == R.OK
