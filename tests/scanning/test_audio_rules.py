"""Audio rules of issue 11: no verdict on an estimate, what decoders tolerate, every checksum named.

As in test_check_audio.py, each test first records what plain soundfile does, so
it is proven which rule decides.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile as sf
from support import audiogen as ag

from dsclean import reasons as R
from dsclean.scanning import check_audio
from dsclean.scanning.check import CheckOptions, check_bytes
from dsclean.scanning.formats import flac, mp3

SR = 44100
N = int(ag.SECONDS * ag.SR)  # frames of ag.signal()


def verdict(data: bytes, name: str):
    v = check_bytes(data, name)
    return v.status, v.reason, v.detail


def encode(x: np.ndarray, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, SR, format=fmt, **kw)
    return buf.getvalue()


def silence_then_noise(seconds: float = 2.0) -> np.ndarray:
    """Quiet first (small VBR frames), loud after (large ones): a bitrate estimate from the start overshoots."""
    n = int(seconds * SR)
    return np.concatenate([np.zeros(n // 3), np.random.default_rng(0).uniform(-0.8, 0.8, n - n // 3)]).astype(
        np.float32
    )


def without_first_frame(data: bytes) -> bytes:
    first = mp3.first_frame(data, 0, len(data))
    return data[first + mp3.mpeg_frame(data, first).length :]


# ---- principle 1: never bad on an estimate ----------------------------------------------------


@pytest.mark.parametrize("mode", ["VARIABLE", "CONSTANT"])
def test_mp3_without_xing_is_not_truncated_on_libsndfiles_estimate(mode):
    data = encode(silence_then_noise(), "MP3", subtype="MPEG_LAYER_III", bitrate_mode=mode)
    assert mp3.walk(data).promised is not None  # the Xing/Info frame counts the frames...
    stripped = without_first_frame(data)  # ... and without it nothing promises a length
    assert mp3.walk(stripped).promised is None
    info, decoded = sf.info(io.BytesIO(stripped)), sf.read(io.BytesIO(stripped))[0]
    assert info.frames > len(decoded)  # libsndfile's length is an estimate: more frames than decode
    status, reason, detail = verdict(stripped, "vbr.mp3")
    assert (status, reason) == (R.OK, None), detail
    assert check_bytes(stripped, "vbr.mp3").frames == len(decoded)


def test_mp3_with_xing_cut_is_still_truncated():
    data = encode(silence_then_noise(), "MP3", subtype="MPEG_LAYER_III", bitrate_mode="VARIABLE")
    status, reason, _ = verdict(data[: int(len(data) * 0.7)], "cut.mp3")
    assert (status, reason) == (R.BAD, R.TRUNCATED)


# ---- principle 2: tolerate what decoders tolerate ------------------------------------------


def id3v2(size: int = 20) -> bytes:
    return b"ID3\x04\x00\x00" + bytes([0, 0, size >> 7, size & 0x7F]) + b"\x00" * size


def test_flac_behind_an_id3v2_tag_is_a_warning_and_fully_checked():
    data = id3v2(300) + encode(ag.signal(2), "FLAC")
    assert len(sf.read(io.BytesIO(data))[0]) == N  # libFLAC skips the tag
    v = check_bytes(data, "tagged.flac")
    assert (v.status, v.reason, v.format, v.frames) == (R.WARN, R.NONCONFORMING, "flac", N)
    assert "ID3v2 tag (310 bytes) comes before the FLAC stream" in v.detail
    # the parsers skip the tag correctly: damage behind it is still found and named
    cut = data[: len(data) - 500]
    status, reason, detail = verdict(cut, "tagged.flac")
    assert (status, reason) == (R.BAD, R.TRUNCATED) and "the last frame" in detail


def test_flac_with_bytes_after_its_last_frame_passes():
    """A decode that asks for more than STREAMINFO promises makes libFLAC lose sync in the junk
    (the old check read that far: a false alarm); the check reads what STREAMINFO promises."""
    data = encode(ag.signal(2), "FLAC") + b"not audio, just bytes " * 20
    with sf.SoundFile(io.BytesIO(data)) as f:
        with pytest.raises(sf.LibsndfileError, match="lost sync"):
            f.read(dtype="float32", out=np.empty((N + 4096, 2), dtype="float32"))  # a block reaching past them
    assert verdict(data, "junk.flac")[:2] == (R.OK, None)


def test_mp3_zero_padding_is_a_warning_other_junk_stays_corrupt():
    data = encode(ag.signal(2), "MP3", subtype="MPEG_LAYER_III")
    status, reason, detail = verdict(data + b"\0" * 300, "pad.mp3")
    assert (status, reason) == (R.WARN, R.NONCONFORMING) and "300 zero bytes of padding" in detail
    assert verdict(data + b"\x01" * 300, "junk.mp3")[:2] == (R.BAD, R.CORRUPT)


def test_mp3_lyrics3_tag_is_skipped():
    data = encode(ag.signal(2), "MP3", subtype="MPEG_LAYER_III")
    lyrics = b"LYRICSBEGIN" + b"IND0000210" + b"EAL00005hello"
    tag = lyrics + f"{len(lyrics):06d}".encode() + b"LYRICS200"
    assert verdict(data + tag + b"TAG" + b" " * 125, "lyrics.mp3")[:2] == (R.OK, None)


# ---- principle 3: every checksum, named ---------------------------------------------------------


def _frames(data: bytes) -> list[int]:
    """Offsets of the real frame headers of a FLAC written by libsndfile (fixed block size)."""
    start, info = ag.flac_audio_start(data), flac.walk(data).info
    out, pos = [], start
    while (pos := data.find(b"\xff\xf8", pos)) >= 0:
        h = flac.frame_header(data, pos, len(data), info.max_block)
        if h is not None and h[0] == len(out) * info.max_block:
            out.append(pos)
        pos += 1
    return out


def test_flac_frame_crc16_failure_names_the_frame():
    data = encode(ag.signal(2, seconds=1.0), "FLAC")
    frames = _frames(data)
    assert len(frames) >= 4
    at = (frames[2] + frames[3]) // 2
    damaged = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]
    with pytest.raises(sf.LibsndfileError, match="unknown error in flac decoder"):
        sf.read(io.BytesIO(damaged))  # libsndfile does not say which frame or why
    status, reason, detail = verdict(damaged, "crc.flac")
    assert (status, reason) == (R.BAD, R.CORRUPT)
    assert f"FLAC frame at byte {frames[2]} (samples 8192..12288) fails its CRC-16" in detail


def test_flac_frame_header_damage_is_named():
    data = encode(ag.signal(2, seconds=1.0), "FLAC")
    frames = _frames(data)
    at = frames[2] + 2  # inside the header: its CRC-8 no longer matches
    damaged = data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1 :]
    status, reason, detail = verdict(damaged, "hdr.flac")
    assert status == R.BAD and f"byte {frames[1]}" in detail and "frames are lost or their headers damaged" in detail


@pytest.mark.parametrize("subtype", ["PCM_S8", "PCM_16", "PCM_24"])
def test_flac_streaminfo_md5_is_checked_when_asked(subtype):
    md5_on = CheckOptions(flac_md5=True)
    data = bytearray(encode(ag.signal(2), "FLAC", subtype=subtype))
    md5 = flac.walk(bytes(data)).info.md5
    assert any(md5)  # libFLAC's encoder records it
    v = check_bytes(bytes(data), "ok.flac", md5_on)  # the samples' bytes are packed right for every width
    assert (v.status, v.reason) == (R.OK, None), v.detail
    i = bytes(data).index(md5)
    data[i] ^= 0x80
    assert len(sf.read(io.BytesIO(bytes(data)))[0]) == N  # nothing else notices
    v = check_bytes(bytes(data), "md5.flac", md5_on)
    assert (v.status, v.reason, v.detail) == (
        R.BAD,
        R.CORRUPT,
        "FLAC: the MD5 of the decoded samples differs from the STREAMINFO MD5 signature",
    )
    assert check_bytes(bytes(data), "md5.flac").status == R.OK  # off by default: not hashed


# ---- speed work changes no verdict: raw WAV samples are not pushed through a decoder ------------


def _damaged_wavs() -> list[tuple[str, bytes]]:
    out = []
    for sub in ("PCM_16", "PCM_24", "FLOAT", "DOUBLE", "ULAW"):
        x = ag.signal(2)
        if sub in ("FLOAT", "DOUBLE"):
            x = x.copy()
            x[100, 0] = np.nan if sub == "FLOAT" else 5000.0
        data = encode(x, "WAV", subtype=sub)
        out += [(f"{sub}.wav", data), (f"{sub}-cut.wav", data[: len(data) * 2 // 3]), (f"{sub}-odd.wav", data[:-1])]
        off = ag.wav_data_offset(data)
        out.append((f"{sub}-size.wav", data[: off + 4] + struct.pack("<I", len(data)) + data[off + 8 :]))
    return out


def test_raw_wav_fast_path_gives_the_verdicts_of_a_full_decode(monkeypatch):
    fast = {name: check_bytes(data, name) for name, data in _damaged_wavs()}
    monkeypatch.setattr(check_audio, "WAV_RAW_SUBTYPES", frozenset())
    monkeypatch.setattr(check_audio, "_scan_raw_floats", lambda *a: False)
    for name, data in _damaged_wavs():
        slow = check_bytes(data, name)
        assert (fast[name].status, fast[name].reason, fast[name].frames) == (slow.status, slow.reason, slow.frames), (
            name
        )
    assert {v.reason for v in fast.values()} >= {None, R.TRUNCATED, R.INVALID_SAMPLES}
