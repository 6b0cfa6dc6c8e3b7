"""What the FLAC rules cost: the frame-sequence walk, and the STREAMINFO MD5 (`scan --flac-md5`).

Ratios against a baseline in the same run, on the same files, CPU time (process_time), best of
ROUNDS interleaved rounds:
- sequence walk: the whole check with the walk against the same check with the walk switched off;
- MD5: the check with ``flac_md5=True`` against without, and MD5 alone over the decoded samples
  against the check (the floor any in-pass MD5 can reach).

    python scripts/bench_flac.py [--files 40] [--seconds 10] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import platform
import time

import numpy as np
import soundfile as sf

from dsclean.scanning.check import CheckOptions, check_bytes
from dsclean.scanning.formats import flac


def music_like(seconds: float, seed: int) -> np.ndarray:
    """Two tones and a little noise, stereo: compresses like music (about 60% of PCM), not like noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(44100 * seconds)) / 44100
    f = 220 * (1 + seed % 7)
    return np.stack(
        [
            0.3 * np.sin(2 * np.pi * f * t) + 0.05 * rng.standard_normal(t.size),
            0.3 * np.sin(2 * np.pi * 1.5 * f * t) + 0.05 * rng.standard_normal(t.size),
        ],
        1,
    )


def encode(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, 44100, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def cpu(files: list[bytes], options: CheckOptions) -> float:
    t0 = time.process_time()
    for data in files:
        v = check_bytes(data, "a.flac", options)
        assert v.status == "ok", v.detail
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    signals = [music_like(a.seconds, i) for i in range(a.files)]
    files = [encode(x) for x in signals]
    pcm = [(x * 32767).astype("<i2").tobytes() for x in signals]
    walk = flac.sequence_finding
    plain, seq_off, md5_on, md5_alone = [], [], [], []
    for _ in range(a.rounds):
        plain.append(cpu(files, CheckOptions()))
        flac.sequence_finding = lambda *args: None
        try:
            seq_off.append(cpu(files, CheckOptions()))
        finally:
            flac.sequence_finding = walk
        md5_on.append(cpu(files, CheckOptions(flac_md5=True)))
        t0 = time.process_time()
        for b in pcm:
            hashlib.md5(b).digest()
        md5_alone.append(time.process_time() - t0)
    per = lambda xs: min(xs) / a.files * 1e3  # noqa: E731
    mb = sum(map(len, files)) / a.files / 1e6
    print(
        f"machine: {platform.machine()}, {platform.python_version()}; {a.files} FLAC files of {a.seconds:g} s "
        f"stereo 16-bit 44.1 kHz ({mb:.2f} MB each), best of {a.rounds} rounds, CPU ms per file"
    )
    print(f"check, sequence walk off:  {per(seq_off):7.2f} ms")
    print(f"check (default):           {per(plain):7.2f} ms   sequence walk costs {per(plain) / per(seq_off) - 1:+.1%}")
    print(f"check --flac-md5:          {per(md5_on):7.2f} ms   MD5 costs {per(md5_on) / per(plain) - 1:+.1%}")
    print(
        f"MD5 alone of the samples:  {per(md5_alone):7.2f} ms   = {per(md5_alone) / per(plain):.1%} of the check (the floor)"
    )


if __name__ == "__main__":
    main()
