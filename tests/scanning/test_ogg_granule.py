"""Ogg's last granule position against the Vorbis/Opus packets (formats/oggpackets.py), and a stream cut at a
page boundary. Valid files of two encoders (libsndfile, FFmpeg through PyAV) must stay ok."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile as sf
from support import audiogen as ag

from dsclean import reasons as R
from dsclean.scanning.check import CheckOptions, check_bytes
from dsclean.scanning.formats import ogg, oggpackets
from dsclean.scanning.formats.ogg import ogg_crc

RULE = "last granule position rule"


def encode(subtype: str, sr: int = 48000, seconds: float = 2.0, channels: int = 1, **kw) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, ag.signal(channels, seconds, sr), sr, format="OGG", subtype=subtype, **kw)
    return buf.getvalue()


def encode_pyav(codec: str, sr: int = 48000, seconds: float = 2.0) -> bytes:
    av = pytest.importorskip("av")
    buf = io.BytesIO()
    with av.open(buf, "w", format="ogg") as out:
        stream = out.add_stream(codec, rate=sr, layout="mono")
        x = np.ascontiguousarray(ag.signal(1, seconds, sr).T.astype(np.float32))
        for start in range(0, x.shape[1], 960):
            frame = av.AudioFrame.from_ndarray(x[:, start : start + 960], format="fltp", layout="mono")
            frame.sample_rate, frame.pts = sr, start
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def granule(data: bytes, page: int) -> int:
    pos, _ = ag.ogg_pages(data)[page]
    return struct.unpack_from("<q", data, pos + 6)[0]


def set_granule(data: bytes, page: int, value: int) -> bytes:
    """Rewrite one page's granule position and make its CRC good again."""
    pos, length = ag.ogg_pages(data)[page]
    out = bytearray(data)
    struct.pack_into("<q", out, pos + 6, value)
    struct.pack_into("<I", out, pos + 22, 0)
    struct.pack_into("<I", out, pos + 22, ogg_crc(bytes(out[pos : pos + length])))
    return bytes(out)


def accounted(data: bytes) -> oggpackets.Stream:
    """The packet accounting of a single-stream file."""
    s = oggpackets.Stream()
    for pos, _ in ag.ogg_pages(data):
        nseg = data[pos + 26]
        oggpackets.page(
            s, data, pos + 27 + nseg, data[pos + 27 : pos + 27 + nseg], struct.unpack_from("<q", data, pos + 6)[0]
        )
    return s


VALID = [
    ("VORBIS", 48000, 2.0, 1, {}),
    ("VORBIS", 44100, 3.0, 2, {"compression_level": 0.9}),
    ("VORBIS", 16000, 1.0, 1, {"compression_level": 0.0}),
    ("OPUS", 48000, 2.0, 2, {}),
    ("OPUS", 16000, 1.0, 1, {"compression_level": 0.5}),
    ("OPUS", 8000, 0.05, 1, {}),
]


@pytest.mark.parametrize("subtype,sr,seconds,channels,kw", VALID)
def test_valid_libsndfile_files_stay_ok_and_their_packets_hold_the_decoded_length(subtype, sr, seconds, channels, kw):
    data = encode(subtype, sr, seconds, channels, **kw)
    v = check_bytes(data, "a.ogg", CheckOptions())
    assert (v.status, v.reason) == (R.OK, None), v.detail
    s = accounted(data)
    assert s.codec == subtype.lower()
    decoded = sf.info(io.BytesIO(data)).frames
    if subtype == "VORBIS":  # the packets' samples are the decoded length (the last page trims the padding)
        assert s.granule == decoded and s.offset == 0 and s.total - s.page_samples <= decoded <= s.total
    else:  # Opus decodes at 48 kHz: granule - pre-skip samples, resampled to the file's rate by libsndfile
        assert s.granule - s.pre_skip == pytest.approx(decoded * 48000 / sr, abs=48000 / sr)
        assert s.total - s.page_samples <= s.granule <= s.total


