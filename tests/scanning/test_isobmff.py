"""AVIF, HEIF/HEIC and JPEG XL: the container rules, the decode through each plugin, and what a
missing plugin gives (warn/unsupported naming the extra, never ok unchecked, never bad)."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from dsclean import formats
from dsclean import reasons as R
from dsclean.data.loaders import pil_loader
from dsclean.scanning.check import check_bytes
from dsclean.scanning.formats import isobmff

pillow_heif = pytest.importorskip("pillow_heif")
pillow_jxl = pytest.importorskip("pillow_jxl")
pillow_heif.register_heif_opener()

_PIXELS = (np.arange(48 * 64 * 3) % 251).astype(np.uint8).reshape(48, 64, 3)


def encode(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(_PIXELS).save(buf, fmt)
    return buf.getvalue()


def box(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(body), kind) + body


def jxl_container(codestream: bytes, parts: list[tuple[int, bool]] | None = None) -> bytes:
    """The JPEG XL container (ISO/IEC 18181-2) around a codestream: whole in 'jxlc', or split into
    'jxlp' boxes with the given (number, last) headers."""
    out = isobmff.JXL_SIGNATURE + box(b"ftyp", b"jxl \0\0\0\0jxl ")
    if parts is None:
        return out + box(b"jxlc", codestream)
    cut = len(codestream) // len(parts)
    pieces = [codestream[i * cut : (i + 1) * cut if i < len(parts) - 1 else None] for i in range(len(parts))]
    for (number, last), piece in zip(parts, pieces):
        out += box(b"jxlp", struct.pack(">I", number | (1 << 31 if last else 0)) + piece)
    return out


CASES = {"a.avif": "AVIF", "a.heic": "HEIF", "a.jxl": "JXL"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_valid_files_check_ok_with_facts(name):
    data = encode(CASES[name])
    assert formats.sniff(data[: formats.SNIFF_BYTES]) == formats.format_of_name(name)
    v = check_bytes(data, name)
    assert (v.status, v.width, v.height) == (R.OK, 64, 48), v.detail
    assert v.content_hash and v.phash is not None


@pytest.mark.parametrize("name", ["a.avif", "a.heic"])
@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9])
def test_a_cut_heif_family_file_is_truncated_by_its_boxes(name, keep):
    data = encode(CASES[name])
    v = check_bytes(data[: int(len(data) * keep)], name)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED), v.detail
    assert "box" in v.detail


def _mdat(data: bytes) -> isobmff.Box:
    walk = isobmff.Walk()
    return next(b for b in isobmff.boxes(data, 0, len(data), "t", walk) if b.type == b"mdat")


@pytest.mark.parametrize("name", ["a.avif", "a.heic"])
def test_an_item_whose_data_lies_past_the_end_is_caught_with_whole_boxes(name):
    """The mdat box shortened to what is left (its size field agreeing): only the item extents tell."""
    data = bytearray(encode(CASES[name]))
    mdat = _mdat(bytes(data))
    assert mdat.end == len(data)  # the encoder writes mdat last
    cut = mdat.body + (mdat.end - mdat.body) // 2
    data[mdat.start : mdat.start + 4] = struct.pack(">I", cut - mdat.start)
    v = check_bytes(bytes(data[:cut]), name)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED), v.detail
    assert "image item" in v.detail and "past the end of the file" in v.detail


def test_a_box_smaller_than_its_header_is_corrupt():
    data = bytearray(encode("AVIF"))
    meta = data.index(b"meta") - 4
    data[meta : meta + 4] = struct.pack(">I", 3)
    v = check_bytes(bytes(data), "a.avif")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "less than its own header" in v.detail


def test_hostile_iloc_counts_end_at_the_box():
    """An iloc declaring 2^32-1 items, and items of 65535 zero-byte extents: the walk stops at once."""
    head = box(b"ftyp", b"avif\0\0\0\0avifmif1")
    for iloc in (
        box(b"iloc", b"\x02\0\0\0" + b"\x44\x40" + b"\xff\xff\xff\xff"),
        box(b"iloc", b"\x00\0\0\0" + b"\x00\x00" + b"\xff\xff" + b"\0\x01\0\0\xff\xff" * 4000),
    ):
        data = head + box(b"meta", b"\0\0\0\0" + box(b"hdlr", b"\0" * 24) + iloc)
        t0 = time.process_time()
        v = check_bytes(data, "h.avif")
        assert time.process_time() - t0 < 5  # a bound on a hang, not a speed figure
        assert v.status in (R.BAD, R.WARN), (v.status, v.detail)


def test_jxl_container_whole_and_in_parts():
    code = encode("JXL")
    assert check_bytes(jxl_container(code), "c.jxl").status == R.OK
    assert check_bytes(jxl_container(code, [(0, False), (1, True)]), "p.jxl").status == R.OK


def test_jxl_parts_out_of_order_or_lost_are_damage():
    code = encode("JXL")
    v = check_bytes(jxl_container(code, [(1, False), (0, True)]), "o.jxl")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "part 1, not 0" in v.detail
    v = check_bytes(jxl_container(code, [(0, False), (1, False)]), "l.jxl")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED) and "not flagged last" in v.detail


def test_a_damaged_bare_jxl_codestream_names_the_limit_of_what_can_be_told():
    code = encode("JXL")
    v = check_bytes(code[: len(code) // 2], "cut.jxl")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "bare JPEG XL codestream" in v.detail


def test_a_heic_named_file_holding_avif_is_an_extension_mismatch():
    v = check_bytes(encode("AVIF"), "really_avif.heic")
    assert (v.status, v.reason, v.format) == (R.WARN, R.EXTENSION_MISMATCH, "avif")


@pytest.mark.parametrize(
    "name,module,extra", [("a.heic", "pillow_heif", "dsclean[heif]"), ("a.jxl", "pillow_jxl", "dsclean[jxl]")]
)
def test_without_the_plugin_a_whole_file_is_unsupported_naming_the_extra(tmp_path, name, module, extra):
    good, cut = tmp_path / name, tmp_path / ("cut" + name[1:])
    data = encode(CASES[name])
    good.write_bytes(data)
    cut.write_bytes(data[: len(data) // 3])
    code = f"""
import sys; sys.modules[{module!r}] = None  # as if not installed: import raises ImportError
from dsclean.scanning.check import check_file
for n in ({good.name!r}, {cut.name!r}):
    v = check_file({str(tmp_path)!r}, n); print(v.status, v.reason, v.detail, sep="|")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    status, reason, detail = out[0].split("|")
    assert (status, reason) == (R.WARN, R.UNSUPPORTED) and extra in detail
    if name.endswith(".heic"):  # the container still judges the bytes: a cut HEIC is bad without libheif
        assert out[1].split("|")[:2] == [R.BAD, R.TRUNCATED]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_default_loader_reads_them(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(encode(CASES[name]))
    code = f"from dsclean.data.loaders import pil_loader; im = pil_loader({str(path)!r}); print(im.mode, im.size)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["RGB", "(64,", "48)"]
    assert pil_loader(str(path)).size == (64, 48)
