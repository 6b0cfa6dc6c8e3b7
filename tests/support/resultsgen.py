"""Results tables with the facts columns of FACTS.md, for report tests and benchmarks.

The scan records facts from its own decode; these helpers set chosen values (with
the Arrow types of :data:`dsclean.quality.columns.FACT_COLUMNS`), so the report's
facts-based sections can be tested against exact tables:

- :func:`add_facts` rewrites a real scan's results with chosen facts per path;
- :func:`synthetic_results` writes a large generated table (1M rows in seconds)
  for ``scripts/bench_report.py``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsclean.quality.columns import FACT_COLUMNS

#: FACTS.md: column -> Arrow type (the one definition, dsclean.quality.columns)
FACT_TYPES = FACT_COLUMNS


def add_facts(results: str, facts: dict[str, dict], columns: tuple[str, ...] = tuple(FACT_TYPES)) -> None:
    """Set ``columns`` of a results file in place (added, or replaced where the scan wrote them);
    ``facts[path][column]`` gives values (others null)."""
    table = pq.read_table(results)
    paths = [os.fsdecode(p) for p in table["path"].to_pylist()]
    for col in columns:
        values = [facts.get(p, {}).get(col) for p in paths]
        field, array = pa.field(col, FACT_TYPES[col]), pa.array(values, FACT_TYPES[col])
        if col in table.column_names:
            table = table.set_column(table.column_names.index(col), field, array)
        else:
            table = table.append_column(field, array)
    pq.write_table(table, results, compression="zstd")


REASONS = {  # reason -> (status, share of problems, a decoder message)
    "truncated": ("bad", 0.40, "JPEG decode: Premature end of JPEG file"),
    "corrupt": ("bad", 0.25, "JPEG decode: Corrupt JPEG data: 412 extraneous bytes before marker 0xd9"),
    "not_media": (
        "bad",
        0.10,
        "content is not jpeg: it is an HTML page titled '404 Not Found' — the server sent an error page instead of the file: fetch it again (check the URL, the credentials)",
    ),
    "empty": ("bad", 0.05, "file is 0 bytes"),
    "extension_mismatch": ("warn", 0.15, "content is png, extension says jpeg"),
    "changed": ("warn", 0.05, "file changed or disappeared while being checked; scan again later"),
}


def synthetic_results(
    path: str,
    root: str,
    rows: int,
    problems: int,
    classes: int = 1000,
    audio_share: float = 0.1,
    dup_share: float = 0.01,
    seed: int = 0,
) -> pa.Table:
    """Write a results table of ``rows`` files (``problems`` of them bad/warn) with every facts column."""
    rng = np.random.default_rng(seed)
    idx = np.arange(rows)
    is_audio = rng.random(rows) < audio_share
    cls = rng.zipf(1.3, rows) % classes  # imbalanced, as real class counts are
    ext = np.where(is_audio, ".wav", ".jpg")
    paths = [f"class_{c:04d}/{'a' if a else 'i'}{i:08d}{e}".encode() for c, a, i, e in zip(cls, is_audio, idx, ext)]
    status = np.full(rows, "ok", dtype=object)
    reason = np.full(rows, None, dtype=object)
    detail = np.full(rows, "", dtype=object)
    bad_rows = rng.choice(rows, size=problems, replace=False)
    names = list(REASONS)
    picks = rng.choice(len(names), size=problems, p=[REASONS[n][1] for n in names])
    for r, k in zip(bad_rows, picks):
        st, _, msg = REASONS[names[k]]
        status[r], reason[r], detail[r] = st, names[k], msg
    size = np.exp(rng.normal(11.5, 1.0, rows)).astype(np.int64)
    width = np.where(is_audio, 0, rng.choice([224, 256, 320, 480, 512, 640, 800, 1024, 1920], rows))
    height = np.where(is_audio, 0, (width * rng.choice([0.5625, 0.75, 1.0, 1.333], rows)).astype(np.int64))
    rate = np.where(is_audio, rng.choice([8000, 16000, 22050, 44100, 48000], rows), 0)
    duration = np.where(is_audio, np.exp(rng.normal(1.0, 1.0, rows)), np.nan)
    hashes = rng.integers(0, 256, (rows, 16), dtype=np.uint8)
    dups = rng.choice(rows, size=int(rows * dup_share), replace=False)
    hashes[dups] = hashes[rng.choice(rows, size=len(dups))]  # copies of other files
    img, aud = ~is_audio, is_audio
    flags = [None] * rows
    for r in rng.choice(rows, size=rows // 50, replace=False):
        flags[r] = [
            str(
                rng.choice(
                    ["dark", "bright", "low_information", "blurry", "tiny", "odd_aspect"]
                    if img[r]
                    else ["silent", "clipped", "too_short"]
                )
            )
        ]

    def masked(values, mask, typ):
        return pa.array(values, typ, mask=~mask)

    columns = {
        "path": pa.array(paths, pa.binary()),
        "kind": pa.array(np.where(is_audio, "audio", "image")),
        "status": pa.array(status.tolist(), pa.string()),
        "reason": pa.array(reason.tolist(), pa.string()),
        "detail": pa.array(detail.tolist(), pa.string()),
        "size": pa.array(size),
        "mtime_ns": pa.array(np.full(rows, 1_700_000_000_000_000_000, dtype=np.int64)),
        "format": pa.array(np.where(is_audio, "wav", "jpeg")),
        "width": masked(width.astype(np.int32), img, pa.int32()),
        "height": masked(height.astype(np.int32), img, pa.int32()),
        "mode": pa.array(np.where(is_audio, None, "RGB").tolist(), pa.string()),
        "frames": pa.array(
            np.where(is_audio, (np.nan_to_num(duration) * np.where(rate > 0, rate, 1)).astype(np.int64), 1)
        ),
        "sample_rate": masked(rate.astype(np.int32), aud, pa.int32()),
        "channels": masked(np.ones(rows, dtype=np.int32), aud, pa.int32()),
        "duration": masked(np.nan_to_num(duration), aud, pa.float64()),
        "subtype": pa.array(np.where(is_audio, "PCM_16", None).tolist(), pa.string()),
        "content_hash": pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(16), rows, [None, pa.py_buffer(hashes.tobytes())]
        ),
        "phash": pa.array(rng.integers(0, 2**63, rows, dtype=np.uint64)),
        "brightness": masked(rng.beta(5, 5, rows).astype(np.float32), img, pa.float32()),
        "contrast": masked(rng.beta(3, 8, rows).astype(np.float32), img, pa.float32()),
        "entropy": masked((8 * rng.beta(8, 2, rows)).astype(np.float32), img, pa.float32()),
        "sharpness": masked(np.exp(rng.normal(5, 1.5, rows)).astype(np.float32), img, pa.float32()),
        "grayscale": masked(rng.random(rows) < 0.02, img, pa.bool_()),
        "orientation": masked(rng.choice([1, 1, 1, 1, 6, 8], rows).astype(np.int8), img, pa.int8()),
        "peak": masked(rng.beta(8, 2, rows).astype(np.float32), aud, pa.float32()),
        "rms": masked(rng.beta(2, 8, rows).astype(np.float32), aud, pa.float32()),
        "clipped": masked((rng.random(rows) ** 20).astype(np.float32), aud, pa.float32()),
        "dc_offset": masked(rng.normal(0, 0.01, rows).astype(np.float32), aud, pa.float32()),
        "silent_channels": masked(np.zeros(rows, dtype=np.int32), aud, pa.int32()),
        "flags": pa.array(flags, pa.list_(pa.string())),
    }
    table = pa.table(columns)
    meta = {"root": root, "shard": None, "options": json.dumps({"max_pixels": 89_478_485, "timeout": 60.0})}
    table = table.replace_schema_metadata({"dsclean": json.dumps(meta)})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pq.write_table(table, path, compression="zstd", row_group_size=65_536)
    return table
