"""A small dataset with every kind of thing a report shows: broken files of each sort, hostile names,
audio, a dark picture, exact copies, a file directly in the root."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

from dsclean.hashing import content_hash_file
from support import synth
from support.files import write
from support.resultsgen import FACT_TYPES, add_facts

HOSTILE_JPG = "cats/<img src=x onerror=alert(1)>.jpg"
HOSTILE_PNG = 'dogs/"><svg onload=alert(2)>.png'
LATIN1 = b"cats/caf\xe9.jpg"  # not UTF-8


def make_report_tree(root: Path) -> dict[str, tuple[str, str | None]]:
    """Write the tree; returns {path: (expected status, expected reason)}."""
    expected: dict[str, tuple[str, str | None]] = {}

    def put(rel, data, status="ok", reason=None):
        write(root, rel, data)
        expected[os.fsdecode(rel)] = (status, reason)

    for i in range(4):
        put(f"cats/cat{i}.jpg", synth.jpeg(96, 72, seed=i))
        put(f"dogs/dog{i}.png", synth.png(64, 64, seed=10 + i))
    for i in range(3):
        put(f"birds/bird{i}.webp", synth.encode_image(synth.photo_like(80, 60, seed=20 + i), "WEBP"))
    put("birds/dark.jpg", synth.encode_image(Image.fromarray(np.full((48, 64, 3), 6, np.uint8)), "JPEG"))
    copy = synth.jpeg(64, 64, seed=99)
    put("cats/copy_a.jpg", copy)
    put("dogs/copy_b.jpg", copy)
    put("loose.jpg", synth.jpeg(40, 40, seed=7))
    put("cats/cut.jpg", synth.truncate(synth.jpeg(160, 120, seed=30), 0.5), "bad", "truncated")
    put("dogs/cut.png", synth.truncate(synth.png(120, 90, seed=31), 0.5), "bad", "truncated")
    put(
        "dogs/cut.bmp",
        synth.truncate(synth.encode_image(synth.photo_like(100, 80, seed=32), "BMP"), 0.6),
        "bad",
        "truncated",
    )
    put(HOSTILE_JPG, synth.truncate(synth.jpeg(120, 90, seed=33), 0.6), "bad", "truncated")
    put(HOSTILE_PNG, synth.png_break_crc(synth.png(48, 48, seed=34)), "bad", "corrupt")
    put(LATIN1, synth.truncate(synth.jpeg(64, 48, seed=35), 0.7), "bad", "truncated")
    put("cats/page.jpg", synth.HTML_PAGE, "bad", "not_media")
    put("cats/empty.jpg", b"", "bad", "empty")
    put("dogs/bomb.png", synth.png_bomb(), "bad", "decompression_bomb")
    put("dogs/really_png.jpg", synth.png(40, 40, seed=36), "warn", "extension_mismatch")
    tone = synth.tone(1.0, 16_000, 2)
    wav = synth.encode_audio(tone, 16_000, "WAV")
    put("audio/tone.wav", wav)
    put("audio/loud.flac", synth.encode_audio(np.clip(tone * 3, -1, 1), 16_000, "FLAC"))
    put("audio/cut.wav", synth.truncate(wav, 0.5), "bad", "truncated")
    put(
        "audio/cut.flac",
        synth.truncate(synth.encode_audio(synth.tone(2.0, 16_000, 1), 16_000, "FLAC"), 0.5),
        "bad",
        "truncated",
    )
    nan = synth.tone(0.5, 16_000, 1)
    nan[100:120] = np.nan
    put("audio/nan.wav", synth.encode_audio(nan, 16_000, "WAV", "FLOAT"), "bad", "invalid_samples")
    return expected


def facts_results(scanned, results: Path, columns: tuple[str, ...] | None = None) -> Path:
    """A copy of a scan's results with facts columns added: real content hashes, birds/dark.jpg darkest
    (flagged dark), audio/loud.flac clipped, everything else middling."""
    results.mkdir(parents=True)
    for name in ("scan_results.parquet", "scan_summary.json"):
        shutil.copy(scanned.quarantine / name, results / name)
    facts = {}
    for rel in scanned.expected:
        path = next((f / rel for f in (scanned.root, scanned.quarantine) if (f / rel).exists()), None)
        f = facts[rel] = {"content_hash": content_hash_file(path) if path else None}
        if rel.endswith((".jpg", ".png", ".webp", ".bmp")):
            f.update(brightness=0.5, contrast=0.2, entropy=7.0, sharpness=100.0, grayscale=False, orientation=1)
        else:
            f.update(rms=0.3, peak=0.6, clipped=0.0, dc_offset=0.0, silent_channels=0)
    facts["birds/dark.jpg"].update(brightness=0.02, flags=["dark", "low_information"])
    facts["audio/loud.flac"].update(clipped=0.25, flags=["clipped"])
    if columns:  # only these facts: drop the other fact columns the scan itself recorded
        path = str(results / "scan_results.parquet")
        table = pq.read_table(path)
        pq.write_table(
            table.drop_columns([c for c in FACT_TYPES if c in table.column_names and c not in columns]),
            path,
            compression="zstd",
        )
    add_facts(str(results / "scan_results.parquet"), facts, **({"columns": columns} if columns else {}))
    return results
