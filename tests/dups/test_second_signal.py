"""dups' second signal: textures, whose perceptual hash is unstable, are also searched on anti-aliased hashes.

Real photographs (scikit-image's bundled pictures, ``tests/support/realphotos.py``): the brick-wall
copies the perceptual hash alone misses, the tiles of one texture that must stay apart, and the cost
(only unstable pictures are decoded again). Grouping rules on a hand-made inventory.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image
from support import realphotos

from dsclean.dups.collect import Inventory
from dsclean.dups.finder import DupsOptions, find_duplicates
from dsclean.dups.grouping import group
from dsclean.hashing import content_hash
from dsclean.quality.image import image_facts_from_path
from dsclean.quality.phash import hamming
from dsclean.quality.texture import WINDOWS, antialiased_hashes_from_path, is_unstable

photos = pytest.mark.skipif(not realphotos.available(), reason="scikit-image's bundled images are not installed")

#: photos whose hash is stable (sharpness under twice the luma variance, measured)
PHOTOS = ("camera.png", "chelsea.png", "coffee.png", "horse.png", "astronaut.png.tile0", "retina.jpg.tile2")


def _run(tmp_path, truth, **options):
    result = find_duplicates([str(tmp_path / "train"), str(tmp_path / "val")], DupsOptions(jobs=2, **options))
    groups = [[(m["root"], m["path"]) for m in rec["members"]] for rec in result.records()]
    return result, realphotos.score(groups, truth)


@photos
def test_brick_wall_resized_60_and_cropped_4_percent_are_found(tmp_path):
    truth = realphotos.write_wide_set(tmp_path, edits=("resize_60", "crop_4"), only=("brick.png",))
    result, s = _run(tmp_path, truth)
    assert s["sources"] == 4 and s["copies"] == 8
    assert s["found"] == 8, s  # the perceptual hash alone: 60% resizes 8-20 bits away, crops up to 12
    assert s["false_groups"] == 0
    assert result.summary.leaking_groups == 4  # every copy sits in val
    assert result.summary.near_stats["second_candidates"] > 0


@photos
def test_tiles_of_one_texture_are_never_grouped_and_their_copies_are_found(tmp_path):
    edits = ("resize_40", "resize_90", "crop_7", "crop_side_7", "jpeg_50")
    truth = realphotos.write_wide_set(tmp_path, edits=edits, only=realphotos.TEXTURES)
    result, s = _run(tmp_path, truth)
    assert s["sources"] == 12  # four tiles each of brick, grass and gravel: different walls, same texture
    assert s["false_groups"] == 0, s
    assert s["recall"] >= 0.95, s
    ns = result.summary.near_stats
    assert ns["unstable"] == ns["second_hashed"] == len(truth)  # every texture file is searched twice
    assert ns["rejected"] > 0  # the second signal proposed pairs of different tiles: the fine check refused them


@photos
def test_only_unstable_pictures_are_decoded_again(tmp_path):
    truth = realphotos.write_wide_set(tmp_path, edits=("resize_60",), only=("brick.png", "camera.png", "coffee.png"))
    result, s = _run(tmp_path, truth)
    ns = result.summary.near_stats
    assert ns["searched"] == len(truth) == 12
    assert ns["unstable"] == ns["second_hashed"] == 8  # the brick tiles and their copies, not the two photos
    assert s["found"] == s["copies"] and s["false_groups"] == 0


@photos
def test_textures_are_told_from_the_scans_stored_facts(tmp_path):
    """Roots scanned first: dups reads sharpness and contrast from the results and decodes only the textures."""
    from dsclean.scanning.scanner import ScanOptions, scan

    truth = realphotos.write_wide_set(tmp_path, edits=("resize_60", "crop_4"), only=("brick.png", "coffee.png"))
    state = str(tmp_path / "state")
    for split in ("train", "val"):
        scan(str(tmp_path / split), ScanOptions(report_dir=str(tmp_path / "rep" / split), state_dir=state, jobs=1))
    result = find_duplicates([str(tmp_path / "train"), str(tmp_path / "val")], DupsOptions(jobs=2, state_dir=state))
    groups = [[(m["root"], m["path"]) for m in rec["members"]] for rec in result.records()]
    s = realphotos.score(groups, truth)
    assert result.summary.from_results == len(truth) == 15 and result.summary.computed == 0
    assert result.summary.near_stats["unstable"] == 12  # the brick tiles and their copies
    assert s["found"] == s["copies"] and s["false_groups"] == 0, s


@photos
def test_a_file_that_kills_its_worker_in_the_second_pass_is_left_out_of_it(tmp_path):
    """Facts from (hand-written) scan results, so the first decode of the crashing file is the second pass."""
    import json
    import subprocess
    import sys

    import pyarrow.parquet as pq

    from dsclean.quality.files import facts_from_path

    realphotos.write_wide_set(tmp_path, edits=("resize_60",), only=("brick.png",))
    val = tmp_path / "val"
    os.rename(val / "resize_60/brick_png_tile0.jpg", val / "resize_60/brick_png_tile0__segfault__.jpg")
    rows = []
    for path in sorted(val.rglob("*.jpg")):
        st, ff = path.stat(), facts_from_path(str(path))
        rows.append(
            {
                "path": str(path.relative_to(val)).encode(),
                "status": "ok",
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "width": ff.width,
                "height": ff.height,
                "content_hash": ff.facts.content_hash,
                "phash": ff.facts.phash,
                "flags": ff.facts.flags,
                "sharpness": ff.facts.sharpness,
                "contrast": ff.facts.contrast,
            }
        )
    os.makedirs(val / ".dsclean")  # the results location of older scans, inside the root
    schema = pa.schema(
        [
            ("path", pa.binary()),
            ("status", pa.string()),
            ("size", pa.int64()),
            ("mtime_ns", pa.int64()),
            ("width", pa.int32()),
            ("height", pa.int32()),
            ("content_hash", pa.binary(16)),
            ("phash", pa.uint64()),
            ("flags", pa.list_(pa.string())),
            ("sharpness", pa.float32()),
            ("contrast", pa.float32()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), val / ".dsclean" / "scan_results.parquet")
    proc = subprocess.run(
        [sys.executable, "-m", "dsclean", "dups", str(tmp_path / "train"), str(val), "-j", "2", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "DSCLEAN_TEST_FAULTS": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["from_results"] == 4 and s["failed"] == []
    assert s["near_stats"]["unstable"] == 8 and s["near_stats"]["second_hashed"] == 7
    assert s["leaking_groups"] >= 3  # the three other tiles' copies are still found


@photos
def test_second_signal_off_searches_no_second_hash(tmp_path):
    truth = realphotos.write_wide_set(tmp_path, edits=("resize_60",), only=("brick.png",))
    result, _ = _run(tmp_path, truth, second_signal=False)
    ns = result.summary.near_stats
    assert ns["unstable"] == ns["second_hashed"] == ns["second_candidates"] == 0


@photos
def test_cli_summary_counts_the_second_signal(tmp_path, capsys):
    from dsclean.cli import main

    realphotos.write_wide_set(tmp_path, edits=("resize_60",), only=("brick.png",))
    assert main(["dups", str(tmp_path / "train"), str(tmp_path / "val"), "-j", "2"]) == 0
    out = capsys.readouterr().out
    assert "second signal: 8 textures (unstable hash) searched again on anti-aliased hashes" in out
    assert "4 groups span splits" in out


@photos
def test_textures_are_unstable_and_photos_are_not(tmp_path):
    sources = realphotos.sources()
    for name in [n for n in sources if n.startswith(realphotos.TEXTURES)] + list(PHOTOS):
        path = str(tmp_path / "x.png")
        sources[name].save(path)
        facts = image_facts_from_path(path)
        assert is_unstable(facts.sharpness, facts.contrast) == name.startswith(realphotos.TEXTURES), name


@photos
def test_antialiased_hash_holds_where_the_perceptual_hash_does_not(tmp_path):
    brick = {n: im for n, im in realphotos.sources().items() if n.startswith("brick.png")}
    phash_worst = aa_worst = 0
    for name, im in brick.items():
        im.save(tmp_path / "orig.png")
        im.resize((round(im.width * 0.6), round(im.height * 0.6)), Image.Resampling.LANCZOS).save(tmp_path / "r.png")
        cut = round(0.07 * im.width)
        im.crop((cut, 0, im.width, im.height)).save(tmp_path / "c.png")  # 7% off the left: the first side window
        orig = antialiased_hashes_from_path(str(tmp_path / "orig.png"))
        resized = antialiased_hashes_from_path(str(tmp_path / "r.png"))
        cropped = antialiased_hashes_from_path(str(tmp_path / "c.png"))
        assert len(orig) == len(WINDOWS)
        aa_worst = max(aa_worst, hamming(orig[0], resized[0]), hamming(orig[1], cropped[0]))
        p = [image_facts_from_path(str(tmp_path / f)).phash for f in ("orig.png", "r.png")]
        phash_worst = max(phash_worst, hamming(p[0], p[1]))
    assert aa_worst <= 6
    assert phash_worst > 8  # why the second signal exists: beyond the search radius


def _inv(hashes, unstable):
    n = len(hashes)
    return Inventory(
        roots=["train", "val"],
        root=np.array([k % 2 for k in range(n)], np.int32),
        path=pa.array([f"p{k}.png".encode() for k in range(n)], pa.binary()),
        size=np.full(n, 10, np.int64),
        mtime_ns=np.zeros(n, np.int64),
        kind=np.zeros(n, np.int8),
        pixels=np.full(n, 100, np.int64),
        content_hash=np.stack([np.frombuffer(content_hash(b"%d" % k), np.uint8) for k in range(n)]),
        has_hash=np.ones(n, bool),
        phash=np.array(hashes, np.uint64),
        has_phash=np.ones(n, bool),
        low_information=np.zeros(n, bool),
        unstable=np.array(unstable, bool),
    )


def _accept(a, b):
    return np.ones(len(a), np.int8)


def test_pairs_only_the_second_signal_proposes_are_checked_and_grouped():
    # p0, p1: textures whose perceptual hashes are far apart; their whole-picture second hashes are close
    # p2: a texture whose *window* hash is near p3's whole-picture hash (p3: a crop of p2)
    # p4, p5: stable photos: never decoded for a second hash
    far = [
        0x0,
        0xFFFF_FFFF_0000_0000,
        0x00FF_00FF_00FF_00FF,
        0xF0F0_F0F0_F0F0_F0F0,
        0x0F0F_0F0F_0F0F_0F0F,
        0xEEEE_0000_0000_EEEE,
    ]
    inv = _inv(far, [True, True, True, True, False, False])
    windows = len(WINDOWS)
    second_hashes = {
        0: [0x1234_5678_9ABC_DEF0] + [0] * (windows - 1),
        1: [0x1234_5678_9ABC_DEF1] + [1] * (windows - 1),
        2: [0xAAAA_AAAA_0000_0000] + [0x5555_5555_5555_5555] * (windows - 1),
        3: [0x5555_5555_5555_5557] + [0xAAAA_AAAA_AAAA_AAAA] * (windows - 1),
    }
    asked: list[int] = []

    def second(files):
        asked.extend(files.tolist())
        return np.array([second_hashes[int(f)] for f in files], np.uint64), np.ones(len(files), bool)

    groups, stats = group(inv, 8, _accept, second)
    assert sorted(asked) == [0, 1, 2, 3]  # stable pictures are never decoded for the second signal
    assert sorted(sorted(g.members) for g in groups) == [[0, 1], [2, 3]]
    assert {tuple(g.distance) for g in groups} == {(0, 1)}  # the distance of the hash that proposed the pair
    assert stats.unstable == stats.second_hashed == 4 and stats.second_candidates == 2
    # p0 and p1 share their window hashes 0 and 1 (1 bit apart): windows alone never make a pair
    assert stats.candidates == 2


def test_second_signal_candidates_still_go_through_the_fine_check():
    inv = _inv([0x0, 0xFFFF_FFFF_FFFF_FFFF], [True, True])

    def second(files):
        return np.array([[7] * len(WINDOWS) for _ in files], np.uint64), np.ones(len(files), bool)

    def reject(a, b):
        return np.zeros(len(a), np.int8)

    groups, stats = group(inv, 8, reject, second)
    assert groups == [] and stats.candidates == 1 and stats.rejected == 1


def test_undecodable_second_hash_is_left_out():
    inv = _inv([0x0, 0xFFFF_FFFF_FFFF_FFFF, 0xFFFF], [True, True, True])

    def second(files):
        return np.zeros((len(files), len(WINDOWS)), np.uint64), files != 1  # p1 cannot be decoded

    groups, stats = group(inv, 8, _accept, second)
    assert stats.second_hashed == 2
    assert [sorted(g.members) for g in groups] == [[0, 2]]  # p1's zero hash is not a hash
