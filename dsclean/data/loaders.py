"""Default sample loaders: images as PIL RGB (torchvision's rule), audio as (tensor, rate).

Each takes a path, or a binary file object (a packed set's samples are decoded from memory).
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

import numpy as np
import torch

from ..openfile import open_regular_file
from ..reasons import LENIENT

#: Pillow modes holding more than 8 bits per sample, which ``convert("RGB")`` clips (every value above 255 becomes
#: white: a 16-bit greyscale PNG comes out ~99.6% white) instead of scaling
HIGH_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I;16S", "I;16BS", "I;16LS", "I;32", "I;32B", "I", "F"})


def to_rgb(img):
    """``img.convert("RGB")``, except that an image of more than 8 bits per sample is *scaled* to 8 bits first.

    The rule (docs/guides/consistency.md): 16-bit samples (``I;16*``) keep their high byte (``v >> 8``, i.e.
    ``v / 257`` rounded down: 0 -> 0, 65535 -> 255); 32-bit integer samples (``I``, ``I;32*``) are the same
    when they fit in 16 bits (a 16-bit PNG or TIFF Pillow widened to ``I``), else they keep their top 8 bits
    (``v >> 24``, negatives clipped to 0); float samples (``F``) are taken as 0..1 when they all lie there,
    else as 0..65535 (NaN -> 0). Pillow already reduces 16-bit RGB(A) PNGs to 8 bits by their high byte. An
    8-bit image is exactly ``convert("RGB")``: the same bytes.
    """
    from PIL import Image

    if img.mode not in HIGH_BIT_MODES:
        return img.convert("RGB")
    a = np.asarray(img)
    if a.dtype.kind == "f":
        a = np.nan_to_num(a.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        top = 1.0 if a.size == 0 or (a.min() >= 0.0 and a.max() <= 1.0) else 65535.0
        grey = np.clip(np.floor(a / top * 255.0 + 0.5), 0, 255).astype(np.uint8)
    else:
        a = np.clip(a.astype(np.int64), 0, 0xFFFFFFFF)  # negative samples (I;16S, I) clip to black
        wide = not img.mode.startswith("I;16") and a.size and int(a.max()) > 0xFFFF
        grey = (a >> (24 if wide else 8)).astype(np.uint8)
    return Image.fromarray(grey, "L").convert("RGB")


def pil_loader(path: str | BinaryIO, *, exif: bool = False):
    """torchvision's default (open with Pillow, convert to RGB, forcing the decode here), with 16/32-bit images
    scaled to 8 bits (:func:`to_rgb`) instead of clipped white; ``exif=True`` (an index of ``scan --exif apply``)
    first turns the image as its EXIF orientation says (``ImageOps.exif_transpose``)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        return _finish(open_image(path), exif)
    with open_regular_file(path) as f:  # a FIFO in the dataset is refused, never waited on
        return _finish(open_image(f), exif)


def _finish(img, exif: bool):
    if exif:
        from PIL import ImageOps

        img = ImageOps.exif_transpose(img)
    return to_rgb(img)


_PLUGINS_TRIED = False


def open_image(f: BinaryIO):
    """``Image.open``, and for a format Pillow only reads through an installed plugin (HEIF/HEIC:
    ``pillow-heif``, JPEG XL: ``pillow-jxl-plugin``, the extras ``dsclean[heif]``/``[jxl]``), the
    plugin registered on the first file Pillow cannot identify: nothing is imported for other sets."""
    global _PLUGINS_TRIED
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(f)
    except UnidentifiedImageError:
        if _PLUGINS_TRIED:
            raise
        _PLUGINS_TRIED = True
        import importlib
        import importlib.util

        registered = False
        for module in ("pillow_heif", "pillow_jxl"):  # importing pillow_jxl registers it; pillow_heif is asked to
            if importlib.util.find_spec(module) is not None:
                plugin = importlib.import_module(module)
                if module == "pillow_heif":
                    plugin.register_heif_opener()
                registered = True
        if not registered:
            raise
        f.seek(0)
        return Image.open(f)


def exif_pil_loader(path: str | BinaryIO):
    """:func:`pil_loader` applying the EXIF orientation: the default image loader of a ``scan --exif apply`` index."""
    return pil_loader(path, exif=True)


def lenient_pil_loader(path: str | BinaryIO):
    """:func:`pil_loader`, but a JPEG Pillow refuses (cut short: "image file is truncated") is decoded the way
    ``scan --lenient`` accepted it: libjpeg-turbo in its recovering mode, the missing rows grey.

    The default image loader of an index built with ``--include-warn truncated`` (or ``corrupt``) only:
    nothing global changes (Pillow's ``LOAD_TRUNCATED_IMAGES`` stays as it is).
    """
    return _lenient(path, exif=False)


