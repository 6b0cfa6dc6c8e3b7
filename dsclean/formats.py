"""Media formats: which extensions dsclean looks at and how their magic bytes read.

Discovery picks candidates by extension (case-insensitive); the checker then
confirms the real format from the first bytes with :func:`sniff`.
"""

from __future__ import annotations

IMAGE = "image"
AUDIO = "audio"

#: format name -> (kind, extensions)
FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "jpeg": (IMAGE, (".jpg", ".jpeg")),
    "png": (IMAGE, (".png",)),
    "gif": (IMAGE, (".gif",)),
    "bmp": (IMAGE, (".bmp",)),
    "tiff": (IMAGE, (".tif", ".tiff")),
    "webp": (IMAGE, (".webp",)),
    "ppm": (IMAGE, (".ppm", ".pgm")),  # Netpbm: PPM (colour) and PGM (grey), plain or raw
    "avif": (IMAGE, (".avif",)),  # AV1 in HEIF (ISOBMFF); Pillow decodes it
    "heif": (IMAGE, (".heic", ".heif")),  # HEVC in HEIF (ISOBMFF), phones' default; pillow-heif decodes it
    "jxl": (IMAGE, (".jxl",)),  # JPEG XL, bare codestream or ISOBMFF-style container; pillow-jxl-plugin decodes it
    "wav": (AUDIO, (".wav",)),
    "flac": (AUDIO, (".flac",)),
    "ogg": (AUDIO, (".ogg", ".opus", ".oga")),  # Ogg Vorbis, Ogg Opus (.opus), Ogg audio (.oga)
    "mp3": (AUDIO, (".mp3",)),
    # AAC: in an MPEG-4 audio file (ISOBMFF) or a raw ADTS stream. Not .mp4: a video container, its audio track
    # alone is not what a dataset of .mp4 files is about (docs/reference/formats.md)
    "m4a": (AUDIO, (".m4a",)),
    "aac": (AUDIO, (".aac",)),  # ADTS frames
}

EXT_TO_FORMAT: dict[str, str] = {ext: fmt for fmt, (_, exts) in FORMATS.items() for ext in exts}
MEDIA_EXTENSIONS: frozenset[str] = frozenset(EXT_TO_FORMAT)

#: torchvision's ``IMG_EXTENSIONS``, the files ``ImageFolder`` takes (no .gif); ``dsclean index --files imagefolder``
IMAGEFOLDER_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

#: how many leading bytes :func:`sniff` needs (an ISOBMFF ftyp box's first compatible brands included)
SNIFF_BYTES = 32

#: ISOBMFF (HEIF family) ftyp brands: which say AVIF, which HEVC-coded HEIF; the generic HEIF brands
#: (mif1, msf1, miaf) say HEIF unless an AVIF brand is among the compatible ones
_AVIF_BRANDS = frozenset({b"avif", b"avis"})
_HEIF_BRANDS = frozenset(
    {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1", b"miaf"}
)
#: ftyp brands of MPEG-4 files holding audio (a HEIF/AVIF brand among the compatible ones wins: an image)
_M4A_BRANDS = frozenset({b"M4A ", b"M4B ", b"M4P ", b"mp41", b"mp42", b"isom", b"iso2", b"dash"})
_JXL_CODESTREAM, _JXL_CONTAINER = b"\xff\x0a", b"\x00\x00\x00\x0cJXL \r\n\x87\n"

# Fixed magic prefixes, used both to sniff and to recognise a file truncated inside its magic.
# Every signature a format's specification allows and its parser handles (one test each in
# tests/scanning/test_signatures.py): TIFF 6.0 and BigTIFF in both byte orders; WAV's RIFF
# (little-endian), RIFX (big-endian) and RF64 are matched in :func:`sniff`.
_PREFIXES: dict[str, tuple[bytes, ...]] = {
    "jpeg": (b"\xff\xd8\xff",),
    "png": (b"\x89PNG\r\n\x1a\n",),
    "gif": (b"GIF87a", b"GIF89a"),
    "bmp": (b"BM",),
    "tiff": (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"),  # classic TIFF, BigTIFF
    "flac": (b"fLaC",),
    "ogg": (b"OggS",),
    "mp3": (b"ID3",),
}


_EXT_NO_DOT: dict[str, str] = {ext[1:]: fmt for ext, fmt in EXT_TO_FORMAT.items()}


def format_of_name(name: str) -> str | None:
    """The format a file name's extension claims (case-insensitive), or None if not media."""
    stem, dot, ext = name.rpartition(".")
    return _EXT_NO_DOT.get(ext.lower()) if dot and stem else None


def kind_of(fmt: str) -> str:
    return FORMATS[fmt][0]


def _is_mp3_frame_sync(head: bytes) -> bool:
    # MPEG audio frame header: 11 sync bits, a valid version, layer III/II/I, a valid bitrate index.
    if len(head) < 4 or head[0] != 0xFF or (head[1] & 0xE0) != 0xE0:
        return False
    version = (head[1] >> 3) & 0b11
    layer = (head[1] >> 1) & 0b11
    bitrate = head[2] >> 4
    srate = (head[2] >> 2) & 0b11
    return version != 0b01 and layer != 0 and bitrate not in (0, 15) and srate != 0b11


def sniff(head: bytes) -> str | None:
    """The format the first bytes of a file belong to, or None."""
    if head[:4] == b"RIFF" and len(head) >= 12:
        return {b"WAVE": "wav", b"WEBP": "webp"}.get(head[8:12])
    if head[:4] == b"RIFX" and head[8:12] == b"WAVE":
        return "wav"  # big-endian RIFF, which libsndfile reads
    if head[:4] == b"RF64" and head[8:12] == b"WAVE":
        return "wav"
    for fmt, prefixes in _PREFIXES.items():
        if any(head.startswith(p) for p in prefixes):
            return fmt
    if head[4:8] == b"ftyp":
        return _heif_brand(head)
    if head.startswith(_JXL_CODESTREAM) or head.startswith(_JXL_CONTAINER):
        return "jxl"
    if _is_mp3_frame_sync(head):
        return "mp3"
    if len(head) >= 7 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return "aac"  # ADTS: 12 sync bits, then MPEG version, layer 0 (MP3's layers are 1-3)
    if head[:1] == b"P" and head[1:2] in (b"1", b"2", b"3", b"4", b"5", b"6") and head[2:3].isspace():
        return "ppm"  # Netpbm magic: P1-P6 and whitespace
    return None


def _heif_brand(head: bytes) -> str | None:
    """``avif``, ``heif`` or ``m4a`` from the ftyp box's major brand and the compatible brands ``head`` holds."""
    size = int.from_bytes(head[:4], "big")
    brands = [head[8:12]] + [head[i : i + 4] for i in range(16, min(size, len(head)) - 3, 4)]
    if any(b in _AVIF_BRANDS for b in brands):
        return "avif"
    if any(b in _HEIF_BRANDS for b in brands):
        return "heif"
    return "m4a" if any(b in _M4A_BRANDS for b in brands) else None


def is_prefix_of_magic(head: bytes, fmt: str) -> bool:
    """True if ``head`` is a non-empty strict prefix of ``fmt``'s magic: a file cut inside its signature."""
    if not head:
        return False
    if fmt in ("wav", "webp"):
        magics = (b"RIFF", b"RIFX", b"RF64") if fmt == "wav" else (b"RIFF",)
        return len(head) < 12 and any(m.startswith(head[:4]) for m in magics)
    return any(len(head) < len(p) and p.startswith(head) for p in _PREFIXES.get(fmt, ()))
