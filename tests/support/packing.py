"""Small datasets to pack: images and audio in classes, every file's bytes unique; folder comparison."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dsclean.index.build import build_index
from support import synth
from support.files import write


def make_media(root: Path, n_images: int = 12, n_audio: int = 4, seed: int = 0, odd_name: bool = True) -> list[str]:
    """Write a labelled tree (classes cats, dogs, speech); returns the relative paths written."""
    rels = []
    for i in range(n_images):
        cls = ("cats", "dogs")[i % 2]
        if i % 4 == 3:
            rel, data = f"{cls}/img{i:03d}.png", synth.png(20 + i, 16, seed=seed + i)
        elif i % 4 == 2:
            rel, data = f"{cls}/sub/img{i:03d}.JPEG", synth.jpeg(24, 20 + i, seed=seed + i)
        else:
            rel, data = f"{cls}/img{i:03d}.jpg", synth.jpeg(24 + i, 18, seed=seed + i)
        write(root, rel, data)
        rels.append(rel)
    for i in range(n_audio):
        fmt, ext = (("WAV", "wav"), ("FLAC", "flac"))[i % 2]
        rel = f"speech/tone{i:03d}.{ext}"
        write(root, rel, synth.encode_audio(synth.tone(0.05 + 0.01 * i, 8000, seed=seed + i), 8000, fmt))
        rels.append(rel)
    if odd_name:  # a non-UTF-8 name, and a PNG saved under .jpg
        write(root, b"cats/caf\xe9.jpg", synth.jpeg(20, 20, seed=seed + 99))
        write(root, "dogs/really_a_png.jpg", synth.png(18, 18, seed=seed + 98))
        rels += [os.fsdecode(b"cats/caf\xe9.jpg"), "dogs/really_a_png.jpg"]
    return rels


def make_indexed(tmp_path: Path, name: str = "data", **kw) -> tuple[Path, str]:
    """A tree and its Arrow index (no scan: magic bytes only)."""
    root = tmp_path / name
    make_media(root, **kw)
    index = str(tmp_path / f"{name}.arrow")
    build_index(str(root), index)
    return root, index


def folder_digests(folder: Path, skip: tuple[str, ...] = (".dsclean.lock",)) -> dict[str, str]:
    """{file name: sha256} of the files directly in ``folder`` (lock files left out)."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if name in skip or name.startswith(".dsclean.part-"):
            continue
        out[name] = hashlib.sha256(Path(folder, name).read_bytes()).hexdigest()
    return out
