"""pack reuses the scan's content_hash of unchanged files; the shards are the same bytes either way."""

from __future__ import annotations

import json
import os
import random

import pyarrow as pa
import pytest
from support.packing import folder_digests, make_media

from dsclean import scan
from dsclean.cli import main
from dsclean.hashing import content_hash
from dsclean.index.build import build_index
from dsclean.index.store import open_index
from dsclean.jsonpaths import path_fields
from dsclean.pack import write
from dsclean.pack.packer import PackOptions, pack_shards
from dsclean.pack.samples import _slow_record, int_facts_record, json_record
from dsclean.scanning.scanner import ScanOptions


@pytest.fixture
def scanned(tmp_path):
    """A tree scanned by the real scan (content hashes in its results), then indexed."""
    root = tmp_path / "data"
    make_media(root)
    summary = scan(str(root), ScanOptions(jobs=1))
    assert summary.counts  # the scan ran and wrote its results to the (test-private) state folder
    index = str(tmp_path / "data.arrow")
    build_index(str(root), index)
    return root, index


def _pack(index, out, **kw):
    s = pack_shards(index, str(out), PackOptions(samples_per_shard=5, **{"shuffle": 3, **kw}))  # packs compared
    assert s.complete, s.failures
    return s


def test_scan_hashes_are_reused_and_the_shards_are_byte_identical_to_hashing(scanned, tmp_path):
    root, index = scanned
    rows = len(open_index(index))
    reused = _pack(index, tmp_path / "reused")
    assert reused.scan_hashes == rows and reused.hashed == 0 and "last scan" in reused.scan_results
    hashed = _pack(index, tmp_path / "hashed", rehash=True)
    assert hashed.scan_hashes == 0 and hashed.hashed == rows
    assert folder_digests(tmp_path / "reused") == folder_digests(tmp_path / "hashed")
    assert main(["verify", str(tmp_path / "reused")]) == 0
    # files bigger than the inline limit are streamed; with the scan's hash they are copied once
    streamed = _pack(index, tmp_path / "streamed", inline_limit=512)
    assert streamed.hashed == 0
    assert folder_digests(tmp_path / "streamed") == folder_digests(tmp_path / "hashed")


def test_a_file_touched_since_the_scan_is_hashed_again(scanned, tmp_path):
    root, index = scanned
    victim = root / "dogs" / "img001.jpg"
    st = os.stat(victim)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # same bytes, newer mtime
    build_index(str(root), index)  # the index is current; the scan results are not, for this one file
    s = _pack(index, tmp_path / "s")
    assert s.hashed == 1 and s.scan_hashes == len(open_index(index)) - 1
    assert main(["verify", str(tmp_path / "s")]) == 0


def test_the_trust_is_size_and_mtime_and_verify_catches_a_rewrite_that_kept_both(scanned, tmp_path, capsys):
    """A file rewritten in place with the same size and mtime keeps the scan's (old) checksum,
    as the scan cache would; dsclean verify hashes every member and reports it; rehash packs it right."""
    root, index = scanned
    victim = root / "cats" / "img000.jpg"
    st = os.stat(victim)
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0xFF
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    build_index(str(root), index)
    _pack(index, tmp_path / "trusted")
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "trusted"), "--json"]) == 1
    problems = [p for shard in json.loads(capsys.readouterr().out)["shards"] for p in shard["problems"]]
    by_ext = {p["member"].split(".")[1]: p["problem"] for p in problems}  # one sample: media and its json
    assert set(by_ext) == {"jpg", "json"} and "checksum mismatch" in by_ext["jpg"]
    _pack(index, tmp_path / "rehashed", rehash=True)
    assert (
        main(
            ["pack", index, "-o", str(tmp_path / "cli"), "--samples-per-shard", "5", "--shuffle", "3", "--rehash", "-q"]
        )
        == 0
    )
    assert main(["verify", str(tmp_path / "rehashed")]) == 0 and main(["verify", str(tmp_path / "cli")]) == 0
    packed = open_index(str(tmp_path / "rehashed" / "index.arrow"), extra={"checksum": pa.binary(16)})
    row = next(r for r in range(len(packed)) if packed.path_bytes(r) == b"cats/img000.jpg")
    assert bytes(packed.extra["checksum"][row]) == content_hash(bytes(data))


def test_without_scan_results_every_file_is_hashed(tmp_path):
    root = tmp_path / "data"
    make_media(root)
    index = str(tmp_path / "data.arrow")
    build_index(str(root), index)
    s = _pack(index, tmp_path / "s")
    assert s.scan_hashes == 0 and s.hashed == s.samples and s.scan_results.startswith("none")


@pytest.mark.parametrize("rehash", [False, True])
def test_batches_in_bulk_or_sample_by_sample_give_the_same_shards(scanned, tmp_path, monkeypatch, rehash):
    root, index = scanned
    ref = _pack(index, tmp_path / "ref", rehash=rehash)
    monkeypatch.setattr(write, "_BATCH_ROWS", 3)  # many batches, a few bytes each
    monkeypatch.setattr(write, "_SYNC_EVERY", 1)  # a background sync after every write
    monkeypatch.setattr(write, "_FLUSH_BYTES", 1000)
    small = _pack(index, tmp_path / "small", rehash=rehash)
    monkeypatch.setattr(write, "_bulk_batch", lambda *a: None)  # every batch sample by sample
    slow = _pack(index, tmp_path / "slow", rehash=rehash)
    assert ref.hashed == small.hashed == slow.hashed == (ref.samples if rehash else 0)
    assert folder_digests(tmp_path / "ref") == folder_digests(tmp_path / "small") == folder_digests(tmp_path / "slow")


