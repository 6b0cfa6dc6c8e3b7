"""Audio checks, each rule measured on a real damaged file.

Every damaged-file test first records what plain soundfile does with the file
(:func:`audiogen.sf_behaviour`: open raises / read raises / reads N frames), so
it is proven which rule catches the damage: the decoder, or the container rule.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from support import audiogen as ag

from dsclean import reasons as R
from dsclean.scanning.check import check_file
from dsclean.scanning.check_audio import CHECKERS, MAX_ABS_SAMPLE

N = int(ag.SECONDS * ag.SR)  # frames in every fixture


def check(path: Path):
    return check_file(str(path.parent), path.name)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, bytes]:
    """The bytes of each healthy fixture, written once per module."""
    d = tmp_path_factory.mktemp("base")
    specs = {
        "mono.wav": ("wav", 1, "PCM_16"),
        "stereo.wav": ("wav", 2, "PCM_16"),
        "pcm24.wav": ("wav", 2, "PCM_24"),
        "float.wav": ("wav", 1, "FLOAT"),
        "rf64.wav": ("rf64", 2, "PCM_16"),
        "mono.flac": ("flac", 1, None),
        "stereo.flac": ("flac", 2, None),
        "mono.ogg": ("ogg", 1, None),
        "stereo.ogg": ("ogg", 2, None),
        "mono.mp3": ("mp3", 1, None),
        "stereo.mp3": ("mp3", 2, None),
    }
    return {name: ag.write(d / name, fmt, ch, sub).read_bytes() for name, (fmt, ch, sub) in specs.items()}


def test_checkers_cover_the_audio_formats():
    assert set(CHECKERS) == {"wav", "flac", "ogg", "mp3"}


# ---- valid files pass with the right facts ---------------------------------------------------


@pytest.mark.parametrize(
    "name, channels, subtype",
    [
        ("mono.wav", 1, "PCM_16"),
        ("stereo.wav", 2, "PCM_16"),
        ("pcm24.wav", 2, "PCM_24"),
        ("float.wav", 1, "FLOAT"),
        ("rf64.wav", 2, "PCM_16"),
        ("mono.flac", 1, "PCM_16"),
        ("stereo.flac", 2, "PCM_16"),
        ("mono.ogg", 1, "VORBIS"),
        ("stereo.ogg", 2, "VORBIS"),
        ("mono.mp3", 1, "MPEG_LAYER_III"),
        ("stereo.mp3", 2, "MPEG_LAYER_III"),
    ],
)
def test_valid_audio_passes(tmp_path, base, name, channels, subtype):
    v = check(ag.save(tmp_path / name, base[name]))
    assert (v.status, v.reason, v.detail) == (R.OK, None, "")
    assert (v.sample_rate, v.channels, v.subtype, v.frames) == (ag.SR, channels, subtype, N)
    assert v.duration == pytest.approx(ag.SECONDS, abs=1e-3)
    assert v.kind == "audio" and v.format == name.rsplit(".", 1)[1]


def test_streaming_wav_sizes_are_not_flagged(tmp_path, base):
    # a streaming writer leaves RIFF size 0 and data size 0xFFFFFFFF: unknown length, not damage
    d = bytearray(base["mono.wav"])
    off = ag.wav_data_offset(bytes(d))
    d[4:8] = struct.pack("<I", 0)
    d[off + 4 : off + 8] = struct.pack("<I", 0xFFFFFFFF)
    v = check(ag.save(tmp_path / "stream.wav", bytes(d)))
    assert (v.status, v.frames) == (R.OK, N)


# ---- WAV ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mono.wav", "pcm24.wav", "float.wav", "rf64.wav"])
@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, -1, -3])
def test_truncated_wav(tmp_path, base, name, keep):
    data = base[name]
    cut = int(len(data) * keep) if keep > 0 else len(data) + keep
    path = ag.save(tmp_path / name, data[:cut])
    # soundfile silently clips to the bytes present: no error, header and read agree
    how, header, read = ag.sf_behaviour(path)
    assert how == "reads" and header == read < N
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)
    assert "data chunk declares" in v.detail


def test_header_only_wav_is_truncated(tmp_path, base):
    data = base["mono.wav"]
    path = ag.save(tmp_path / "h.wav", data[: ag.wav_data_offset(data) + 8])  # the 44-byte header
    assert len(path.read_bytes()) == 44
    assert ag.sf_behaviour(path) == ("reads", 0, 0)  # soundfile: a valid empty file
    v = check(path)
    assert (v.status, v.reason, v.frames) == (R.BAD, R.TRUNCATED, 0)
    assert f"declares {N * 2} bytes, 0 present" in v.detail


def test_zero_frame_wav_is_empty(tmp_path):
    path = ag.write(tmp_path / "z.wav", "wav", data=np.zeros((0, 1)))
    v = check(path)
    assert (v.status, v.reason, v.frames) == (R.BAD, R.EMPTY, 0)


def test_data_size_not_whole_frames_is_corrupt(tmp_path, base):
    d = bytearray(base["stereo.wav"])
    off = ag.wav_data_offset(bytes(d))
    d[off + 4 : off + 8] = struct.pack("<I", N * 4 - 3)  # 16-bit stereo: block align 4
    path = ag.save(tmp_path / "odd.wav", bytes(d))
    assert ag.sf_behaviour(path) == ("reads", N - 1, N - 1)  # soundfile drops the partial frame silently
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "not a whole number of 4-byte frames" in v.detail


def test_wav_chunk_size_overrun_in_complete_file_is_corrupt(tmp_path, base):
    d = bytearray(base["mono.wav"])
    d[16:20] = struct.pack("<I", 0x00FF_FFFF)  # 'fmt ' size runs past the end; RIFF size still matches the file
    path = ag.save(tmp_path / "fmt.wav", bytes(d))
    assert ag.sf_behaviour(path)[0] == "open-raises"
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "RIFF header says the file is complete" in v.detail


def test_wav_garbled_data_chunk_id_is_corrupt(tmp_path, base):
    d = bytearray(base["mono.wav"])
    off = ag.wav_data_offset(bytes(d))
    d[off : off + 4] = b"\x00\x01\xfe\xff"
    path = ag.save(tmp_path / "id.wav", bytes(d))
    assert ag.sf_behaviour(path)[0] == "open-raises"
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "invalid chunk id" in v.detail


def _with_list_chunk(wav: bytes) -> bytes:
    """Append a LIST chunk after the audio and fix the RIFF size, as taggers do."""
    chunk = b"LIST" + struct.pack("<I", 200) + b"INFO" + b"ICMT" + struct.pack("<I", 188) + b"x" * 188
    out = wav + chunk
    return out[:4] + struct.pack("<I", len(out) - 8) + out[8:]


def test_wav_with_trailing_chunk_passes(tmp_path, base):
    v = check(ag.save(tmp_path / "list.wav", _with_list_chunk(base["mono.wav"])))
    assert (v.status, v.frames) == (R.OK, N)


@pytest.mark.parametrize("drop", [1, 100, 205])
def test_wav_cut_inside_a_chunk_after_the_audio_is_truncated(tmp_path, base, drop):
    path = ag.save(tmp_path / "cut.wav", _with_list_chunk(base["mono.wav"])[:-drop])
    assert ag.sf_behaviour(path) == ("reads", N, N)  # the audio is whole: soundfile sees nothing wrong
    v = check(path)
    assert (v.status, v.reason, v.frames) == (R.BAD, R.TRUNCATED, N)
    assert "after the audio" in v.detail


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf, 1e6])
def test_float_wav_with_invalid_samples(tmp_path, bad_value):
    x = ag.signal(1).astype(np.float32)
    x[N // 2, 0] = bad_value
    path = ag.write(tmp_path / "f.wav", "wav", subtype="FLOAT", data=x)
    assert ag.sf_behaviour(path) == ("reads", N, N)  # soundfile hands the values back without complaint
    v = check(path)
    assert (v.status, v.reason, v.frames) == (R.BAD, R.INVALID_SAMPLES, N)


def test_float_wav_with_loud_but_sane_samples_passes(tmp_path):
    x = ag.signal(1).astype(np.float32) * (MAX_ABS_SAMPLE / 2)
    v = check(ag.write(tmp_path / "loud.wav", "wav", subtype="FLOAT", data=x))
    assert v.status == R.OK


# ---- FLAC -----------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, -4, -1])
def test_truncated_flac(tmp_path, base, keep):
    data = base["stereo.flac"]
    cut = int(len(data) * keep) if keep > 0 else len(data) + keep
    path = ag.save(tmp_path / "t.flac", data[:cut])
    assert ag.sf_behaviour(path) == ("read-raises", N, None)  # libFLAC errors out; the tail rule says why
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)


def test_flac_cut_on_a_frame_boundary_is_truncated(tmp_path, base):
    data = base["stereo.flac"]
    last = data.rindex(b"\xff\xf8")  # header of the last frame (the file ends with it)
    path = ag.save(tmp_path / "b.flac", data[:last])
    assert ag.sf_behaviour(path)[0] == "read-raises"
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)
    assert "STREAMINFO promises" in v.detail


def test_flac_cut_inside_metadata_is_truncated(tmp_path, base):
    path = ag.save(tmp_path / "m.flac", base["stereo.flac"][:30])
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)


def test_flac_garbage_in_the_middle_is_corrupt(tmp_path, base):
    data = base["stereo.flac"]
    mid = len(data) // 2
    path = ag.save(tmp_path / "g.flac", data[:mid] + ag.garbage(64) + data[mid + 64 :])
    assert ag.sf_behaviour(path)[0] == "read-raises"
    v = check(path)
    # the end of the file is intact (last frame complete, CRC good): damage, not a cut
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)


def test_text_saved_as_flac_is_not_media(tmp_path):
    v = check(ag.save(tmp_path / "x.flac", b"<html><body>404 Not Found</body></html>\n"))
    assert (v.status, v.reason) == (R.BAD, R.NOT_MEDIA)


# ---- Ogg ------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, -1])
def test_truncated_ogg(tmp_path, base, keep):
    data = base["stereo.ogg"]
    cut = int(len(data) * keep) if keep > 0 else len(data) + keep
    path = ag.save(tmp_path / "t.ogg", data[:cut])
    how, header, read = ag.sf_behaviour(path)
    assert how == "reads" and header == read < N  # libvorbis reports a shorter file, no error
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)


def test_ogg_cut_on_a_page_boundary_is_truncated(tmp_path, base):
    data = base["stereo.ogg"]
    last_off, _ = ag.ogg_pages(data)[-1]
    path = ag.save(tmp_path / "p.ogg", data[:last_off])
    how, header, read = ag.sf_behaviour(path)
    assert how == "reads" and header == read < N
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)
    assert "end-of-stream flag" in v.detail


def test_ogg_cut_into_the_headers_is_truncated(tmp_path, base):
    data = base["stereo.ogg"]
    path = ag.save(tmp_path / "h.ogg", data[: ag.ogg_pages(data)[1][0] + 100])
    assert ag.sf_behaviour(path)[0] == "open-raises"
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)


def _mid_page(data: bytes) -> tuple[int, int]:
    pages = ag.ogg_pages(data)
    assert len(pages) >= 5, "the fixture must span several audio pages"
    return pages[len(pages) // 2]


def _silently_short(path: Path) -> bool:
    """soundfile raises nothing and the header still says N frames, but fewer come out.

    From the decode alone this looks like a cut (and is reported as such in the
    detail); only the page walk shows the damage is in the middle.
    """
    how, header, read = ag.sf_behaviour(path)
    return how == "reads" and header == N and read is not None and 0 < read < N


def test_ogg_broken_capture_pattern_is_corrupt(tmp_path, base):
    data = base["stereo.ogg"]
    off, _ = _mid_page(data)
    path = ag.save(tmp_path / "c.ogg", data[:off] + b"XXXX" + data[off + 4 :])
    assert _silently_short(path)
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "capture pattern" in v.detail


def test_ogg_lost_page_is_corrupt(tmp_path, base):
    data = base["stereo.ogg"]
    off, length = _mid_page(data)
    path = ag.save(tmp_path / "l.ogg", data[:off] + data[off + length :])
    assert _silently_short(path)
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "page sequence jumps" in v.detail


def test_ogg_garbage_inside_a_page_fails_its_crc(tmp_path, base):
    data = base["stereo.ogg"]
    off, length = _mid_page(data)
    at = off + length // 2
    path = ag.save(tmp_path / "g.ogg", data[:at] + ag.garbage(200) + data[at + 200 :])
    assert _silently_short(path)
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "fails its CRC" in v.detail


# ---- MP3 ------------------------------------------------------------------------------------


def _without_xing(data: bytes) -> bytes:
    """Drop the first (Xing/Info) frame: a plain CBR stream with no frame count anywhere."""
    assert b"Xing" in data[:64] or b"Info" in data[:64]
    return data[ag.mp3_frames(data)[1] :]


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, -1])
def test_truncated_mp3(tmp_path, base, keep):
    data = base["stereo.mp3"]
    cut = int(len(data) * keep) if keep > 0 else len(data) + keep
    path = ag.save(tmp_path / "t.mp3", data[:cut])
    # the LAME/Info header gives libsndfile the exact length, so here soundfile silently returns
    # fewer frames than it promises: the decode's own frame count rule catches it
    how, header, read = ag.sf_behaviour(path)
    assert how == "reads" and header == N and read < N
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, -1])
def test_truncated_mp3_without_xing_is_caught_by_the_frame_walk(tmp_path, base, keep):
    data = _without_xing(base["stereo.mp3"])
    cut = int(len(data) * keep) if keep > 0 else len(data) + keep
    assert cut not in ag.mp3_frames(data)  # inside a frame
    path = ag.save(tmp_path / "t.mp3", data[:cut])
    how, header, read = ag.sf_behaviour(path)
    assert how == "reads" and header == read  # mpg123 decodes what is there, no complaint
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)
    assert "bytes, " in v.detail and "present" in v.detail


def test_mp3_cut_on_a_frame_boundary_is_caught_by_the_xing_count(tmp_path, base):
    data = base["stereo.mp3"]
    path = ag.save(tmp_path / "b.mp3", data[: ag.mp3_frames(data)[-3]])
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)
    assert "Xing/VBRI header counts" in v.detail
    # Without a Xing/Info (or VBRI) header a cut exactly on a frame boundary leaves a valid,
    # shorter MP3: nothing in the stream records its length, so that case cannot be detected.


@pytest.mark.parametrize("where", [0.3, 0.5, 0.7])
def test_mp3_garbage_in_the_middle_is_corrupt(tmp_path, base, where):
    data = _without_xing(base["stereo.mp3"])
    frames = ag.mp3_frames(data)
    at = frames[int(len(frames) * where)]  # over a frame header, where mpg123 must resync
    path = ag.save(tmp_path / "g.mp3", data[:at] + ag.garbage(100) + data[at + 100 :])
    # mpg123 resyncs silently: no error, sometimes even the full frame count
    assert ag.sf_behaviour(path)[0] == "reads"
    v = check(path)
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT)
    assert "lost MPEG frame sync" in v.detail


def test_mp3_trailing_id3v1_and_leading_id3v2_are_allowed(tmp_path, base):
    id3v2 = b"ID3\x04\x00\x00" + bytes([0, 0, 0, 20]) + b"\x00" * 20
    id3v1 = b"TAG" + b"\x20" * 125
    v = check(ag.save(tmp_path / "tags.mp3", id3v2 + base["mono.mp3"] + id3v1))
    assert (v.status, v.reason) == (R.OK, None), v.detail


def test_wav_with_a_codec_libsndfile_does_not_decode_is_unsupported(tmp_path):
    """A well-formed RIFF whose format tag (here 0x0161, WMA) libsndfile does not decode: a decoder's limit, a
    warning (issue 27), whatever the next decoder (PyAV, when installed) makes of it."""
    import struct

    from dsclean.scanning.check import check_file

    data = b"\x00\x01" * 800
    fmt = struct.pack("<HHIIHHH", 0x0161, 1, 8000, 16000, 2, 16, 0)
    riff = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    (tmp_path / "wma.wav").write_bytes(b"RIFF" + struct.pack("<I", len(riff)) + riff)
    v = check_file(str(tmp_path), "wma.wav")
    assert (
        v.reason in ("unsupported", "corrupt") and "0x0161" in v.detail and "decoders: libsndfile refused" in v.detail
    )
    assert v.status == ("warn" if v.reason == "unsupported" else "bad"), v.detail


def test_the_decode_keeps_its_block_buffer_per_thread_and_the_verdicts_do_not_see_it():
    """The block buffer is kept between files (one per thread, dtype and channel count; a file of many channels
    gets a fresh one), and files checked after others through it get their own verdicts and frame counts."""
    import threading

    from support import synth

    from dsclean.scanning import check_audio
    from dsclean.scanning.check import CheckOptions, check_bytes

    mine = check_audio._block_buffer("int16", 2)
    assert check_audio._block_buffer("int16", 2) is mine
    assert check_audio._block_buffer("int32", 2) is not mine and check_audio._block_buffer("int16", 1) is not mine
    assert check_audio._block_buffer("int16", 9) is not check_audio._block_buffer("int16", 9)
    other: list = []
    t = threading.Thread(target=lambda: other.append(check_audio._block_buffer("int16", 2)))
    t.start()
    t.join()
    assert other[0] is not mine and other[0].shape == mine.shape
    long = synth.encode_audio(synth.tone(3.0, 44_100, 2, seed=1), 44_100, "FLAC")  # more than one block
    short = synth.encode_audio(synth.tone(0.5, 44_100, 2, seed=2), 44_100, "FLAC")
    options = CheckOptions(facts=True)
    runs = [check_bytes(d, n, options) for d, n in ((long, "a.flac"), (synth.truncate(long, 0.6), "b.flac"))]
    runs += [check_bytes(short, "c.flac", options), check_bytes(long, "a.flac", options)]
    assert [(v.status, v.reason) for v in runs] == [("ok", None), ("bad", "truncated"), ("ok", None), ("ok", None)]
    assert [runs[0].frames, runs[2].frames, runs[3].frames] == [3 * 44_100, 44_100 // 2, 3 * 44_100]
    assert runs[0].rms is not None and (runs[3].rms, runs[3].peak) == (runs[0].rms, runs[0].peak)
