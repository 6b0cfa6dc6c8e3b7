"""M4A (AAC in ISOBMFF) and ADTS AAC: the container rules, the decode through PyAV, and what a missing
PyAV gives (warn/unsupported naming the extra, never ok unchecked, never bad)."""

from __future__ import annotations

import struct
import sys

import pytest
from support import audiogen

from dsclean import formats
from dsclean import reasons as R
from dsclean.scanning.check import CheckOptions, check_bytes
from dsclean.scanning.formats import m4a

pytest.importorskip("av")


@pytest.fixture(scope="module")
def m4a_file() -> bytes:
    return audiogen.aac("ipod", seconds=1.0)


@pytest.fixture(scope="module")
def adts_file() -> bytes:
    return audiogen.aac("adts", seconds=1.0)


def check(data: bytes, name: str):
    return check_bytes(data, name, CheckOptions())


def test_whole_files_are_ok_with_their_facts(m4a_file, adts_file):
    for data, name in ((m4a_file, "a.m4a"), (adts_file, "a.aac")):
        v = check(data, name)
        assert (v.status, v.reason, v.format) == (R.OK, None, name[2:])
        assert v.sample_rate == 16000 and v.channels == 1
        assert 16000 <= v.frames <= 16000 + 3 * 1024  # encoder priming and padding: whole AAC frames
        assert v.rms is not None and 0.2 < v.rms < 0.35  # level facts from the decoded samples (noise of rms 0.29)


def test_stereo_and_index_first_files_are_ok():
    stereo = audiogen.aac("ipod", channels=2, sr=44100)
    assert check(stereo, "s.m4a").status == R.OK and check(stereo, "s.m4a").channels == 2
    faststart = audiogen.aac("ipod", movflags="faststart")
    boxes = audiogen.mp4_boxes(faststart)
    assert boxes[b"moov"] < boxes[b"mdat"]
    assert check(faststart, "f.m4a").status == R.OK


def test_sniff_names_the_content():
    assert formats.sniff(audiogen.aac("ipod")[:32]) == "m4a"
    assert formats.sniff(audiogen.aac("adts")[:32]) == "aac"
    assert formats.format_of_name("x.M4A") == "m4a" and formats.format_of_name("x.aac") == "aac"


@pytest.mark.parametrize("keep", [0.3, 0.95])
def test_a_cut_m4a_is_truncated(m4a_file, keep):
    v = check(m4a_file[: int(len(m4a_file) * keep)], "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)
    assert "declares" in v.detail and "present" in v.detail


def test_a_cut_index_first_m4a_is_truncated():
    data = audiogen.aac("ipod", seconds=1.0, movflags="faststart")
    v = check(data[: len(data) - 700], "f.m4a")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED) and "'mdat'" in v.detail