def test_the_fast_json_record_is_what_json_dumps_writes():
    r = random.Random(7)
    alphabet = ['"', "\\", "A", "\u263a", "\xe9", "\n", "\U0001f600", "\x7f"]
    for _ in range(3000):
        rel = bytes(r.randrange(1, 256) for _ in range(r.randrange(1, 24)))
        classes = ["".join(r.choice(alphabet) for _ in range(3)) for _ in range(3)]
        label = r.choice([-1, 0, 2, 7])  # 7: a label without a class name
        facts = {
            k: r.choice([None, r.randrange(0, 10**12)])
            for k in ("width", "height", "sample_rate", "frames", "channels")
        }
        args = (
            path_fields(rel),
            label,
            classes,
            r.choice(["image", "audio"]),
            r.randrange(10**11),
            os.urandom(16),
            facts,
        )
        assert int_facts_record(*args) == _slow_record(*args)
    # facts that are not all integers take the encoder's path
    rec = json_record(
        b"a.wav",
        label=0,
        classes=["x"],
        kind="audio",
        size=1,
        checksum=bytes(16),
        facts={"duration": 1.5, "width": None},
    )
    assert json.loads(rec)["duration"] == 1.5


def test_a_scan_with_facts_none_has_no_hashes_so_pack_hashes_every_file(tmp_path, capsys):
    """``scan --facts none`` records no content_hash: pack hashes each file itself, and the checksums are right."""
    root = tmp_path / "data"
    make_media(root)
    assert main(["scan", str(root), "--facts", "none", "-q", "-j", "1"]) == 0
    index = str(tmp_path / "data.arrow")
    build_index(str(root), index)
    s = _pack(index, tmp_path / "s")
    assert s.scan_hashes == 0 and s.hashed == s.samples == len(open_index(index))
    assert "last scan" in s.scan_results  # the results were found; they just hold no hash
    _pack(index, tmp_path / "h", rehash=True)
    assert folder_digests(tmp_path / "s") == folder_digests(tmp_path / "h")
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "s")]) == 0
    packed = open_index(str(tmp_path / "s" / "index.arrow"), extra={"checksum": pa.binary(16)})
    for r in range(len(packed)):
        data = (root / os.fsdecode(packed.path_bytes(r))).read_bytes()
        assert bytes(packed.extra["checksum"][r]) == content_hash(data)


def _python_path_hash(path: bytes) -> int:
    """path_hashes written out for one path: sum of byte * prime**(i + 1), xor length, times prime, mod 2**64."""
    prime, mask = 0x100000001B3, (1 << 64) - 1
    h = sum(b * pow(prime, i + 1, 1 << 64) for i, b in enumerate(path)) & mask
    return ((h ^ len(path)) * prime) & mask


def test_path_hashes_match_the_plain_definition_across_blocks_and_empty_rows(monkeypatch):
    import numpy as np

    from dsclean.pack import scanhashes

    monkeypatch.setattr(scanhashes, "_HASH_ROWS", 7)  # many blocks, rows on both sides of their edges
    rng = random.Random(5)
    paths = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, 30, 200]))) for _ in range(60)]
    paths += [b"a", b"a\0", b"ab", b"ba", b""]
    offsets = np.concatenate(([0], np.cumsum([len(p) for p in paths]))).astype(np.int64) + 3
    data = np.frombuffer(b"xyz" + b"".join(paths), np.uint8)  # the column starts 3 bytes in
    got = scanhashes.path_hashes(offsets, data)
    assert got.tolist() == [_python_path_hash(p) for p in paths]
    assert len(set(got[-5:].tolist())) == 5


def test_a_hash_collision_only_costs_a_hash(scanned, tmp_path, monkeypatch):
    """Every path hashing alike: the exact path comparison keeps the matches right, the rest are hashed."""
    import numpy as np

    from dsclean.pack import scanhashes

    _, index = scanned
    reference = _pack(index, tmp_path / "reference")
    monkeypatch.setattr(scanhashes, "path_hashes", lambda offsets, data: np.zeros(len(offsets) - 1, np.uint64))
    collided = _pack(index, tmp_path / "collided")
    assert collided.scan_hashes == 1 and collided.hashed == reference.scan_hashes - 1
    assert folder_digests(tmp_path / "collided") == folder_digests(tmp_path / "reference")


def test_a_job_array_with_parts_missing_gives_its_hashes_and_the_rest_is_hashed(tmp_path):
    """2 of 3 parts ran: pack reuses the checksums of their files and hashes the missing part's, says so, and
    writes the same bytes as hashing everything."""
    from dsclean.scanning.scanner import in_part

    root = tmp_path / "data"
    make_media(root)
    for part in (0, 1):
        scan(str(root), ScanOptions(shard=(part, 3), jobs=1))
    index = str(tmp_path / "data.arrow")
    build_index(str(root), index, jobs=1)
    idx = open_index(index)
    in_missing = sum(in_part(os.fsdecode(idx.path_bytes(r)), (2, 3)) for r in range(len(idx)))
    assert 0 < in_missing < len(idx)
    s = _pack(index, tmp_path / "s")
    assert s.scan_hashes == len(idx) - in_missing and s.hashed == in_missing
    assert "2 of the 3 parts" in s.scan_results and "part 2/3 never ran" in s.scan_results
    assert "the files of the missing parts are hashed here" in s.scan_results
    _pack(index, tmp_path / "hashed", rehash=True)
    assert folder_digests(tmp_path / "s") == folder_digests(tmp_path / "hashed")