def _lenient(path, *, exif: bool):
    try:
        return pil_loader(path, exif=exif)
    except OSError:
        if isinstance(path, (str, bytes, os.PathLike)):
            with open_regular_file(path) as f:
                data = f.read()
        else:
            path.seek(0)
            data = path.read()
        if data[:2] != b"\xff\xd8":  # not a JPEG: Pillow's error stands
            raise
        import simplejpeg
        from PIL import Image

        img = Image.fromarray(simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False))
        if exif:  # the orientation tag sits in the header, which Pillow still reads
            from PIL import ImageOps

            orientation = Image.open(io.BytesIO(data)).getexif().get(0x0112)
            if orientation in range(2, 9):
                img.info["exif"] = Image.Exif()
                img.getexif()[0x0112] = orientation
                img = ImageOps.exif_transpose(img)
        return img


#: audio formats libsndfile has no decoder for: the default audio loader reads them through PyAV (FFmpeg,
#: ``dsclean[av]``), the decoder the scan checked them with
PYAV_FORMATS = frozenset({"m4a", "aac"})


def audio_loader(path: str | BinaryIO) -> tuple[torch.Tensor, int]:
    """``(float32 tensor shaped (channels, frames), sample_rate)`` via soundfile; AAC (``.m4a``, ADTS ``.aac``),
    which libsndfile cannot decode, via PyAV (by content, not by name)."""
    if isinstance(path, (str, bytes, os.PathLike)):
        with open_regular_file(path) as f:  # (libsndfile's own open would block on a FIFO)
            return _pyav_audio(f) if _needs_pyav(f) else soundfile_loader(f)
    return _pyav_audio(path) if _needs_pyav(path) else soundfile_loader(path)


def soundfile_loader(path: str | BinaryIO) -> tuple[torch.Tensor, int]:
    """``soundfile.read(f, dtype="float32", always_2d=True)`` as ``(tensor (channels, frames), rate)``."""
    import soundfile

    if isinstance(path, (str, bytes, os.PathLike)):
        with open_regular_file(path) as f:
            data, rate = soundfile.read(f, dtype="float32", always_2d=True)
    else:
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.T)), int(rate)


def _needs_pyav(f: BinaryIO) -> bool:
    """The file's first bytes are a format in :data:`PYAV_FORMATS` (the position is left where it was)."""
    from ..formats import SNIFF_BYTES, sniff

    if not f.seekable():
        return False
    at = f.tell()
    head = f.read(SNIFF_BYTES)
    f.seek(at)
    return sniff(head) in PYAV_FORMATS


def _pyav_audio(f: BinaryIO) -> tuple[torch.Tensor, int]:
    out = pyav_loader(f)
    if out is None:
        raise ValueError("no audio frames")
    return out


def pyav_loader(f: BinaryIO):
    """FFmpeg through PyAV: every frame of the first audio stream as float32, ``(tensor (channels, frames), rate)``,
    or None when it decodes to nothing."""
    import av

    with av.open(f, "r") as container:
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="fltp")  # planar float: (channels, samples) per frame
        parts, rate = [], stream.codec_context.sample_rate
        for frame in container.decode(stream):
            for out in resampler.resample(frame):
                parts.append(out.to_ndarray())
        for out in resampler.resample(None):
            parts.append(out.to_ndarray())
    if not parts:
        return None
    return torch.from_numpy(np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)), int(rate)


DEFAULT_LOADERS = {"image": pil_loader, "audio": audio_loader}
#: the default loaders of an index that ships warnings scan --lenient accepted (``meta["include_warn"]``)
LENIENT_LOADERS = {"image": lenient_pil_loader, "audio": audio_loader}


def lenient_exif_pil_loader(path: str | BinaryIO):
    """:func:`lenient_pil_loader` applying the EXIF orientation (``scan --exif apply``)."""
    return _lenient(path, exif=True)


def default_loaders(meta: dict) -> dict:
    """The default loaders of an index from its metadata: lenient when it ships what ``scan --lenient`` accepted
    (``include_warn`` truncated/corrupt), EXIF-applying when it was built from a ``scan --exif apply``
    (``meta["exif"] == "apply"``)."""
    lenient = bool(set(meta.get("include_warn") or ()) & LENIENT)
    exif = meta.get("exif") == "apply"
    image = {
        (False, False): pil_loader,
        (True, False): lenient_pil_loader,
        (False, True): exif_pil_loader,
        (True, True): lenient_exif_pil_loader,
    }[(lenient, exif)]
    return {"image": image, "audio": audio_loader}