def test_valid_ffmpeg_opus_files_stay_ok():
    data = encode_pyav("libopus")  # this FFmpeg has no Vorbis encoder but its experimental one
    assert accounted(data).codec == "opus"
    v = check_bytes(data, "a.ogg", CheckOptions())
    assert (v.status, v.reason) == (R.OK, None), v.detail


@pytest.mark.parametrize("subtype", ["VORBIS", "OPUS"])
def test_a_last_granule_past_the_packets_is_truncated(subtype):
    data = encode(subtype)
    last = len(ag.ogg_pages(data)) - 1
    s = accounted(data)
    past = granule(data, last) + 700 - (s.offset + s.total)  # libsndfile's Opus files trim their end already
    assert 0 < past <= 700
    damaged = set_granule(data, last, granule(data, last) + 700)
    [finding] = [f for f in ogg.walk(damaged) if RULE in f.detail]
    assert finding.reason == R.TRUNCATED and f"promises {past} samples more than its packets hold" in finding.detail
    v = check_bytes(damaged, "a.ogg", CheckOptions())
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED) and RULE in v.detail


@pytest.mark.parametrize("subtype", ["VORBIS", "OPUS"])
def test_end_trimming_within_the_last_page_is_fine(subtype):
    data = encode(subtype)
    last = len(ag.ogg_pages(data)) - 1
    trimmed = set_granule(data, last, granule(data, last) - 300)
    assert ogg.walk(trimmed) == []
    assert check_bytes(trimmed, "a.ogg", CheckOptions()).status == R.OK


def test_trimming_more_than_the_last_page_is_corrupt():
    data = encode("OPUS", seconds=3.0)
    first_audio = 2  # OpusHead, OpusTags, then audio
    # the first audio page says the stream starts 200000 samples later: the last page would trim them all
    damaged = set_granule(data, first_audio, granule(data, first_audio) + 200000)
    # the walk reports the granule going back (page 3) and stops there; the rule itself, on the same stream:
    [finding] = oggpackets.findings({1: accounted(damaged)}, {1: True})
    assert finding.reason == R.CORRUPT and "trims 2001" in finding.detail and RULE in finding.detail
    assert check_bytes(damaged, "a.ogg", CheckOptions()).status == R.BAD


def test_an_opus_granule_below_the_pre_skip_is_corrupt():
    data = encode("OPUS", seconds=0.05)  # one audio page: any end trimming of it is allowed, not below pre-skip
    last = len(ag.ogg_pages(data)) - 1
    s = accounted(data)
    damaged = set_granule(data, last, s.pre_skip - 10)
    [finding] = [f for f in ogg.walk(damaged) if RULE in f.detail]
    assert finding.reason == R.CORRUPT and "below the pre-skip" in finding.detail


def test_an_opus_stream_cut_at_a_page_boundary_is_truncated():
    data = encode("OPUS", seconds=3.0)
    last, _ = ag.ogg_pages(data)[-1]
    v = check_bytes(data[:last], "a.opus", CheckOptions())
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED) and "end-of-stream flag" in v.detail


def test_a_damaged_setup_header_leaves_the_rule_out_without_failing():
    data = bytearray(encode("VORBIS"))
    pos, length = ag.ogg_pages(bytes(data))[1]  # comment and setup headers
    rng = np.random.default_rng(3)
    for _ in range(20):
        out = bytearray(data)
        at = int(rng.integers(pos + 40, pos + length))
        out[at : at + 8] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
        ogg.walk(bytes(out))  # the CRC fails; the accounting meets garbage headers and must not raise
        modes = oggpackets._vorbis_modes(bytes(out[pos : pos + length]))
        assert modes is None or (1 <= len(modes) <= 64 and set(modes) <= {0, 1})


def test_a_negative_granule_position_is_corrupt_not_a_crash():
    data = encode("VORBIS")
    damaged = set_granule(data, 2, -5)  # -1 means "no packet ends here"; -5 means nothing (was a KeyError)
    [finding] = ogg.walk(damaged)
    assert finding.reason == R.CORRUPT and "granule position -5 at page 2" in finding.detail
