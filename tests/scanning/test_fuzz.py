"""Fuzzing the checkers: random and mutated bytes under every media extension.

Every input must get a verdict with a known status and reason; no exception may
escape and no check may hang (hypothesis' deadline). Crashers found here become
regression fixtures in tests/scanning/test_check_*.py.
"""

from __future__ import annotations

import functools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import audiogen, synth

from dsclean import REASONS
from dsclean.reasons import STATUSES
from dsclean.scanning.check import check_file


@functools.cache
def seeds() -> dict[str, bytes]:
    tone = synth.tone(0.1, 8000, channels=1)
    return {
        "jpg": synth.jpeg(32, 24),
        "png": synth.png(16, 16),
        "gif": synth.animated_gif(frames=2, size=8),
        "webp": synth.encode_image(synth.photo_like(16, 16), "WEBP"),
        "tif": synth.encode_image(synth.photo_like(16, 16), "TIFF"),
        "bmp": synth.encode_image(synth.photo_like(8, 8), "BMP"),
        "wav": synth.encode_audio(tone, 8000, "WAV"),
        "flac": synth.encode_audio(tone, 8000, "FLAC"),
        "ogg": synth.encode_audio(tone, 8000, "OGG"),
        "mp3": synth.encode_audio(tone, 8000, "MP3"),
        "opus": synth.encode_audio(tone, 8000, "OGG", "OPUS"),
        "m4a": audiogen.aac("ipod", seconds=0.1, sr=8000),
        "aac": audiogen.aac("adts", seconds=0.1, sr=8000),
    }


@st.composite
def mutated(draw):
    ext = draw(st.sampled_from(sorted(seeds())))
    data = bytearray(seeds()[ext])
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "overwrite", "splice"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=64))
        elif op == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=64))
            data[pos : pos + len(chunk)] = chunk
        else:  # splice in part of another format's file
            other = seeds()[draw(st.sampled_from(sorted(seeds())))]
            data[pos:pos] = other[: draw(st.integers(1, len(other)))]
    ext = draw(st.sampled_from([ext, ext, ext, *sorted(seeds())]))  # sometimes under another extension
    return ext, bytes(data)


def _assert_verdict(tmp_path, ext: str, data: bytes):
    name = f"f.{ext}"
    (tmp_path / name).write_bytes(data)
    v = check_file(str(tmp_path), name)
    assert v.status in STATUSES
    assert (v.reason is None) == (v.status == "ok")
    assert v.reason is None or v.reason in REASONS
    assert v.size == len(data)


@settings(max_examples=1000, deadline=5000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutated())
def test_mutated_media_always_gets_a_verdict(tmp_path, case):
    _assert_verdict(tmp_path, *case)


@settings(max_examples=150, deadline=5000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ext=st.sampled_from(sorted(seeds())), data=st.binary(min_size=0, max_size=2048))
def test_random_bytes_always_get_a_verdict(tmp_path, ext, data):
    _assert_verdict(tmp_path, ext, data)


@settings(max_examples=150, deadline=5000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ext=st.sampled_from(sorted(seeds())), tail=st.binary(min_size=0, max_size=512))
def test_magic_plus_garbage_always_gets_a_verdict(tmp_path, ext, tail):
    """Valid signatures followed by garbage reach the deepest parsers."""
    _assert_verdict(tmp_path, ext, seeds()[ext][:48] + tail)


@functools.cache
def walk_seeds() -> dict[str, bytes]:
    tone = synth.tone(0.3, 8000, channels=1)
    return {
        "m4a": seeds()["m4a"],
        "aac": seeds()["aac"],
        "opus": seeds()["opus"],
        "vorbis": synth.encode_audio(tone, 8000, "OGG"),
    }


@settings(max_examples=400, deadline=5000)
@given(
    kind=st.sampled_from(["m4a", "aac", "opus", "vorbis"]),
    edits=st.lists(st.tuples(st.floats(0, 1), st.binary(min_size=1, max_size=8)), min_size=1, max_size=4),
)
def test_the_m4a_adts_and_ogg_packet_walks_never_raise(kind, edits):
    """check_file turns a walker's exception into `corrupt`: the walks themselves must not raise (a crash
    inside them would hide a rule behind an exception's name)."""
    from dsclean.scanning.formats import m4a, ogg

    data = bytearray(walk_seeds()[kind])
    for at, chunk in edits:
        pos = int(at * (len(data) - 1))
        data[pos : pos + len(chunk)] = chunk
    walk = {"m4a": m4a.walk_m4a, "aac": lambda d: m4a.walk_adts(d)[0]}.get(kind, ogg.walk)
    for finding in walk(bytes(data)):
        assert finding.reason in REASONS and finding.detail