def test_a_zeroed_middle_is_a_decode_error(m4a_file):
    mdat = audiogen.mp4_boxes(m4a_file)[b"mdat"]
    data = bytearray(m4a_file)
    data[mdat + 2000 : mdat + 3000] = bytes(1000)
    v = check(bytes(data), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "decoder error" in v.detail and "PyAV" in v.detail


def test_a_chunk_offset_past_the_end_is_truncated(m4a_file):
    stco = audiogen.mp4_boxes(m4a_file)[b"stco"]
    data = bytearray(m4a_file)
    struct.pack_into(">I", data, stco + 16, len(data) - 100)  # the first chunk's offset
    v = check(bytes(data), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)
    assert "chunk 0" in v.detail and "past the end of the file" in v.detail


def test_a_chunk_outside_mdat_is_corrupt(m4a_file):
    stco = audiogen.mp4_boxes(m4a_file)[b"stco"]
    data = bytearray(m4a_file)
    struct.pack_into(">I", data, stco + 16, 0)  # inside the file, but over ftyp: not sample data
    v = check(bytes(data), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "not inside an 'mdat'" in v.detail


def test_a_sample_count_the_chunks_do_not_hold_is_corrupt(m4a_file):
    stsz = audiogen.mp4_boxes(m4a_file)[b"stsz"]
    data = bytearray(m4a_file)
    (count,) = struct.unpack_from(">I", data, stsz + 16)
    struct.pack_into(">I", data, stsz + 16, count - 1)
    v = check(bytes(data), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "'stsz' sizes" in v.detail


def test_a_hostile_entry_count_sizes_nothing(m4a_file):
    stco = audiogen.mp4_boxes(m4a_file)[b"stco"]
    data = bytearray(m4a_file)
    struct.pack_into(">I", data, stco + 12, 0xFFFFFFFF)
    v = check(bytes(data), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "declares 4294967295 entries" in v.detail


def test_a_wrong_box_size_is_found(m4a_file):
    stsz = audiogen.mp4_boxes(m4a_file)[b"stsz"]
    data = bytearray(m4a_file)
    struct.pack_into(">I", data, stsz, 5000)  # past its parent 'stbl'
    v = check(bytes(data), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "box 'stsz'" in v.detail
    data = bytearray(m4a_file)
    struct.pack_into(">I", data, audiogen.mp4_boxes(m4a_file)[b"mdat"], 4)  # smaller than its own header
    v = check(bytes(data), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "less than its own header" in v.detail


def test_no_moov_is_truncated(m4a_file):
    moov = audiogen.mp4_boxes(m4a_file)[b"moov"]
    assert moov > audiogen.mp4_boxes(m4a_file)[b"mdat"]  # PyAV's ipod muxer writes the index last
    v = check(m4a_file[:moov], "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED) and "no 'moov'" in v.detail


def test_a_cut_adts_stream_is_truncated(adts_file):
    v = check(adts_file[: len(adts_file) - 50], "a.aac")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED) and "bytes left" in v.detail


def test_a_broken_adts_chain_is_corrupt(adts_file):
    data = bytearray(adts_file)
    data[len(data) // 2 : len(data) // 2 + 600] = bytes(600)
    v = check(bytes(data), "a.aac")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "no sync word" in v.detail


def test_garbage_inside_an_adts_frame_is_a_decode_error(adts_file):
    # inside the 6th frame's payload: the chain of frame lengths holds, the decoder must notice
    pos = 0
    for _ in range(5):
        pos += (adts_file[pos + 3] & 3) << 11 | adts_file[pos + 4] << 3 | adts_file[pos + 5] >> 5
    length = (adts_file[pos + 3] & 3) << 11 | adts_file[pos + 4] << 3 | adts_file[pos + 5] >> 5
    data = bytearray(adts_file)
    data[pos + 7 : pos + length] = bytes(length - 7)
    v = check(bytes(data), "a.aac")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "decoder error" in v.detail


def test_id3_tags_around_an_adts_stream_are_skipped(adts_file):
    tail = b"TAG" + bytes(125)
    assert m4a.walk_adts(adts_file + tail)[0] == []
    assert m4a.walk_adts(adts_file + b"junk")[0][0].reason == R.TRUNCATED


def test_without_pyav_a_whole_file_is_unsupported_naming_the_extra(m4a_file, adts_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # import av raises ImportError
    for data, name in ((m4a_file, "a.m4a"), (adts_file, "a.aac")):
        v = check(data, name)
        assert (v.status, v.reason) == (R.WARN, R.UNSUPPORTED) and "dsclean[av]" in v.detail
    v = check(m4a_file[:1000], "a.m4a")  # damage found by the container rules is still bad
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)


def test_an_adts_stream_behind_an_id3_tag_is_aac(adts_file):
    tag = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + b"TIT2" + bytes(6)  # ID3v2.4, 10 bytes of frames
    v = check(tag + adts_file, "a.aac")
    assert (v.status, v.format) == (R.OK, "aac"), v.detail
    v = check(tag + adts_file[:-50], "a.aac")
    assert (v.status, v.reason, v.format) == (R.BAD, R.TRUNCATED, "aac") and "ADTS frame" in v.detail


def split_chunks(data: bytes, first: int) -> bytes:
    """The file with its single chunk split in two: ``first`` samples, then the rest (stco gets a second
    offset, stsc a second run; the boxes above them grow). The index must come after the samples."""
    b = audiogen.mp4_boxes(data)
    assert b[b"moov"] > b[b"mdat"]  # growing the index then moves no sample
    (count,) = struct.unpack_from(">I", data, b[b"stsz"] + 16)
    sizes = struct.unpack_from(f">{count}I", data, b[b"stsz"] + 20)
    (offset,) = struct.unpack_from(">I", data, b[b"stco"] + 16)
    (runs,) = struct.unpack_from(">I", data, b[b"stsc"] + 12)
    assert runs == 1 and struct.unpack_from(">I", data, b[b"stco"] + 12)[0] == 1
    stco = struct.pack(">I4sIIII", 24, b"stco", 0, 2, offset, offset + sum(sizes[:first]))
    stsc = (
        struct.pack(">I4sII", 40, b"stsc", 0, 2)
        + struct.pack(">III", 1, first, 1)
        + struct.pack(">III", 2, count - first, 1)
    )
    out = bytearray(data)
    for kind, new in sorted(((b"stco", stco), (b"stsc", stsc)), key=lambda kv: -b[kv[0]]):  # back to front
        (old,) = struct.unpack_from(">I", out, b[kind])
        out[b[kind] : b[kind] + old] = new
    grow = len(out) - len(data)
    for parent in (b"moov", b"trak", b"mdia", b"minf", b"stbl"):
        (size,) = struct.unpack_from(">I", out, b[parent])
        struct.pack_into(">I", out, b[parent], size + grow)
    return bytes(out)


def test_a_sample_table_of_several_chunks(m4a_file):
    data = split_chunks(m4a_file, 5)
    v = check(data, "a.m4a")
    assert (v.status, v.reason) == (R.OK, None), v.detail  # the same samples, indexed in two chunks
    stco = audiogen.mp4_boxes(data)[b"stco"]
    (second,) = struct.unpack_from(">I", data, stco + 20)
    past = bytearray(data)
    struct.pack_into(">I", past, stco + 20, second + len(data))  # only the second chunk lies past the end
    v = check(bytes(past), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED) and "chunk 1 at bytes" in v.detail
    moved = bytearray(data)
    struct.pack_into(">I", moved, stco + 20, second + 3)  # inside mdat, its last bytes over the moov box
    v = check(bytes(moved), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "chunk 1 at bytes" in v.detail and "'mdat'" in v.detail


def test_a_fragmented_m4a_is_ok():
    data = audiogen.aac("ipod", seconds=1.0, movflags="frag_keyframe+empty_moov")
    assert b"mvex" in data and b"moof" in data
    assert check(data, "f.m4a").status == R.OK
    v = check(data[:-100], "f.m4a")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED)


def test_the_default_audio_loader_reads_what_the_check_passed(m4a_file, adts_file, tmp_path):
    """An ok verdict means the index's default loader reads the file: libsndfile has no AAC decoder, so the
    default audio loader takes AAC (by content) through PyAV; the soundfile profile alone still refuses it."""
    import io

    import soundfile as sf

    from dsclean.data.loaders import audio_loader
    from dsclean.loaders.profiles import load_soundfile

    for data, name in ((m4a_file, "a.m4a"), (adts_file, "a.aac")):
        v = check(data, name)
        (tmp_path / name).write_bytes(data)
        for source in (str(tmp_path / name), io.BytesIO(data)):
            samples, rate = audio_loader(source)
            assert rate == v.sample_rate and tuple(samples.shape) == (v.channels, v.frames)
        with pytest.raises(sf.LibsndfileError):
            load_soundfile(data)
    wav = io.BytesIO()
    sf.write(wav, audiogen.signal(1, 0.1, 8000), 8000, format="WAV")
    assert audio_loader(io.BytesIO(wav.getvalue()))[0].shape == (1, 800)  # everything else: soundfile, as before


def test_decoding_times_for_another_sample_count_are_corrupt(m4a_file):
    stts = audiogen.mp4_boxes(m4a_file)[b"stts"]
    data = bytearray(m4a_file)
    (first,) = struct.unpack_from(">I", data, stts + 16)  # the first run's sample count
    struct.pack_into(">I", data, stts + 16, first + 1)
    v = check(bytes(data), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.CORRUPT) and "'stts' times" in v.detail


def test_one_size_for_every_sample_is_held_against_the_file(m4a_file):
    stsz = audiogen.mp4_boxes(m4a_file)[b"stsz"]
    data = bytearray(m4a_file)
    struct.pack_into(">I", data, stsz + 12, 0x10000000)  # "every sample is 256 MiB" (the table is then unused)
    v = check(bytes(data), "a.m4a")
    assert (v.status, v.reason) == (R.BAD, R.TRUNCATED) and "samples of 268435456 bytes" in v.detail
    struct.pack_into(">I", data, stsz + 12, 2)  # 2 bytes each: inside the file, and not what the decoder gets
    v = check(bytes(data), "a.m4a")
    assert v.status == R.BAD


def test_apple_lossless_in_an_m4a_is_checked_the_same_way(tmp_path):
    import av
    import numpy as np

    path = str(tmp_path / "alac.m4a")
    with av.open(path, "w", format="ipod") as out:
        stream = out.add_stream("alac", rate=44100, layout="mono")
        pcm = np.ascontiguousarray((audiogen.signal(1, 1.0, 44100).T * 20000).astype(np.int16))
        frame = av.AudioFrame.from_ndarray(pcm, format="s16p", layout="mono")
        frame.sample_rate = 44100
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    data = (tmp_path / "alac.m4a").read_bytes()
    v = check(data, "alac.m4a")
    assert (v.status, v.subtype, v.frames) == (R.OK, "ALAC", 44100)
    stco = audiogen.mp4_boxes(data)[b"stco"]
    past = bytearray(data)
    struct.pack_into(">I", past, stco + 16, len(data))
    assert check(bytes(past), "alac.m4a").reason == R.TRUNCATED
