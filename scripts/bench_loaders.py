#!/usr/bin/env python3
"""Benchmark: what each loader profile (``scan --loader NAME``) adds to the check, per file and format.

Generates valid files of each format (photo-like 640x480 JPEG and PNG; 5 s mono 16 kHz FLAC, MP3 and WAV),
then times, in this one process, best of --repeats, ``dsclean.scanning.check.check_bytes`` over the files'
bytes (in memory: no disk in the measure) with:

- ``CheckOptions(loaders=())``: the check alone, which is what ``--loader pillow`` (the default) runs: the
  baseline of every ratio;
- ``CheckOptions(loaders=(NAME,))`` for every installed profile of the format's kind (a profile whose
  library is missing is listed as such). A profile's cost includes the reference decode it is compared with
  (pillow for images, soundfile for audio), run once per file whatever the number of profiles.

Prints a Markdown section (command, machine, date, table of ms per file and the ratio to the check alone):
BENCHMARKS.md "Loader profiles" holds the last run. Usage: ``PYTHONPATH=. python scripts/bench_loaders.py [--files 40]``.
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from support.loadermedia import pyav_audio  # noqa: E402
from support.synth import encode_image, photo_like  # noqa: E402

from dsclean.errors import UserError  # noqa: E402
from dsclean.loaders.profiles import PROFILES, require  # noqa: E402
from dsclean.scanning.check import CheckOptions, check_bytes  # noqa: E402


def files(n: int) -> dict[str, tuple[str, list[bytes]]]:
    """format -> (kind, the files' bytes)"""
    images = [photo_like(640, 480, seed=i) for i in range(n)]
    out = {
        "jpeg": ("image", [encode_image(im, "JPEG", quality=90) for im in images]),
        "png": ("image", [encode_image(im, "PNG") for im in images]),
    }
    out["flac"] = ("audio", [pyav_audio("flac", "flac", 16000, seconds=5.0)] * n)
    out["mp3"] = ("audio", [pyav_audio("mp3", "mp3", 16000, seconds=5.0, sample_format="fltp")] * n)
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, (np.sin(np.arange(80000) / 10) * 0.3).astype("float32"), 16000, format="WAV", subtype="PCM_16")
    out["wav"] = ("audio", [buf.getvalue()] * n)
    return out


def best(data: list[bytes], ext: str, options: CheckOptions, repeats: int) -> float:
    """Best seconds per file over ``repeats`` passes (one warm-up pass first: imports, caches)."""
    for d in data[:2]:
        check_bytes(d, f"x.{ext}", options)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for d in data:
            check_bytes(d, f"x.{ext}", options)
        times.append((time.perf_counter() - t) / len(data))
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    ext = {"jpeg": "jpg", "png": "png", "flac": "flac", "mp3": "mp3", "wav": "wav"}
    rows = []
    for fmt, (kind, data) in files(args.files).items():
        base = best(data, ext[fmt], CheckOptions(loaders=()), args.repeats)
        rows.append((fmt, "check alone (= --loader pillow / soundfile)", f"{base * 1e3:.2f}", "1.00x"))
        for name, p in PROFILES.items():
            if p.kind != kind or p.reference:
                continue
            try:
                require([name])
            except UserError:
                rows.append((fmt, f"--loader {name}", "not installed", "-"))
                continue
            t = best(data, ext[fmt], CheckOptions(loaders=(name,)), args.repeats)
            rows.append((fmt, f"--loader {name}", f"{t * 1e3:.2f}", f"{t / base:.2f}x"))
    print("## Loader profiles: the cost of `scan --loader NAME` per file\n")
    print(
        f"Command: `PYTHONPATH=. python scripts/bench_loaders.py --files {args.files} --repeats {args.repeats}` "
        f"({datetime.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; one process, files in memory, best of {args.repeats})\n"
    )
    print("| format | what runs | ms per file | vs the check alone |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
