"""dsclean pack: shard layout, determinism, options, resuming, changed sources, a full disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from support import synth
from support.files import write
from support.packing import folder_digests, make_indexed, make_media

from dsclean.cli import main
from dsclean.errors import UserError
from dsclean.hashing import content_hash
from dsclean.index.build import build_index
from dsclean.index.store import open_index
from dsclean.pack.packer import PackOptions, finish_pack, pack_shards
from dsclean.pack.plan import make_layout, shuffled
from dsclean.pack.samples import sample_key

PY = sys.executable


def _members(tar: Path) -> list[str]:
    with tarfile.open(tar) as t:
        return t.getnames()


def _pack(index, out, **kw):
    return pack_shards(index, str(out), PackOptions(**kw))


def test_members_keys_json_and_the_packed_index(tmp_path):
    root, index = make_indexed(tmp_path)
    s = _pack(
        index, tmp_path / "shards", samples_per_shard=5, shuffle=None, ext_policy="keep"
    )  # index order, by format
    src = open_index(index)
    assert s.complete and s.samples == len(src) == 18 and s.shards == 4 and s.written == 4
    names = sum((_members(tmp_path / "shards" / f"data-{k:06d}.tar") for k in range(4)), [])
    # one sample = adjacent members, sorted by name, keyed by 16 hex digits of BLAKE2b of the path bytes
    keys = [sample_key(src.path_bytes(i)) for i in range(len(src))]
    assert [n.split(".")[0] for n in names[::3]] == keys  # index order, 3 members each (labelled)
    for i in range(0, len(names), 3):
        group = names[i : i + 3]
        assert group == sorted(group) and {n.split(".", 1)[1] for n in group} >= {"cls", "json"}
    exts = {n.split(".", 1)[1] for n in names} - {"cls", "json"}
    assert exts == {"jpg", "png", "wav", "flac"}  # canonical lower-case, .JPEG -> jpg, real format of a PNG named .jpg
    packed = open_index(
        str(tmp_path / "shards" / "index.arrow"),
        extra={"shard": pa.int32(), "offset": pa.int64(), "checksum": pa.binary(16)},
    )
    with tarfile.open(tmp_path / "shards" / "data-000000.tar") as t:
        t0 = {m.name: m for m in t.getmembers()}
    for row in range(len(packed)):
        rel = packed.path_bytes(row)
        with open(os.fsencode(root) + b"/" + rel, "rb") as f:
            data = f.read()
        assert bytes(packed.extra["checksum"][row]) == content_hash(data)
        assert packed.extra["shard"][row] == row // 5 and packed.sizes[row] == len(data)
        with open(tmp_path / "shards" / f"data-{row // 5:06d}.tar", "rb") as f:
            f.seek(int(packed.extra["offset"][row]))
            assert f.read(len(data)) == data
    # the json member of the non-UTF-8 name: path (surrogateescape) + path_b64 (exact bytes)
    row = next(r for r in range(len(packed)) if packed.path_bytes(r) == b"cats/caf\xe9.jpg")
    with tarfile.open(tmp_path / "shards" / f"data-{row // 5:06d}.tar") as t:
        rec = json.loads(t.extractfile(f"{sample_key(b'cats/caf' + bytes([0xE9]) + b'.jpg')}.json").read())
    assert rec["path_b64"] == "Y2F0cy9jYWbpLmpwZw==" and rec["class"] == "cats" and rec["label"] == 0
    assert rec["checksum"] == bytes(packed.extra["checksum"][row]).hex() and rec["kind"] == "image"
    # fixed header fields
    m = next(iter(t0.values()))
    assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (946684800, 0, 0, "", "", 0o644)
    shardlist = json.loads((tmp_path / "shards" / "shardindex.json").read_text())
    assert shardlist["__kind__"] == "wids-shard-index-v1" and shardlist["wids_version"] == 1
    assert [s["url"] for s in shardlist["shardlist"]] == [f"data-{k:06d}.tar" for k in range(4)]
    assert [s["nsamples"] for s in shardlist["shardlist"]] == [5, 5, 5, 3]
    assert [s["filesize"] for s in shardlist["shardlist"]] == [
        os.path.getsize(tmp_path / "shards" / s["url"]) for s in shardlist["shardlist"]
    ]


def test_unlabelled_index_has_no_cls_members(tmp_path):
    root = tmp_path / "flat"
    make_media(root, n_images=3, n_audio=0, odd_name=False)
    build_index(str(root), str(tmp_path / "i.arrow"), no_labels=True)
    _pack(str(tmp_path / "i.arrow"), tmp_path / "s")
    names = _members(tmp_path / "s" / "data-000000.tar")
    assert len(names) == 6 and not [n for n in names if n.endswith(".cls")]


def test_byte_identical_across_runs_jobs_and_shuffle_is_a_stable_permutation(tmp_path):
    _, index = make_indexed(tmp_path)
    _pack(index, tmp_path / "a", samples_per_shard=4, shuffle=7)
    time.sleep(0.01)
    _pack(index, tmp_path / "b", samples_per_shard=4, shuffle=7, jobs=2)
    assert folder_digests(tmp_path / "a") == folder_digests(tmp_path / "b")
    _pack(index, tmp_path / "c", samples_per_shard=4, shuffle=8)
    src = open_index(index)
    key_of = {sample_key(src.path_bytes(i)): i for i in range(len(src))}
    order_a = [key_of[n.split(".")[0]] for k in range(5) for n in _members(tmp_path / "a" / f"data-{k:06d}.tar")[::3]]
    order_c = [key_of[n.split(".")[0]] for k in range(5) for n in _members(tmp_path / "c" / f"data-{k:06d}.tar")[::3]]
    assert sorted(order_a) == list(range(len(src))) and order_a != list(range(len(src))) and order_a != order_c
    # the permutation is dsclean's own function of keys and seed (pinned: it must never change between versions)
    keys = np.array([1, 2, 3, 4, 5], np.uint64)
    assert shuffled(keys, 7).tolist() == shuffled(keys, 7).tolist()
    assert shuffled(keys, 7).tolist() == [0, 2, 4, 3, 1]


def test_shard_size_targets_bytes_and_options_are_checked(tmp_path):
    _, index = make_indexed(tmp_path)
    s = _pack(index, tmp_path / "s", shard_size=8 * 1024)
    sizes = [os.path.getsize(tmp_path / "s" / f"data-{k:06d}.tar") for k in range(s.shards)]
    assert (
        s.shards > 2 and max(sizes[:-1]) <= 8 * 1024 + 10240 + 4096
    )  # target plus the end record and one estimate's slack
    with pytest.raises(UserError, match="cannot be used together"):
        _pack(index, tmp_path / "x", shard_size=1000, samples_per_shard=3)
    for bad in ("data.tar", "{:06d}/x.tar", ".{:03d}.tar", "{}-{}.tar", "index.arrow{:.0s}"):
        with pytest.raises(UserError, match="--name"):
            _pack(index, tmp_path / "x", name=bad)
    s = _pack(index, tmp_path / "named", samples_per_shard=10, name="train-{:03d}.tar")
    assert sorted(p for p in os.listdir(tmp_path / "named") if p.endswith(".tar")) == ["train-000.tar", "train-001.tar"]


def _sample_bytes_in(tar: Path) -> dict[str, int]:
    """{key: bytes its members take in the tar (headers and padding)}, in shard order."""
    out: dict[str, int] = {}
    with tarfile.open(tar) as t:
        for m in t.getmembers():
            key = m.name.split(".")[0]
            out[key] = out.get(key, 0) + 512 + m.size + (-m.size % 512)
    return out


@pytest.mark.parametrize("size", [10240, 15000, 30 * 1024, 100 * 1024])
def test_shard_size_bounds_every_shard_file_and_packs_as_much_as_fits(tmp_path, size):
    """A shard's file is at most SIZE (tar files are whole 10,240-byte records: at most the largest
    multiple of 10,240 not above SIZE) unless it holds one sample; and the next sample would not have fit."""
    root = tmp_path / "data"
    make_media(root, n_images=24, n_audio=6)
    write(
        root, "cats/" + "/".join(["long-name-" * 10] * 4) + ".jpg", synth.jpeg(30, 30, seed=77)
    )  # a .json of two blocks
    index = str(tmp_path / "i.arrow")
    build_index(str(root), index)
    s = _pack(index, tmp_path / "s", shard_size=size)
    cap = size // 10240 * 10240
    shards = [tmp_path / "s" / f"data-{k:06d}.tar" for k in range(s.shards)]
    per_shard = [_sample_bytes_in(t) for t in shards]
    assert sum(map(len, per_shard)) == len(open_index(index)) and s.shards > 1
    for k, (tar, samples) in enumerate(zip(shards, per_shard)):
        filesize = os.path.getsize(tar)
        assert filesize % 10240 == 0 and filesize == -(-(sum(samples.values()) + 1024) // 10240) * 10240
        assert filesize <= cap or len(samples) == 1, (k, filesize, len(samples))
        if k + 1 < len(shards):  # closed only because the next sample would have taken it past SIZE
            nxt = next(iter(per_shard[k + 1].values()))
            assert sum(samples.values()) + nxt + 1024 > cap


def test_the_plans_sample_bytes_are_exact_or_an_upper_bound(tmp_path):
    from dsclean.pack.plan import sample_bytes

    root = tmp_path / "data"
    make_media(root)  # a non-UTF-8 name among them
    write(root, "dogs/" + "/".join(['\u00e9-"quoted"-' * 10] * 3) + ".jpg", synth.jpeg(20, 20, seed=5))  # a bound
    for labelled in (True, False):
        index = str(tmp_path / f"i{labelled}.arrow")
        build_index(str(root), index, no_labels=not labelled)
        out = tmp_path / f"s{labelled}"
        _pack(index, out, samples_per_shard=100)
        actual = _sample_bytes_in(out / "data-000000.tar")
        idx = open_index(index)
        est = sample_bytes(idx)
        for i in range(len(idx)):
            rel = idx.path_bytes(i)
            got = actual[sample_key(rel)]
            assert est[i] >= got
            if len(rel) < 150 and b"quoted" not in rel:
                assert est[i] == got, rel


@pytest.mark.parametrize("option", ["--samples-per-shard", "--jobs"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_count_below_one_gets_one_message(tmp_path, capsys, option, value):
    """0 and a negative number are refused alike: 'must be 1 or more' (not '0 or more' for -3)."""
    with pytest.raises(SystemExit) as exit_:
        main(["pack", str(tmp_path / "i.arrow"), "-o", str(tmp_path / "s"), option, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {option}" in err and f"'{value}' must be 1 or more" in err, err
    with pytest.raises(UserError, match=f"--samples-per-shard must be 1 or more, not {value}"):
        make_layout(None, int(value), None, None)  # the Python API says the same


def test_output_must_be_empty_or_the_same_pack(tmp_path, capsys):
    root, index = make_indexed(tmp_path)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["pack", index, "-o", str(tmp_path / "busy")]) == 2
    assert "is not empty" in capsys.readouterr().err and (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    assert main(["pack", index, "-o", str(tmp_path / "s"), "--samples-per-shard", "4", "-q"]) == 0
    assert main(["pack", index, "-o", str(tmp_path / "s"), "--samples-per-shard", "5"]) == 2
    assert "samples_per_shard 4 (asked: 5)" in capsys.readouterr().err
    write(root, "cats/new.jpg", synth.jpeg(10, 10, seed=5))
    build_index(str(root), index)  # another index content: refused
    assert main(["pack", index, "-o", str(tmp_path / "s"), "--samples-per-shard", "4"]) == 2
    assert "packs another index" in capsys.readouterr().err
    assert main(["pack", index, "-o", str(root / "packed")]) == 2  # never into the dataset
    assert "inside the dataset" in capsys.readouterr().err and not (root / "packed").exists()
    killed = tmp_path / "killed-at-start"  # a run killed before its pack.json was in place
    killed.mkdir()
    (killed / ".dsclean.lock").write_bytes(b"")
    (killed / ".pack.json.x1y2.tmp").write_text("{")
    assert main(["pack", index, "-o", str(killed), "-q"]) == 0
    assert not (killed / ".pack.json.x1y2.tmp").exists()  # removed under the folder's lock
    with pytest.raises(SystemExit) as exit_:
        main(["pack", index, "-o", str(tmp_path / "s2"), "--shard-size", "lots"])
    assert exit_.value.code == 2 and "is not a size" in capsys.readouterr().err


def test_changed_and_missing_sources_stop_the_pack_or_are_skipped(tmp_path, capsys):
    root, index = make_indexed(tmp_path)
    victim = root / "dogs" / "img001.jpg"
    victim.write_bytes(victim.read_bytes() + b"\0")  # changed since indexing
    os.unlink(root / "speech" / "tone000.wav")  # gone since indexing
    assert main(["pack", index, "-o", str(tmp_path / "s"), "--samples-per-shard", "4", "--no-shuffle"]) == 3
    err = capsys.readouterr().err
    assert f"{victim}: changed since it was indexed (size" in err and "--skip-changed" in err
    assert not (tmp_path / "s" / "index.arrow").exists()
    assert not [n for n in os.listdir(tmp_path / "s") if n.startswith(".data-")]  # no temp left behind
    assert main(["pack", index, "-o", str(tmp_path / "s"), "--samples-per-shard", "4", "--skip-changed", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["complete"] and out["samples"] == 16
    assert sorted(x["path"] for x in out["skipped"]) == ["dogs/img001.jpg", "speech/tone000.wav"]
    assert "gone since it was indexed" in " ".join(x["why"] for x in out["skipped"])
    assert main(["verify", str(tmp_path / "s")]) == 0


def test_a_rerun_of_a_skip_changed_pack_lists_the_rows_not_in_the_shards_and_how_to_get_them_in(tmp_path, capsys):
    """Once a --skip-changed pack has published, running it again (without --skip-changed, the file back) must
    not say nothing is missing: it lists the index rows not in the shards, with the shard each belongs in."""
    root, index = make_indexed(tmp_path)
    out, args = tmp_path / "s", ["pack", index, "-o", str(tmp_path / "s"), "--samples-per-shard", "5"]
    victim = root / "dogs" / "img001.jpg"
    os.rename(victim, tmp_path / "away.jpg")
    assert main([*args, "--skip-changed", "-q"]) == 0
    os.rename(tmp_path / "away.jpg", victim)  # back, unchanged
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["complete"] and summary["samples"] == 17 and summary["written"] == 0
    (left,) = summary["skipped"]
    shard = left["why"].rpartition(" it belongs in ")[2]
    assert left["path"] == "dogs/img001.jpg" and shard.startswith("data-0000") and (out / shard).is_file()
    assert any(
        "1 of the index's 18 rows are not in the shards" in n and "delete the shards they belong in" in n
        for n in summary["notes"]
    )
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "1 samples left out" in text and "dogs/img001.jpg: left out by an earlier run" in text
    # as the note says: delete the shard it belongs in and run the same command
    os.unlink(out / shard)
    assert main([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["samples"] == 18 and summary["skipped"] == [] and summary["written"] == 1
    assert not [n for n in summary["notes"] if "not in the shards" in n]


def test_a_whole_pack_and_part_tasks_exclude_each_other_but_parts_run_side_by_side(tmp_path, capsys):
    """A whole pack removes shard temp files it finds: it must never run while a --part task writes (nor a part
    while a whole pack or --finish runs); the parts of one job array run at once. The locks are real flocks
    on their own open files, as another process holds them."""
    from dsclean.pack import state

    _, index = make_indexed(tmp_path)
    out = tmp_path / "s"
    out.mkdir()
    args = ["pack", index, "-o", str(out), "--samples-per-shard", "5", "-q"]
    with state.locked(str(out), (0, 2)):  # part 0/2 is writing
        assert main(args) == 2
        assert "another dsclean pack is writing this folder" in capsys.readouterr().err
        assert main([*args, "--finish"]) == 2
        assert main([*args, "--part", "0/2"]) == 2  # the same part twice
        assert "is writing part 0/2" in capsys.readouterr().err
        assert main([*args, "--part", "1/2"]) == 0  # another part of the array: fine
    with state.locked(str(out), None):  # a whole pack (or --finish) is writing
        assert main([*args, "--part", "0/2"]) == 2
        assert "another dsclean pack is writing this folder" in capsys.readouterr().err
    assert main([*args, "--part", "0/2"]) == 0 and main([*args, "--finish"]) == 0
    assert main(["verify", str(out)]) == 0


def test_scheduler_without_the_dask_backend_is_refused_not_ignored(tmp_path, capsys):
    _, index = make_indexed(tmp_path)
    for extra in ([], ["--finish"], ["--part", "0/2"]):
        assert (
            main(["pack", index, "-o", str(tmp_path / "s"), "--scheduler", "tcp://scheduler.example:8786", *extra]) == 2
        )
        assert "--scheduler goes with --backend dask (the backend is loky)" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def _touch_all(root: Path) -> None:
    for dirpath, _, names in os.walk(root):
        for n in names:
            st = os.stat(os.path.join(dirpath, n))
            os.utime(os.path.join(dirpath, n), ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # changed since indexing


def test_skip_changed_with_every_file_changed_is_refused_and_leaves_no_empty_shards(tmp_path, capsys):
    """Like index refusing an empty index: no set of empty shards is published (webdataset refuses one);
    exit 2 saying why, nothing of the pack left in the folder, and the same command works on a rebuilt index."""
    root, index = make_indexed(tmp_path, odd_name=False)  # (capsys's stderr cannot print a non-UTF-8 name)
    _touch_all(root)
    out = tmp_path / "s"
    argv = ["pack", index, "-o", str(out), "--samples-per-shard", "4", "--skip-changed", "-q"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{index}: all 16 samples were left out (--skip-changed" in err and "changed since it was indexed" in err
    assert "rebuild the index" in err
    assert [n for n in os.listdir(out) if not n.startswith(".dsclean")] == []  # no shard, no pack.json, no temp
    with pytest.raises(UserError, match="all 16 samples were left out"):
        _pack(index, out, samples_per_shard=4, skip_changed=True)  # the Python API too
    # a job array: every part is empty; --finish refuses and removes the shards and part markers
    for i in range(2):
        assert _pack(index, tmp_path / "parts", samples_per_shard=4, skip_changed=True, part=(i, 2)).written == 2
    with pytest.raises(UserError, match="all 16 samples were left out"):
        finish_pack(index, str(tmp_path / "parts"), PackOptions(samples_per_shard=4, skip_changed=True))
    assert [n for n in os.listdir(tmp_path / "parts") if not n.startswith(".dsclean")] == []
    build_index(str(root), index)  # the index brought up to date: the same command packs
    assert main(argv) == 0 and main(["verify", str(out)]) == 0


def test_big_files_are_streamed_and_checked_twice(tmp_path):
    root, index = make_indexed(tmp_path)
    a = _pack(index, tmp_path / "inline", samples_per_shard=6, shuffle=5)
    b = pack_shards(index, str(tmp_path / "streamed"), PackOptions(samples_per_shard=6, shuffle=5, inline_limit=512))
    assert a.complete and b.complete
    assert folder_digests(tmp_path / "inline") == folder_digests(tmp_path / "streamed")


def test_npy_source_index_packs_the_same(tmp_path):
    root, index = make_indexed(tmp_path)
    build_index(str(root), str(tmp_path / "data.npy"))
    _pack(index, tmp_path / "a", samples_per_shard=6, shuffle=5)
    _pack(str(tmp_path / "data.npy"), tmp_path / "b", samples_per_shard=6, shuffle=5)
    da, db = folder_digests(tmp_path / "a"), folder_digests(tmp_path / "b")
    assert {k: v for k, v in da.items() if k.endswith(".tar")} == {k: v for k, v in db.items() if k.endswith(".tar")}


def test_a_deleted_shard_is_rebuilt_byte_identical(tmp_path):
    _, index = make_indexed(tmp_path)
    _pack(index, tmp_path / "s", samples_per_shard=4)
    before = folder_digests(tmp_path / "s")
    os.unlink(tmp_path / "s" / "data-000002.tar")
    keep = os.stat(tmp_path / "s" / "data-000001.tar")
    s = _pack(index, tmp_path / "s", samples_per_shard=4)
    assert s.written == 1 and s.reused == 4 and s.resumed and folder_digests(tmp_path / "s") == before
    assert os.stat(tmp_path / "s" / "data-000001.tar").st_ino == keep.st_ino  # not rewritten


def test_shard_temp_files_left_by_an_interrupted_pack_are_removed_by_the_next(tmp_path):
    """A --jobs 2 worker leaves its finished shard in a temp file for the parent to rename; a second Ctrl-C (or a
    kill) of the parent leaves it there. The next pack of that folder removes such files, and only those."""
    _, index = make_indexed(tmp_path)
    _pack(index, tmp_path / "s", samples_per_shard=4)
    before = folder_digests(tmp_path / "s")
    left = tmp_path / "s" / ".data-000001.tar.k3x9q2.tmp"
    left.write_bytes(b"\0" * 4096)
    theirs = tmp_path / "s" / ".notes.tmp"  # not a shard's: not ours to remove
    theirs.write_text("x")
    s = _pack(index, tmp_path / "s", samples_per_shard=4)
    assert s.reused == 5 and not left.exists() and theirs.exists()
    theirs.unlink()
    assert folder_digests(tmp_path / "s") == before


@pytest.mark.slow  # kill -9 mid-pack: 300 shards packed three times
@pytest.mark.parametrize("durability", [[], ["--no-fsync"]], ids=["fsync", "no-fsync"])
def test_kill_9_mid_pack_then_rerun_finishes_only_the_missing_shards(tmp_path, durability):
    root = tmp_path / "data"
    for i in range(300):
        write(root, f"c{i % 3}/{i:04d}.jpg", synth.jpeg(64, 64, seed=i))
    index = str(tmp_path / "i.arrow")
    build_index(str(root), index)
    cmd = [PY, "-m", "dsclean", "pack", index, "--samples-per-shard", "1", "--shuffle", "9", "-q", "-o"]  # 300 shards
    subprocess.run(cmd + [str(tmp_path / "ref")], check=True)  # the reference: fsynced, uninterrupted
    out = tmp_path / "killed"
    cmd[-1:-1] = durability  # (before -o) a killed process's written pages survive it, fsynced or not
    proc = subprocess.Popen(cmd + [str(out)])
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and len([n for n in os.listdir(out) if n.endswith(".tar")] if out.exists() else []) < 20
    ):
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    done = {n: os.stat(out / n).st_ino for n in os.listdir(out) if n.endswith(".tar")}
    assert 20 <= len(done) < 300 and not (out / "index.arrow").exists(), "the pack was not killed mid-way"
    r = subprocess.run(cmd + [str(out), "--json"], capture_output=True, text=True, check=True)
    summary = json.loads(r.stdout)
    assert summary["reused"] == len(done) and summary["written"] == 300 - len(done) and summary["complete"]
    assert all(os.stat(out / n).st_ino == ino for n, ino in done.items())  # the finished shards were not rewritten
    assert folder_digests(out) == folder_digests(tmp_path / "ref")
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_no_fsync_writes_the_same_files_without_a_single_fsync(tmp_path, monkeypatch):
    _, index = make_indexed(tmp_path)
    calls = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, real=real, name=name: (calls.append(name), real(fd))[1])
    # jobs 1: the shards are written on threads of this process, so every fsync passes through os here
    assert (
        main(["pack", index, "-o", str(tmp_path / "synced"), "--samples-per-shard", "5", "--shuffle", "1", "-q"]) == 0
    )
    assert calls.count("fsync") >= 4  # by default every shard is fsynced before its rename
    calls.clear()
    assert (
        main(
            [
                "pack",
                index,
                "-o",
                str(tmp_path / "fast"),
                "--samples-per-shard",
                "5",
                "--shuffle",
                "1",
                "-q",
                "--no-fsync",
            ]
        )
        == 0
    )
    assert calls == []
    assert folder_digests(tmp_path / "fast") == folder_digests(tmp_path / "synced")
    assert not [n for n in os.listdir(tmp_path / "fast") if n.endswith(".tmp")]
    # resuming a --no-fsync pack with the default (and the other way round) is the same pack
    os.unlink(tmp_path / "fast" / "data-000001.tar")
    assert main(["pack", index, "-o", str(tmp_path / "fast"), "--samples-per-shard", "5", "-q"]) == 0
    assert folder_digests(tmp_path / "fast") == folder_digests(tmp_path / "synced")
    assert main(["verify", str(tmp_path / "fast")]) == 0


def test_a_resume_refuses_a_shard_of_zeros_as_a_crash_after_no_fsync_can_leave(tmp_path):
    """The data of a shard written without fsync may be zeros after a power loss (its size kept):
    a resume must not read it as an empty shard whose samples were all left out."""
    _, index = make_indexed(tmp_path)
    out = tmp_path / "s"
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "5", "-q", "--no-fsync"]) == 0
    for name in ("index.arrow", "shardindex.json"):  # the crash came before the pack finished
        os.unlink(out / name)
    victim = out / "data-000001.tar"
    victim.write_bytes(bytes(os.path.getsize(victim)))
    with pytest.raises(UserError, match="data-000001.tar: .* not a shard pack finished; remove that shard"):
        _pack(index, out, samples_per_shard=5)
    os.unlink(victim)  # as the message says: the same command then rebuilds it
    assert _pack(index, out, samples_per_shard=5).written == 1
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize("member", ["media", "cls"])
def test_a_resume_refuses_a_finished_shard_whose_bytes_were_lost_after_no_fsync(tmp_path, member, capsys):
    """A page of a finished shard's data lost in a crash after --no-fsync reads as zeros, headers and .json
    intact: the resume hashes the media (and reads the .cls), refuses the shard naming it, publishes nothing."""
    _, index = make_indexed(tmp_path)
    out = tmp_path / "s"
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "5", "-q", "--no-fsync"]) == 0
    for name in ("index.arrow", "shardindex.json", "data-000003.tar"):  # the crash came before the pack finished
        os.unlink(out / name)
    victim = out / "data-000001.tar"
    with tarfile.open(victim) as t:
        m = next(
            m for m in t.getmembers() if (m.name.endswith(".cls")) == (member == "cls") and not m.name.endswith(".json")
        )
    with open(victim, "r+b") as f:
        f.seek(m.offset_data)
        f.write(bytes(m.size))
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "5", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"error: {victim}: sample {m.name.split('.')[0]}: " in err and "remove that shard and pack again" in err
    assert not (out / "index.arrow").exists()
    os.unlink(victim)  # as the message says: the same command then rebuilds it
    assert _pack(index, out, samples_per_shard=5).written == 1  # (the refused run wrote data-000003.tar)
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize("damage", ["cut", "empty", "cut mid-member"])
def test_a_resume_names_a_cut_or_empty_shard(tmp_path, damage, capsys):
    """A shard cut short (or left empty) by a crash stops the resume with an error naming that shard."""
    _, index = make_indexed(tmp_path)
    out = tmp_path / "s"
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "5", "-q"]) == 0
    for name in ("index.arrow", "shardindex.json"):  # the crash came before the pack finished
        os.unlink(out / name)
    victim = out / "data-000002.tar"
    keep = {"cut": 10240 if os.path.getsize(victim) > 10240 else 1024, "empty": 0, "cut mid-member": 700}[damage]
    os.truncate(victim, keep)
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "5", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"error: {victim}: " in err and "remove that shard and pack again" in err
    os.unlink(victim)  # as the message says: the same command then rebuilds it
    assert _pack(index, out, samples_per_shard=5).written == 1
    assert main(["verify", str(out)]) == 0


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 1 MiB tmpfs mount (tests run as root)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_read_only_output_is_bad_input_before_anything_is_written(tmp_path, small_tmpfs, capsys):
    """-o on a read-only file system (a real tmpfs remounted ro): exit 2 naming the folder, not 3 ("incomplete"),
    whether pack would create the folder, finds it empty, or would resume a pack there."""
    _, index = make_indexed(tmp_path)
    (small_tmpfs / "empty").mkdir()
    assert main(["pack", index, "-o", str(small_tmpfs / "done"), "--samples-per-shard", "5", "-q"]) == 0
    for name in ("index.arrow", "shardindex.json"):  # a pack to resume
        os.unlink(small_tmpfs / "done" / name)
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    try:
        for target in ("new", "empty", "done"):
            out = small_tmpfs / target
            assert main(["pack", index, "-o", str(out), "--samples-per-shard", "5", "-q"]) == 2, target
            err = capsys.readouterr().err
            assert f"error: {out}: cannot write the pack there (Read-only file system" in err, err
            assert "Traceback" not in err
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_tmpfs)], check=True)
    assert sorted(os.listdir(small_tmpfs)) == ["done", "empty"] and os.listdir(small_tmpfs / "empty") == []


@pytest.mark.parametrize("jobs", ["1", "2"])  # 2: loky workers leave complete temp files, this process renames
def test_a_full_disk_leaves_no_partial_shard_named_as_a_shard(tmp_path, small_tmpfs, capsys, jobs):
    root = tmp_path / "data"
    for i in range(40):
        write(root, f"c{i % 2}/{i:03d}.png", synth.png(160, 160, seed=i))  # ~28 KB each, ~1.1 MB in all
    index = str(tmp_path / "i.arrow")
    build_index(str(root), index)
    out = small_tmpfs / "shards"
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "4", "--jobs", jobs]) == 3
    err = capsys.readouterr().err
    assert "cannot write the shard" in err and "No space left on device" in err
    names = os.listdir(out)
    shards = [n for n in names if n.endswith(".tar")]
    assert shards and not [n for n in names if n.endswith(".tmp")] and "index.arrow" not in names
    for n in shards:  # every file named as a shard is a complete one
        with tarfile.open(out / n) as t:
            assert len(t.getnames()) == 12
    # space freed (here: the folder moved to a bigger disk), the same command finishes it
    moved = tmp_path / "moved"
    subprocess.run(["cp", "-a", str(out), str(moved)], check=True)
    assert main(["pack", index, "-o", str(moved), "--samples-per-shard", "4", "-q"]) == 0
    assert main(["verify", str(moved)]) == 0
    seed = json.loads((moved / "pack.json").read_text())["layout"]["shuffle"]  # (the resume kept it)
    assert (
        main(["pack", index, "-o", str(tmp_path / "ref"), "--samples-per-shard", "4", "--shuffle", str(seed), "-q"])
        == 0
    )
    assert folder_digests(moved) == folder_digests(tmp_path / "ref")


def test_audio_only_and_images_only_pack(tmp_path):
    root = tmp_path / "audio"
    make_media(root, n_images=0, n_audio=5, odd_name=False)
    build_index(str(root), str(tmp_path / "a.arrow"))
    s = _pack(str(tmp_path / "a.arrow"), tmp_path / "s")
    assert s.complete and s.samples == 5 and s.shards == 1


def test_sigint_finishes_the_shard_in_hand_then_exits_130(tmp_path):
    import signal

    root = tmp_path / "data"
    for i in range(100):
        write(root, f"c{i % 2}/{i:03d}.jpg", synth.jpeg(32, 32, seed=i))
    index = str(tmp_path / "i.arrow")
    build_index(str(root), index)
    out = tmp_path / "s"
    cmd = [PY, "-m", "dsclean", "pack", index, "--samples-per-shard", "1", "-q", "-o", str(out)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(out.glob("*.tar")) if out.exists() else []) < 5:
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    names = os.listdir(out)
    assert 5 <= len([n for n in names if n.endswith(".tar")]) < 100 and not [n for n in names if n.endswith(".tmp")]
    assert subprocess.run(cmd, check=True).returncode == 0 and main(["verify", str(out)]) == 0


def test_a_second_signal_makes_the_shards_on_threads_give_up_without_a_trace(tmp_path):
    from dsclean.interrupts import StopRequest
    from dsclean.pack import packer, runner
    from dsclean.pack.write import write_shard

    tasks = runner.run_tasks(
        time.sleep, [0.01] * 4, backend="loky", jobs=1, scheduler=None, stop=StopRequest(), overlap=True
    )
    next(tasks)
    with pytest.raises(KeyboardInterrupt):
        tasks.throw(KeyboardInterrupt)  # what the second SIGINT raises in the loop
    assert runner.ABANDONED.is_set()
    _, index = make_indexed(tmp_path)
    out = tmp_path / "s"
    out.mkdir()
    try:
        ctx = packer._prepare(index, str(out), PackOptions())
        result = write_shard(packer._job(ctx, 0, PackOptions()))
    finally:
        runner.ABANDONED.clear()
    assert "interrupted" in result.error and os.listdir(out) == []


def test_the_packed_index_keeps_the_source_metadata_so_the_shards_load_and_verify_what_the_index_ships(
    tmp_path, capsys
):
    """An index built with --include-warn truncated loads its cut JPEG leniently; so must its shards, and
    verify --decode must judge that sample with the options the index recorded (a note, not a problem)."""
    import dsclean
    from dsclean.index.store import read_meta
    from dsclean.scanning.check import CheckOptions
    from dsclean.scanning.scanner import ScanOptions, scan

    root = tmp_path / "data"
    for i in range(3):
        write(root, f"a/ok{i}.jpg", synth.jpeg(64, 64, seed=i))
    write(root, "a/cut.jpg", synth.truncate(synth.jpeg(200, 200, seed=9), 0.8))
    scan(str(root), ScanOptions(check=CheckOptions(lenient=True), jobs=1, report_dir=str(tmp_path / "r")))
    index = str(tmp_path / "i.arrow")
    build_index(str(root), index, include_warn=["truncated"])
    s = _pack(index, tmp_path / "shards")
    assert s.complete and s.samples == 4
    source, packed = read_meta(index), read_meta(str(tmp_path / "shards" / "index.arrow"))
    for key in (
        "include_warn",
        "check_options",
        "files",
        "symlinks",
        "extensions",
        "checked",
        "created",
        "root",
        "classes",
        "labels",
        "tree",
    ):
        assert packed[key] == source[key], key
    assert packed["rows"] == 4 and packed["packed"]["shards"] == 1
    for src in (index, str(tmp_path / "shards")):
        ds = dsclean.IndexedDataset(src)
        (cut,) = [i for i in range(len(ds)) if ds.path(i) == "a/cut.jpg"]
        assert ds[cut][0].size == (200, 200), src  # loads (the missing rows grey), as the scan judged it
    assert main(["verify", str(tmp_path / "shards"), "--decode"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok:") and "decode warning: truncated" in out
