"""What silently changes the data a loader returns, per file: from facts the check already has (issue 27).

:func:`file_traits` reads the verdict's fields and a few header bytes (PNG IHDR and tRNS, the JPEG Adobe APP14
and EXIF segments, a GIF's transparency flag): no second decode. :func:`expect_findings` holds a file against
``scan --expect``. :func:`apply` records both in the verdict: a ``warn`` (``bad`` for a broken expectation
under ``--strict-expect``) whose reason is the first finding, every finding named in the detail. The
set-relative reasons (``alpha`` in an opaque set, ...) without ``--expect`` come later, over the whole results
table (:mod:`dsclean.scanning.norm`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .. import reasons as R
from ..errors import UserError
from .verdict import Verdict

#: Pillow modes of more than 8 bits per sample (the default loader scales them: dsclean.data.loaders.to_rgb)
HIGH_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I;16S", "I;16BS", "I;16LS", "I;32", "I;32B", "I", "F"})
#: modes with an alpha channel
ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})
#: modes with one grey channel (with or without alpha, any depth)
GREY_MODES = frozenset({"1", "L", "LA", "La"}) | HIGH_BIT_MODES

#: ``--expect`` keys -> (value type, the reason a file outside it gets)
EXPECT_KEYS = {
    "mode": (str, R.MODE_MISMATCH),
    "min-side": (int, R.TOO_SMALL),
    "max-aspect": (float, R.ASPECT_RATIO),
    "sample-rate": (int, R.SAMPLE_RATE_MISMATCH),
    "channels": (int, R.CHANNEL_MISMATCH),
    "min-duration": (float, R.TOO_SHORT),
}


@dataclass(frozen=True)
class Expect:
    """``scan --expect``: what every file of the set should be (None: no expectation)."""

    mode: str | None = None
    min_side: int | None = None
    max_aspect: float | None = None
    sample_rate: int | None = None
    channels: int | None = None
    min_duration: float | None = None


def parse_expect(text: str) -> Expect:
    """``mode=RGB,min-side=224,...`` as an :class:`Expect`; a :class:`UserError` naming the bad key or value."""
    values: dict = {}
    for item in (p.strip() for p in (text or "").split(",")):
        if not item:
            continue
        key, sep, raw = item.partition("=")
        key, raw = key.strip().lower(), raw.strip()
        if key not in EXPECT_KEYS:
            raise UserError(f"--expect {item!r}: unknown key {key!r}; the keys are {', '.join(EXPECT_KEYS)}")
        if not sep or not raw:
            raise UserError(f"--expect {item!r}: give a value, e.g. {key}={_EXAMPLE[key]}")
        if key in values:
            raise UserError(f"--expect: {key} given twice")
        kind = EXPECT_KEYS[key][0]
        try:
            value = kind(raw)
        except ValueError:
            raise UserError(
                f"--expect {item!r}: {key} takes {'a whole number' if kind is int else 'a number'}, "
                f"e.g. {key}={_EXAMPLE[key]}"
            ) from None
        if kind is not str and not value > 0:
            raise UserError(f"--expect {item!r}: {key} must be above 0")
        if key == "max-aspect" and value < 1:
            raise UserError(f"--expect {item!r}: max-aspect is longer side / shorter side, at least 1")
        values[key.replace("-", "_")] = value
    return Expect(**values)


_EXAMPLE = {
    "mode": "RGB",
    "min-side": "224",
    "max-aspect": "4",
    "sample-rate": "16000",
    "channels": "1",
    "min-duration": "1.0",
}


def canonical_expect(text: str) -> str:
    """The ``--expect`` text in one spelling (keys sorted), as :class:`~dsclean.scanning.check.CheckOptions`
    keeps it: the same expectation, the same cache key. Validates it."""
    e = parse_expect(text)
    return ",".join(
        f"{k}={getattr(e, k.replace('-', '_'))}"
        for k in sorted(EXPECT_KEYS)
        if getattr(e, k.replace("-", "_")) is not None
    )


@functools.lru_cache(maxsize=8)
def _expect_of(text: str) -> Expect:
    return parse_expect(text)


def expect_findings(v: Verdict, text: str) -> list[tuple[str, str]]:
    """(reason, detail) of every ``--expect`` key the file is outside of."""
    e = _expect_of(text)
    out: list[tuple[str, str]] = []
    if v.kind == "image":
        if e.mode is not None and v.mode is not None and v.mode != e.mode:
            reason = (
                R.GRAYSCALE
                if v.mode in GREY_MODES and e.mode not in GREY_MODES
                else R.ALPHA
                if v.mode in ALPHA_MODES and e.mode not in ALPHA_MODES
                else R.MODE_MISMATCH
            )
            out.append((reason, f"mode {v.mode}, --expect mode={e.mode}"))
        if v.width and v.height:
            short, long = min(v.width, v.height), max(v.width, v.height)
            if e.min_side is not None and short < e.min_side:
                out.append((R.TOO_SMALL, f"{v.width}x{v.height}, --expect min-side={e.min_side}"))
            if e.max_aspect is not None and long > e.max_aspect * short:
                out.append(
                    (
                        R.ASPECT_RATIO,
                        f"{v.width}x{v.height} (aspect {long / short:.2f}), --expect max-aspect={e.max_aspect:g}",
                    )
                )
    elif v.kind == "audio":
        if e.sample_rate is not None and v.sample_rate is not None and v.sample_rate != e.sample_rate:
            out.append((R.SAMPLE_RATE_MISMATCH, f"{v.sample_rate} Hz, --expect sample-rate={e.sample_rate}"))
        if e.channels is not None and v.channels is not None and v.channels != e.channels:
            out.append((R.CHANNEL_MISMATCH, f"{v.channels} channels, --expect channels={e.channels}"))
        if e.min_duration is not None and v.duration is not None and v.duration < e.min_duration:
            out.append((R.TOO_SHORT, f"{v.duration:.3f} s, --expect min-duration={e.min_duration:g}"))
    return out


def file_traits(data, v: Verdict) -> list[tuple[str, str]]:
    """(reason, detail) of what this file's loaders may silently change, from its header bytes and the verdict."""
    if v.kind != "image":
        return []
    out: list[tuple[str, str]] = []
    fmt = v.format
    if fmt == "png":
        out += _png_traits(data)
    elif v.mode in HIGH_BIT_MODES:
        out.append(
            (
                R.HIGH_BIT_DEPTH,
                f'mode {v.mode}: more than 8 bits per sample; convert("RGB") clips it '
                "(dsclean's default loader scales it)",
            )
        )
    if fmt == "jpeg":
        out += _jpeg_traits(data, v)
    elif fmt == "gif" and _gif_transparent(data):
        out.append((R.PALETTE_TRANSPARENCY, 'GIF with a transparent colour: convert("RGB") drops it'))
    orientation = _jpeg_orientation(data) if fmt == "jpeg" else v.orientation
    if orientation in range(2, 9):
        out.append(
            (
                R.EXIF_ROTATED,
                f'EXIF orientation {orientation}: Pillow\'s convert("RGB") and '
                "torchvision.io.decode_image ignore it, ImageOps.exif_transpose, cv2.imread and "
                "decode_image(apply_exif_orientation=True) apply it (scan --exif apply)",
            )
        )
    return out


