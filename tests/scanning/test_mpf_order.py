"""The MPF index's order rule: every image it lists starts inside the file with an SOI, after the image
before it ends (CIPA DC-007: the individual images follow one another). Files written by Pillow stay ok."""

from __future__ import annotations

import struct

from support import synth

from dsclean import reasons as R
from dsclean.scanning.check import CheckOptions, check_bytes
from dsclean.scanning.formats import jpeg

RULE = "MPF index rule"


def entries_at(data: bytes) -> tuple[str, int, int]:
    """(byte order, file offset of the MP Entry list, MP header start), read independently of dsclean."""
    base = data.index(b"MPF\0") + 4
    e = "<" if data[base : base + 2] == b"II" else ">"
    (ifd,) = struct.unpack_from(e + "I", data, base + 4)
    (count,) = struct.unpack_from(e + "H", data, base + ifd)
    for i in range(count):
        tag, _t, _n, value = struct.unpack_from(e + "HHII", data, base + ifd + 2 + 12 * i)
        if tag == 0xB002:
            return e, base + value, base
    raise AssertionError("no MP Entry")


def set_entry(data: bytes, k: int, size: int | None = None, offset: int | None = None) -> bytes:
    """Rewrite MP entry ``k``'s size and/or offset (the offset given from the start of the file)."""
    e, at, base = entries_at(data)
    out = bytearray(data)
    if size is not None:
        struct.pack_into(e + "I", out, at + 16 * k + 4, size)
    if offset is not None:
        struct.pack_into(e + "I", out, at + 16 * k + 8, offset - base)
    return bytes(out)


def entry(data: bytes, k: int) -> tuple[int, int]:
    """(file offset, size) of MP entry ``k``."""
    e, at, base = entries_at(data)
    size, offset = struct.unpack_from(e + "II", data, at + 16 * k + 4)
    return (base + offset if k else 0), size


def check(data: bytes):
    return check_bytes(data, "x.jpg", CheckOptions())


def test_pillow_mpo_files_keep_to_the_order():
    for images in (2, 3):
        data = synth.mpo(images)
        pictures, count, findings = jpeg.mpf_pictures(data)
        assert count == images and findings == [] and len(pictures) == images - 1
        assert check(data).status in (R.OK, R.WARN)  # 3 images: Pillow's wrong recorded size, a warning
        assert RULE not in check(data).detail


def test_images_listed_out_of_order_are_corrupt():
    data = synth.mpo(3)
    (s1, n1), (s2, n2) = entry(data, 1), entry(data, 2)
    swapped = set_entry(set_entry(data, 1, n2, s2), 2, n1, s1)  # both still an SOI inside the file
    v = check(swapped)
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert RULE in v.detail and "image 2 starts" in v.detail and "before image 1" in v.detail


def test_an_image_inside_the_one_before_is_corrupt():
    data = synth.mpo(3)
    s1, n1 = entry(data, 1)
    v = check(set_entry(data, 1, size=n1 + 10))  # image 1 now runs 10 bytes into image 2
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "image 2 starts" in v.detail and "inside image 1" in v.detail
    v = check(set_entry(data, 2, offset=s1))  # image 2 listed at image 1's own offset
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "before image 1" in v.detail


def test_an_image_over_the_primary_is_corrupt():
    data = synth.mpo(2)
    s1, _ = entry(data, 1)
    v = check(set_entry(data, 0, size=s1 + 4))  # the primary's size reaches into image 1
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "inside image 0" in v.detail


def test_an_image_past_the_end_is_truncated():
    data = synth.mpo(3)
    v = check(set_entry(data, 2, offset=len(data) + 5))
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED) and RULE in v.detail and "image 2 starts at byte" in v.detail


def test_every_image_is_held_to_the_rule_not_only_the_decoded_ones():
    data = synth.mpo(3)
    s2, _ = entry(data, 2)
    damaged = data[:s2] + b"\0\0" + data[s2 + 2 :]
    v = check_bytes(damaged, "x.jpg", CheckOptions(max_frames=2))  # image 2 is beyond the images decoded
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and RULE in v.detail and "start-of-image" in v.detail
