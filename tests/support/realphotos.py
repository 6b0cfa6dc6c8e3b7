"""Real photographs shipped inside installed packages, and the edits that make near-duplicates.

Sources: scikit-image's bundled images (``skimage/data/*.png|jpg``: photos,
micrographs, textures) and matplotlib's sample data (``grace_hopper.jpg``, ...).
The files are read with Pillow straight from the package folders (nothing is
downloaded, scikit-image is not even imported). Large pictures are also cut into
quadrant tiles: four different scenes with the same content statistics, the
hardest negatives for a duplicate finder (four pieces of one gravel texture).
"""

from __future__ import annotations

import importlib.util
import io
import os

import numpy as np
from PIL import Image, ImageEnhance

SKIMAGE_FILES = (
    "astronaut.png",
    "brick.png",
    "camera.png",
    "cell.png",
    "chelsea.png",
    "clock_motion.png",
    "coffee.png",
    "coins.png",
    "grass.png",
    "gravel.png",
    "hubble_deep_field.jpg",
    "ihc.png",
    "microaneurysms.png",
    "moon.png",
    "motorcycle_left.png",
    "page.png",
    "retina.jpg",
    "rocket.jpg",
    "text.png",
    "horse.png",
    "logo.png",
)
MATPLOTLIB_FILES = ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png")
#: pictures also cut into four quadrant tiles (textures and busy photos)
TILED = ("brick.png", "grass.png", "gravel.png", "astronaut.png", "hubble_deep_field.jpg", "retina.jpg")
#: edits a near-duplicate finder must see through
EDITS = ("resize_half", "resize_odd", "recompress", "reencode", "crop", "crop_side", "brighten", "darken")


def _package_dir(name: str, *sub: str) -> str | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), *sub)
    return path if os.path.isdir(path) else None


def available() -> bool:
    return _package_dir("skimage", "data") is not None


