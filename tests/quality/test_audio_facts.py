"""Audio facts, streamed block by block, and each audio flag on generated sounds."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from support import synth
from support.files import write

from dsclean.quality import audio as A
from dsclean.quality import flags as F
from dsclean.quality.audio import AudioStats, audio_facts_from_path
from dsclean.quality.columns import FACT_COLUMNS, facts_table
from dsclean.quality.facts import Facts
from dsclean.quality.files import facts_from_path
from dsclean.quality.flags import FlagOptions, audio_flags


def _facts(tmp_path, data, rate=16_000, fmt="WAV", subtype="PCM_16"):
    path = write(tmp_path, "a." + fmt.lower(), synth.encode_audio(data, rate, fmt, subtype))
    return facts_from_path(str(path))


def test_streamed_equals_whole():
    x = synth.tone(1.0, 8000, channels=2, seed=1)
    whole = AudioStats(2, 8000)
    whole.add(x)
    blocks = AudioStats(2, 8000)
    for i in range(0, len(x), 777):
        blocks.add(x[i : i + 777])
    a, b = whole.result(), blocks.result()
    assert a.peak == b.peak and a.clipped == b.clipped and a.silent_channels == b.silent_channels
    assert a.rms == pytest.approx(b.rms) and a.dc_offset == pytest.approx(b.dc_offset, abs=1e-12)
    assert a.rms == pytest.approx(float(np.sqrt((x.astype(np.float64) ** 2).mean())))
    assert a.duration == pytest.approx(1.0)


def test_file_read_in_blocks_matches(tmp_path, monkeypatch):
    x = synth.tone(0.5, 16_000, channels=1, seed=2)
    path = write(tmp_path, "t.wav", synth.encode_audio(x, 16_000, "WAV", "FLOAT"))
    monkeypatch.setattr(A, "BLOCK_FRAMES", 1000)
    f = audio_facts_from_path(str(path))
    assert f.peak == pytest.approx(float(np.abs(x).max()))
    assert f.duration == pytest.approx(0.5)


def test_plain_tone_has_no_flags(tmp_path):
    assert _facts(tmp_path, synth.tone(0.5, channels=2)).facts.flags == []


@pytest.mark.parametrize(
    "make, flag",
    [
        (lambda: np.zeros((8000, 1), np.float32), F.SILENT),
        (lambda: np.stack([synth.tone(0.5)[:, 0], np.zeros(8000, np.float32)], axis=1), F.SILENT_CHANNEL),
        (lambda: np.clip(synth.tone(0.5) * 4, -1, 1), F.CLIPPED),
        (lambda: synth.tone(0.5) * 0.5 + 0.2, F.DC_OFFSET),
        (lambda: synth.tone(0.05), F.TOO_SHORT),
    ],
)
def test_each_audio_flag_on_generated_media(tmp_path, make, flag):
    assert flag in _facts(tmp_path, make()).facts.flags


def test_clipping_is_counted_per_sample_near_full_scale(tmp_path):
    x = synth.tone(0.5) * 0.5
    x[:100] = 1.0  # 100 of 8000 samples at full scale
    f = _facts(tmp_path, x).facts
    assert f.clipped == pytest.approx(100 / 8000)
    assert f.silent_channels == 0


def test_audio_thresholds_are_options():
    facts = A.AudioFacts(
        duration=0.05, peak=0.5, rms=0.0005, clipped=0.01, dc_offset=0.1, silent_channels=1, channels=1
    )
    assert set(audio_flags(facts)) == {F.TOO_SHORT, F.SILENT, F.CLIPPED, F.DC_OFFSET}
    loose = FlagOptions(too_short=0.01, silence=0.0001, clipped=0.05, dc_offset=0.2)
    assert audio_flags(facts, loose) == []


def test_fact_columns_match_the_record_and_the_contract():
    assert list(FACT_COLUMNS)[0] == "content_hash" and FACT_COLUMNS["phash"] == pa.uint64()
    table = facts_table(
        [
            Facts.of_audio(
                A.AudioFacts(duration=1.0, peak=0.5, rms=0.1, clipped=0.0, dc_offset=0.0, silent_channels=0, channels=1)
            ).row(),
            Facts().row(),
        ]
    )
    assert table.schema.names == list(FACT_COLUMNS)
    assert table.column("rms").to_pylist()[1] is None
