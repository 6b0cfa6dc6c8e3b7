"""Audio facts, computed streaming: peak, RMS, clipped fraction, DC offset, silent channels.

:class:`AudioStats` is fed the decoded blocks one at a time (the scan's check
already reads every frame in blocks; :func:`audio_facts_from_path` does the same
for files it reads itself), so memory is one block whatever the length.
Samples are floats in [-1, 1] as soundfile returns them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: frames per block when reading a file here (bounds memory to BLOCK_FRAMES x channels x 4 bytes)
BLOCK_FRAMES = 65536
#: a channel whose RMS is below this (-60 dBFS) is silent
SILENCE_RMS = 1e-3
#: bits of resolution assumed when the subtype has no integer sample size (float, lossy codecs)
_DEFAULT_BITS = 16
_SUBTYPE_BITS = {
    "PCM_S8": 8,
    "PCM_U8": 8,
    "PCM_16": 16,
    "PCM_24": 24,
    "PCM_32": 32,
    "ALAC_16": 16,
    "ALAC_20": 20,
    "ALAC_24": 24,
    "ALAC_32": 32,
    "DPCM_8": 8,
    "DPCM_16": 16,
}


@dataclass
class AudioFacts:
    """Level facts of a sound; None when not computed (see the facts schema, docs/reference/facts.md)."""

    duration: float | None = None  # seconds
    peak: float | None = None  # max abs sample, 0..1
    rms: float | None = None  # RMS over all channels, 0..1
    clipped: float | None = None  # fraction of samples at or within 1 LSB of full scale
    dc_offset: float | None = None  # mean sample value, max abs over channels
    silent_channels: int | None = None  # bitmask: bit c set when channel c's RMS < SILENCE_RMS
    channels: int | None = None


def clip_level(subtype: str | None) -> float:
    """Magnitude at or above which a sample counts as clipped: full scale less 2 LSB (the top code is 1 - 1 LSB)."""
    bits = _SUBTYPE_BITS.get(subtype or "", _DEFAULT_BITS)
    return 1.0 - 2.0 / (1 << (bits - 1))


class AudioStats:
    """Accumulate level facts over blocks of shape (frames, channels)."""

    def __init__(self, channels: int, sample_rate: int, subtype: str | None = None) -> None:
        self.channels, self.sample_rate = channels, sample_rate
        self._clip = clip_level(subtype)
        self._frames = 0
        self._peak = 0.0
        self._sum = np.zeros(channels, dtype=np.float64)
        self._sumsq = np.zeros(channels, dtype=np.float64)
        self._clipped = 0

    def add(self, block: np.ndarray) -> None:
        """Fold in one block of samples, shape (frames, channels) or (frames,) for mono: floats in
        [-1, 1], or integers at their type's full scale (int16: 32768), as soundfile reads them.

        A few passes over the block (min, max, sums): the scan runs this on every block it decodes.
        """
        b = np.asarray(block)
        if b.ndim == 1:
            b = b[:, None]
        if not b.size:
            return
        full = float(1 << (8 * b.dtype.itemsize - 1)) if b.dtype.kind == "i" else 1.0
        # one contiguous float32 row per channel: reductions along a row are fast, down a column slow
        ch = np.ascontiguousarray(b.T, dtype=np.float32)
        hi, lo = float(ch.max()), float(ch.min())
        if not (np.isfinite(hi) and np.isfinite(lo)):  # NaN/Inf in a float file: counted as 0 / full scale
            ch = np.nan_to_num(ch, nan=0.0, posinf=full, neginf=-full)
            hi, lo = float(ch.max()), float(ch.min())
        peak = max(hi, -lo) / full
        self._frames += b.shape[0]
        self._peak = max(self._peak, peak)
        for c, row in enumerate(ch):
            self._sum[c] += float(row.sum(dtype=np.float64)) / full
            self._sumsq[c] += float(np.dot(row, row)) / (full * full)
        if peak >= self._clip:  # only a block that reaches the clip level has clipped samples to count
            self._clipped += int(np.count_nonzero(np.abs(ch) >= self._clip * full))

    def result(self) -> AudioFacts:
        """The facts of everything added so far (all None but channels if nothing was)."""
        n = self._frames
        if not n:
            return AudioFacts(duration=0.0, channels=self.channels)
        per_channel_rms = np.sqrt(self._sumsq / n)
        silent = sum(1 << c for c in range(self.channels) if per_channel_rms[c] < SILENCE_RMS)
        return AudioFacts(
            duration=n / self.sample_rate if self.sample_rate else None,
            peak=self._peak,
            rms=float(np.sqrt(self._sumsq.sum() / (n * self.channels))),
            clipped=self._clipped / (n * self.channels),
            dc_offset=float(np.abs(self._sum / n).max()),
            silent_channels=int(silent),
            channels=self.channels,
        )


def audio_facts_from_path(path: str) -> AudioFacts:
    """Read a sound file block by block (soundfile) and return its level facts."""
    import soundfile as sf

    with sf.SoundFile(path) as f:
        stats = AudioStats(f.channels, f.samplerate, f.subtype)
        buf = np.empty((BLOCK_FRAMES, f.channels), dtype=np.float32)
        while True:
            n = f.read(out=buf, dtype="float32")
            n = n.shape[0] if hasattr(n, "shape") else int(n)
            if n <= 0:
                break
            stats.add(buf[:n])
            if n < BLOCK_FRAMES:
                break
        return stats.result()