def sources(max_side: int | None = None) -> dict[str, Image.Image]:
    """name -> RGB picture, every one a different scene (sorted by name); shrunk to ``max_side`` if given."""
    found: dict[str, Image.Image] = {}
    for pkg, sub, names in (
        ("skimage", ("data",), SKIMAGE_FILES),
        ("matplotlib", ("mpl-data", "sample_data"), MATPLOTLIB_FILES),
    ):
        folder = _package_dir(pkg, *sub)
        for name in names if folder else ():
            path = os.path.join(folder, name)
            if os.path.exists(path):
                with Image.open(path) as im:
                    found[name] = _rgb(im)
    for name in TILED:
        if name in found:
            im = found.pop(name)
            w, h = im.size
            for i, (x, y) in enumerate([(0, 0), (w // 2, 0), (0, h // 2), (w // 2, h // 2)]):
                found[f"{name}.tile{i}"] = im.crop((x, y, x + w // 2, y + h // 2))
    if max_side:
        for name, im in found.items():
            if max(im.size) > max_side:
                scale = max_side / max(im.size)
                found[name] = im.resize(
                    (max(1, round(im.width * scale)), max(1, round(im.height * scale))), Image.Resampling.LANCZOS
                )
    return dict(sorted(found.items()))


def _rgb(im: Image.Image) -> Image.Image:
    if im.mode in ("RGBA", "LA", "P"):
        im = im.convert("RGBA")
        canvas = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return Image.alpha_composite(canvas, im).convert("RGB")
    return im.convert("RGB")


def encode(im: Image.Image, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **params)
    return buf.getvalue()


def edit(im: Image.Image, how: str, seed: int = 0) -> tuple[Image.Image, str]:
    """One edited copy of ``im`` and the format to store it in (``JPEG``/``PNG``).

    Crops take at most 5% off each of the width and height (``crop``: split between
    the two sides at random; ``crop_side``: all from one random side).
    """
    rng = np.random.default_rng(seed)
    w, h = im.size
    if how == "resize_half":
        return im.resize((max(1, w // 2), max(1, h // 2)), Image.Resampling.LANCZOS), "PNG"
    if how == "resize_odd":  # shrink, different aspect, bilinear
        return im.resize((max(1, int(w * 0.7)), max(1, int(h * 0.8))), Image.Resampling.BILINEAR), "JPEG"
    if how == "recompress":
        return im, "JPEG50"
    if how == "reencode":
        return im, "JPEG"  # sources are stored as PNG: this is the PNG -> JPEG copy
    if how == "crop":
        dx, dy = rng.uniform(0.02, 0.05) * w, rng.uniform(0.02, 0.05) * h
        fx, fy = rng.uniform(0, 1), rng.uniform(0, 1)
        box = (int(dx * fx), int(dy * fy), w - int(dx * (1 - fx)), h - int(dy * (1 - fy)))
        return im.crop(box), "PNG"
    if how == "crop_side":
        side = int(rng.integers(4))
        cut = rng.uniform(0.03, 0.05)
        box = [
            (int(cut * w), 0, w, h),
            (0, int(cut * h), w, h),
            (0, 0, w - int(cut * w), h),
            (0, 0, w, h - int(cut * h)),
        ][side]
        return im.crop(box), "JPEG"
    if how == "brighten":
        return ImageEnhance.Brightness(im).enhance(1.25), "PNG"
    if how == "darken":
        return ImageEnhance.Brightness(im).enhance(0.75), "JPEG"
    raise ValueError(how)


def file_bytes(im: Image.Image, fmt: str) -> tuple[bytes, str]:
    """Encoded bytes and extension for a format name from :func:`edit` (or ``PNG`` for originals)."""
    if fmt == "JPEG50":
        return encode(im, "JPEG", quality=50), ".jpg"
    if fmt == "JPEG":
        return encode(im, "JPEG", quality=90), ".jpg"
    return encode(im, "PNG", compress_level=1), ".png"


def write_set(folder, seed: int = 0, max_side: int | None = None) -> dict[tuple[str, str], str]:
    """Originals (PNG) under ``folder/train/orig``, every edit under ``train/<edit>`` or ``val/<edit>``.

    Returns (root, relative path) -> source name, for :func:`score`. Two edits
    (``crop``, ``brighten``) go to the ``val`` split: those groups leak.
    """
    truth: dict[tuple[str, str], str] = {}
    for i, (name, im) in enumerate(sources(max_side).items()):
        stem = name.replace(".", "_")
        data, ext = file_bytes(im, "PNG")
        truth[_put(folder, "train", f"orig/{stem}{ext}", data)] = name
        for how in EDITS:
            copy, fmt = edit(im, how, seed=seed * 1000 + i)
            data, ext = file_bytes(copy, fmt)
            split = "val" if how in ("crop", "brighten") else "train"
            truth[_put(folder, split, f"{how}/{stem}{ext}", data)] = name
    return truth


def _put(folder, split: str, rel: str, data: bytes) -> tuple[str, str]:
    path = os.path.join(str(folder), split, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return os.path.join(str(folder), split), rel


def score(groups: list[list[tuple[str, str]]], truth: dict[tuple[str, str], str]) -> dict:
    """Recall: edited copies grouped with their original. False groups: groups holding two sources."""
    group_of = {m: g for g, members in enumerate(groups) for m in members}
    originals = {src: key for key, src in truth.items() if key[1].startswith("orig/")}
    copies = [(key, src) for key, src in truth.items() if not key[1].startswith("orig/")]
    found = sum(key in group_of and group_of.get(originals[src]) == group_of[key] for key, src in copies)
    missed: dict[str, int] = {}
    for key, src in copies:
        if not (key in group_of and group_of.get(originals[src]) == group_of[key]):
            edit_name = key[1].split("/")[0]
            missed[edit_name] = missed.get(edit_name, 0) + 1
    mixed = sum(len({truth[m] for m in members}) > 1 for members in groups)
    return {
        "copies": len(copies),
        "found": found,
        "recall": found / len(copies),
        "false_groups": mixed,
        "groups": len(groups),
        "sources": len(originals),
        "missed_by_edit": missed,
    }


#: textures: pictures whose perceptual hash is unstable (dups' second signal, dsclean.quality.texture)
TEXTURES = ("brick.png", "grass.png", "gravel.png")
#: the wider edits of dups' second-signal benchmark: resized 40-90%, cropped 2-10%, recompressed
WIDE_EDITS = (
    "resize_40",
    "resize_60",
    "resize_75",
    "resize_90",
    "crop_2",
    "crop_4",
    "crop_7",
    "crop_10",
    "crop_side_4",
    "crop_side_7",
    "crop_side_10",
    "jpeg_50",
)


def wide_edit(im: Image.Image, how: str, seed: int = 0) -> tuple[Image.Image, str]:
    """One copy of ``im`` for :data:`WIDE_EDITS` and the format to store it in.

    ``resize_P``: P% of each side (Lanczos, stored JPEG); ``crop_P``: P% of the width and of the
    height taken off, split between the two sides at random; ``crop_side_P``: P% off one random side.
    """
    rng = np.random.default_rng(seed)
    w, h = im.size
    kind, _, amount = how.rpartition("_")
    p = int(amount) / 100
    if kind == "resize":
        return im.resize((max(1, round(w * p)), max(1, round(h * p))), Image.Resampling.LANCZOS), "JPEG"
    if kind == "crop":
        fx, fy = rng.uniform(0.2, 0.8, 2)
        dx, dy = p * w, p * h
        return im.crop((round(dx * fx), round(dy * fy), w - round(dx * (1 - fx)), h - round(dy * (1 - fy)))), "PNG"
    if kind == "crop_side":
        cut = round(p * (w, h, w, h)[int(rng.integers(4))])
        side = int(rng.integers(4))
        return im.crop([(cut, 0, w, h), (0, cut, w, h), (0, 0, w - cut, h), (0, 0, w, h - cut)][side]), "PNG"
    if kind == "jpeg":
        return im, "JPEG50"
    raise ValueError(how)


def write_wide_set(
    folder, edits: tuple[str, ...] = WIDE_EDITS, only: tuple[str, ...] | None = None, max_side: int | None = None
) -> dict[tuple[str, str], str]:
    """Like :func:`write_set` with :data:`WIDE_EDITS` (or ``edits``), every copy in ``val`` (each one leaks).

    ``only``: the source names starting with one of these (e.g. :data:`TEXTURES`: their tiles).
    """
    truth: dict[tuple[str, str], str] = {}
    for i, (name, im) in enumerate(sources(max_side).items()):
        if only and not name.startswith(only):
            continue
        stem = name.replace(".", "_")
        data, ext = file_bytes(im, "PNG")
        truth[_put(folder, "train", f"orig/{stem}{ext}", data)] = name
        for k, how in enumerate(edits):
            copy, fmt = wide_edit(im, how, seed=i * 100 + k)
            data, ext = file_bytes(copy, fmt)
            truth[_put(folder, "val", f"{how}/{stem}{ext}", data)] = name
    return truth