def _png_traits(data) -> list[tuple[str, str]]:
    if len(data) < 33 or data[12:16] != b"IHDR":
        return []
    depth, colour = data[24], data[25]
    out = []
    if depth == 16:
        what = {0: "grey", 2: "RGB", 4: "grey+alpha", 6: "RGBA"}.get(colour, f"colour type {colour}")
        effect = "clips it white" if colour in (0, 4) else "keeps the high byte of each sample"
        out.append(
            (R.HIGH_BIT_DEPTH, f'16-bit {what} PNG: convert("RGB") {effect} (dsclean\'s default loader scales it)')
        )
    if colour == 3:
        idat = data.find(b"IDAT", 33)  # bytes and mmap both find; tRNS must come before the image data
        if idat > 0 and data.find(b"tRNS", 33, idat) >= 0:
            out.append(
                (
                    R.PALETTE_TRANSPARENCY,
                    'palette PNG with a tRNS chunk: convert("RGB") drops the transparency (convert("RGBA") keeps it)',
                )
            )
    return out


def _jpeg_orientation(data) -> int | None:
    from .formats.jpeg import exif_orientation

    return exif_orientation(data)


def _jpeg_traits(data, v: Verdict) -> list[tuple[str, str]]:
    if v.mode != "CMYK":
        return []
    from .formats.jpeg import find_app

    adobe = find_app(data, 0xEE, b"Adobe")
    transform = data[adobe[0] + 6] if adobe is not None and adobe[0] + 6 < adobe[1] else None
    if transform == 2:
        return [
            (
                R.YCCK,
                "YCCK JPEG (Adobe APP14 transform 2): decoders convert it to CMYK, then to RGB each "
                "their own way; torchvision.io.decode_jpeg and nvJPEG refuse or misread such files",
            )
        ]
    marker = (
        f"with an Adobe APP14 marker (transform {transform}): Pillow and libjpeg read the values as inverted"
        if adobe is not None
        else "without an Adobe APP14 marker: decoders disagree whether the values are "
        "inverted (the colours come out as a negative in some)"
    )
    return [
        (
            R.CMYK,
            f"CMYK JPEG {marker}; nvJPEG and other GPU decoders refuse or misread it "
            "(scan --loader NAME compares the loader training uses with Pillow)",
        )
    ]


def _gif_transparent(data) -> bool:
    """Whether the first Graphic Control Extension of a GIF sets its transparency flag."""
    at = data.find(b"\x21\xf9\x04", 13, 1 << 16)
    return at >= 0 and at + 4 <= len(data) and bool(data[at + 3] & 1)


def apply(data, v: Verdict, expect: str, strict: bool) -> None:
    """Record the file's expectation findings and traits in its verdict (nothing for a bad file)."""
    if v.status == R.BAD:
        return
    broken = expect_findings(v, expect) if expect else []
    found = broken + [t for t in file_traits(data, v) if t[0] not in {b[0] for b in broken}]
    if not found:
        return
    text = "; ".join(f"{reason}: {detail}" for reason, detail in found)
    if broken and strict:
        v.status, v.reason = R.BAD, broken[0][0]  # --strict-expect: quarantined like any bad file
        v.detail = f"{v.detail}; {text}" if v.detail else text
    elif v.status == R.OK:
        v.mark(R.WARN, found[0][0], text)
    else:  # already a warning (e.g. extension_mismatch): it keeps its reason, the detail names these too
        v.detail = f"{v.detail}; also {text}" if v.detail else text
