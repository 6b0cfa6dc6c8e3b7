"""Other tools' WebDataset tars: every sample checked and named by shard and key, structure problems
found as streaming readers meet them, the deny-list written beside the shards and honoured by webdataset."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile

import pyarrow.parquet as pq
import pytest
import webdataset as wds
from support import synth

from dsclean import denylist
from dsclean.scanning.check import CheckOptions
from dsclean.shardsets.detect import detect, expand_braces
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set, verify_shard_set
from dsclean.shardsets.webdataset import base_plus_ext

FAST = dict(jobs=1, backend="threads")


def run_cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "dsclean", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def writer_shards(folder, shards=3, per=6, bad=((1, 2),)) -> dict:
    """Shards written by webdataset.TarWriter; the samples in ``bad`` (shard, i) truncated. Returns the bad keys."""
    os.makedirs(folder, exist_ok=True)
    bad_keys = {}
    for s in range(shards):
        with wds.TarWriter(os.path.join(folder, f"shard-{s:06d}.tar")) as w:
            for i in range(per):
                jpg = synth.jpeg(48, 48, seed=s * 100 + i)
                key = f"s{s}_{i:04d}"
                if (s, i) in bad:
                    jpg = synth.truncate(jpg, 0.5)
                    bad_keys[(f"shard-{s:06d}.tar", key)] = "truncated"
                w.write({"__key__": key, "jpg": jpg, "json": {"i": i}, "txt": "a caption"})
    return bad_keys


def test_webdataset_writer_shards_every_sample_checked_and_named(tmp_path):
    folder = tmp_path / "wds"
    bad = writer_shards(folder)
    s = scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), **FAST))
    assert (s.kind, s.shards, s.samples, s.checked) == ("webdataset", 3, 18, 18)
    assert s.counts == {"ok": 17, "bad": 1} and s.bad_reasons == {"truncated": 1}
    table = pq.read_table(s.results_path).to_pylist()
    assert len(table) == 18
    bad_rows = [(r["shard"], r["key"], r["member"]) for r in table if r["status"] == "bad"]
    assert bad_rows == [("shard-000001.tar", "s1_0002", "s1_0002.jpg")]
    assert {r["row"] for r in table} == {None}
    problems = [json.loads(line) for line in open(s.problems_path)]
    assert [(p["shard"], p["key"], p["reason"]) for p in problems] == [("shard-000001.tar", "s1_0002", "truncated")]
    dl = denylist.read_denylist(folder / "denylist.jsonl")
    assert dl.keys() == set(bad) and dl.entries[0]["checker"] and dl.entries[0]["source"] == "scan"
    # a second scan adds nothing twice
    s2 = scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), **FAST))
    assert s2.denied_added == 0 and s2.denied_already == 1
    assert len(denylist.read_denylist(folder / "denylist.jsonl").entries) == 1
    assert sorted(os.listdir(folder)) == ["denylist.jsonl", *(f"shard-{i:06d}.tar" for i in range(3))]


def test_dry_run_writes_no_denylist_and_verify_fails_until_denied(tmp_path):
    folder = tmp_path / "wds"
    writer_shards(folder)
    s = scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), dry_run=True, **FAST))
    assert s.bad == 1 and not (folder / "denylist.jsonl").exists()
    v = verify_shard_set([str(folder)], ShardScanOptions(**FAST))
    assert not v.ok and v.per_shard["shard-000001.tar"]["problems"][0]["key"] == "s1_0002"
    scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), **FAST))
    v = verify_shard_set([str(folder)], ShardScanOptions(**FAST))
    assert v.ok and v.denied_bad == 1 and v.denylist_report["samples"] == 1


def test_tarfile_img2dataset_layout_and_gzip(tmp_path):
    folder = tmp_path / "i2d"
    folder.mkdir()
    members = []
    for i in range(4):
        key = f"{i:09d}"
        img = synth.png(32, 32, seed=i) if i != 3 else b"<html>404 not found</html>"
        members += [(f"{key}.jpg" if i != 1 else f"{key}.png", img), (f"{key}.json", b"{}"), (f"{key}.txt", b"cap")]
    (folder / "00000.tar").write_bytes(synth.tar_bytes(members, tarfile.USTAR_FORMAT))
    (folder / "00001.tar.gz").write_bytes(gzip.compress(synth.tar_bytes(members)))
    s = scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), **FAST))
    assert (s.shards, s.samples, s.checked) == (2, 8, 8)
    # PNG bytes named .jpg: extension_mismatch (warn); the HTML page: not_media (bad)
    assert s.bad_reasons == {"not_media": 2}
    denied = denylist.read_denylist(folder / "denylist.jsonl").keys()
    assert denied == {("00000.tar", "000000003"), ("00001.tar.gz", "000000003")}


def test_keys_grouped_as_webdataset_groups_them(tmp_path):
    members = [("dir/a.b.jpg", synth.jpeg(16, 16)), ("dir/a.b.json", b"{}"), ("c.jpg", synth.jpeg(16, 16, seed=1))]
    path = tmp_path / "t.tar"
    path.write_bytes(synth.tar_bytes(members))
    theirs = [s["__key__"] for s in wds.WebDataset(str(path), shardshuffle=False)]
    table = pq.read_table(
        scan_shard_set([str(path)], ShardScanOptions(report_dir=str(tmp_path / "o"), **FAST)).results_path
    )
    assert table.column("key").to_pylist() == theirs == ["dir/a", "c"]
    assert base_plus_ext("dir/a.b.jpg") == ("dir/a", "b.jpg") and base_plus_ext("README") == (None, None)


def test_duplicate_and_split_members_are_found(tmp_path):
    jpg = synth.jpeg(16, 16)
    members = [("k1.jpg", jpg), ("k1.jpg", jpg), ("k2.jpg", jpg), ("k1.json", b"{}")]
    path = tmp_path / "t.tar"
    path.write_bytes(synth.tar_bytes(members))
    with pytest.raises(ValueError, match="duplicate"):  # what webdataset does with it
        list(wds.WebDataset(str(path), shardshuffle=False))
    v = verify_shard_set([str(path)], ShardScanOptions(**FAST))
    assert not v.ok and v.problems == {"duplicate_key": 1, "split_sample": 1}
    found = {(p["reason"], p["key"], p["member"]) for p in v.per_shard["t.tar"]["problems"]}
    assert found == {("duplicate_key", "k1", "k1.jpg"), ("split_sample", "k1", "k1.json")}


def test_truncated_tar_names_the_cut_member_and_denies_it(tmp_path):
    folder = tmp_path / "wds"
    writer_shards(folder, bad=())
    shard = folder / "shard-000002.tar"
    with tarfile.open(shard) as tf:
        member = [m for m in tf.getmembers() if m.name == "s2_0003.jpg"][0]
    shard.write_bytes(shard.read_bytes()[: member.offset_data + 100])
    s = scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), **FAST))
    assert s.problems == {"truncated": 1} and s.bad == 0
    (cut,) = [p for p in s.listed if p["reason"] == "truncated"]
    assert (cut["shard"], cut["key"], cut["member"]) == ("shard-000002.tar", "s2_0003", "s2_0003.jpg")
    assert "cut short" in cut["detail"] and s.checked == 15
    assert denylist.read_denylist(folder / "denylist.jsonl").keys() == {("shard-000002.tar", "s2_0003")}
    # cut at a member boundary: no end-of-archive
    boundary = synth.tar_bytes([("a.jpg", synth.jpeg(16, 16))])[: 1024 + 512 * 2]
    (tmp_path / "b.tar").write_bytes(boundary[: 512 + ((len(synth.jpeg(16, 16)) + 511) // 512) * 512])
    v = verify_shard_set([str(tmp_path / "b.tar")], ShardScanOptions(**FAST))
    assert v.problems.get("broken_shard") == 1 and "end-of-archive" in v.listed[-1]["detail"]


def test_broken_header_and_hostile_sizes(tmp_path):
    good = synth.tar_bytes([("a.jpg", synth.jpeg(16, 16)), ("b.jpg", synth.jpeg(16, 16, seed=2))])
    broken = bytearray(good)
    second = 512 + ((len(synth.jpeg(16, 16)) + 511) // 512) * 512
    broken[second + 148 : second + 156] = b"9999999\0"  # the second header's checksum
    (tmp_path / "h.tar").write_bytes(bytes(broken))
    v = verify_shard_set([str(tmp_path / "h.tar")], ShardScanOptions(**FAST))
    assert v.checked == 1 and v.problems == {"broken_shard": 1}
    assert "bad header at byte" in v.per_shard["h.tar"]["problems"][0]["problem"]
    # a PAX header claiming a huge size for the next member: refused by the count, nothing allocated
    info = tarfile.TarInfo("x.jpg")
    info.size = 10
    info.pax_headers = {"size": str(1 << 40)}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(info, io.BytesIO(b"0123456789"))
    (tmp_path / "p.tar").write_bytes(out.getvalue())
    v = verify_shard_set([str(tmp_path / "p.tar")], ShardScanOptions(**FAST))
    assert not v.ok and v.checked == 0 and set(v.problems) <= {"too_large", "broken_shard", "truncated"}


def test_fifo_named_like_a_shard_is_refused_without_blocking(tmp_path):
    folder = tmp_path / "wds"
    writer_shards(folder, shards=1, bad=())
    os.mkfifo(folder / "shard-000001.tar")
    v = verify_shard_set([str(folder / "shard-{000000..000001}.tar")], ShardScanOptions(**FAST))
    assert v.problems == {"broken_shard": 1} and "not a regular file" in v.listed[0]["detail"]
    assert v.checked == 6


def test_brace_pattern_and_numbering_gaps_are_missing_shards(tmp_path):
    folder = tmp_path / "wds"
    writer_shards(folder, shards=4, bad=())
    os.unlink(folder / "shard-000002.tar")
    assert expand_braces("a-{08..10}.tar") == ["a-08.tar", "a-09.tar", "a-10.tar"]
    ss = detect([str(folder / "shard-{000000..000004}.tar")])
    assert ss is not None and ss.missing == ["shard-000002.tar", "shard-000004.tar"]
    assert detect([str(folder)]).missing == ["shard-000002.tar"]
    v = verify_shard_set([str(folder)], ShardScanOptions(**FAST))
    assert v.problems == {"missing_shard": 1} and v.listed[0]["shard"] == "shard-000002.tar"


def test_a_folder_of_media_is_still_files_and_as_forces(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(synth.jpeg(16, 16))
    (tmp_path / "imgs" / "x.tar").write_bytes(synth.tar_bytes([("k.jpg", synth.jpeg(16, 16))]))
    assert detect([str(tmp_path / "imgs")]) is None
    ss = detect([str(tmp_path / "imgs")], "webdataset")
    assert ss is not None and ss.names == ["x.tar"]
    # an ImageFolder (class folders) with a stray backup tar at the top: still a folder of files
    (tmp_path / "tree" / "cats").mkdir(parents=True)
    (tmp_path / "tree" / "cats" / "a.jpg").write_bytes(synth.jpeg(16, 16))
    (tmp_path / "tree" / "backup.tar").write_bytes(synth.tar_bytes([("k.jpg", synth.jpeg(16, 16))]))
    assert detect([str(tmp_path / "tree")]) is None
    assert detect([str(tmp_path / "tree")], "webdataset").names == ["backup.tar"]


def test_denylist_with_webdataset_select_leaves_out_the_bad_samples(tmp_path):
    """The recipe of docs/guides/foreign-shards.md."""
    folder = tmp_path / "wds"
    bad = writer_shards(folder, bad=((0, 1), (2, 5)))
    scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "out"), **FAST))
    denied = denylist.read_denylist(folder / "denylist.jsonl").keys()
    assert denied == set(bad)
    urls = [str(folder / f"shard-{i:06d}.tar") for i in range(3)]
    ds = wds.WebDataset(urls, shardshuffle=False).select(
        lambda s: (os.path.basename(s["__url__"]), s["__key__"]) not in denied
    )
    keys = [s["__key__"] for s in ds]
    assert len(keys) == 16 and "s0_0001" not in keys and "s2_0005" not in keys


def test_cli_scan_and_verify(tmp_path):
    folder = tmp_path / "wds"
    writer_shards(folder)
    r = run_cli("verify", folder / "shard-{000000..000002}.tar")
    assert r.returncode == 1 and "shard-000001.tar: s1_0002.jpg: truncated" in r.stdout
    r = run_cli("scan", folder, "--report", tmp_path / "out", "--jobs", "1", "--check")
    assert r.returncode == 1, r.stderr
    assert "1 bad" in r.stdout and "Deny-list" in r.stdout
    r = run_cli("verify", folder, "--json")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["denied_bad"] == 1
    r = run_cli("scan", folder, "--quarantine", tmp_path / "q")
    assert r.returncode == 2 and "deny-list" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("scan", tmp_path / "nothing-{0..2}.tar")
    assert r.returncode == 2 and "none of the 3 shards" in r.stderr


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_member_names_and_sizes_as_tarfile_reads_them(tmp_path, fmt):
    """The direct header read agrees with tarfile's parser: long names (ustar prefix, GNU long name, PAX
    path), non-ASCII names, folders skipped, sizes."""
    from dsclean.shardsets.webdataset import iter_members

    names = ["a.jpg", "d/" * 40 + "long.jpg", "caf\u00e9.json", "x" * 120 + ".txt"]
    if fmt == tarfile.USTAR_FORMAT:
        names = names[:2]  # ustar: ASCII names that fit prefix + name
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt, encoding="utf-8") as tf:
        folder = tarfile.TarInfo("d")
        folder.type = tarfile.DIRTYPE
        tf.addfile(folder)
        for i, name in enumerate(names):
            info = tarfile.TarInfo(name)
            info.size = 700 * i
            tf.addfile(info, io.BytesIO(bytes(info.size)))
    got = [(n, len(d)) for n, _, d, _ in iter_members(io.BytesIO(out.getvalue()))]
    with tarfile.open(fileobj=io.BytesIO(out.getvalue()), encoding="utf-8") as tf:
        theirs = [(m.name, m.size) for m in tf.getmembers() if m.isfile()]
    assert got == theirs and len(got) == len(names)


def test_report_of_a_shard_set_scan(tmp_path):
    """dsclean report reads a shard set's results, by its folder (the last-scan pointer) or results folder."""
    from dsclean.report.build import ReportOptions, write_report

    folder = tmp_path / "wds"
    writer_shards(folder)
    s = scan_shard_set([str(folder)], ShardScanOptions(**FAST))
    for target in (str(folder), os.path.dirname(s.results_path)):
        out = tmp_path / "report.html"
        r = write_report(target, str(out), ReportOptions(jobs=1))
        assert (r.files, r.problems) == (18, 1)
        assert "shard-000001.tar/s1_0002.jpg" in out.read_text()
    r = run_cli("scan", folder, "--html", folder / "r.html")
    assert r.returncode == 2 and "Traceback" not in r.stderr and not (folder / "r.html").exists()


def test_a_sample_that_kills_its_decoder_is_named_and_denied(tmp_path):
    """The scan's isolated pool: a segfault or a hang inside one sample's check is that sample's verdict."""
    folder = tmp_path / "wds"
    folder.mkdir()
    members = [(f"k{i}.jpg", synth.jpeg(16, 16, seed=i)) for i in range(6)]
    members[2] = ("k2__segfault__.jpg", synth.jpeg(16, 16))
    members[4] = ("k4__hang__.jpg", synth.jpeg(16, 16))
    (folder / "a.tar").write_bytes(synth.tar_bytes(members))
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "dsclean", "scan", str(folder), "--jobs", "2", "--timeout", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["checked"] == 6 and s["bad_reasons"] == {"decoder_crash": 1, "timeout": 1}
    denied = {(e["key"], e["reason"]) for e in denylist.read_denylist(folder / "denylist.jsonl").entries}
    assert denied == {("k2__segfault__", "decoder_crash"), ("k4__hang__", "timeout")}


def test_pack_from_shards_writes_a_clean_copy(tmp_path):
    """The stretch goal: dsclean pack --from SHARDS -o OUT copies the tars without the denied samples."""
    folder = tmp_path / "wds"
    writer_shards(folder, bad=((0, 1), (2, 5)))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    scan_shard_set([str(folder)], ShardScanOptions(report_dir=str(tmp_path / "r"), **FAST))
    r = run_cli("pack", "--from", folder, "-o", tmp_path / "clean")
    assert r.returncode == 0, r.stderr
    assert "left out 6 members of 2 denied samples" in r.stdout  # .jpg, .json, .txt of each
    assert all((folder / n).read_bytes() == data for n, data in before.items())  # the source untouched
    out = tmp_path / "clean"
    assert sorted(os.listdir(out)) == [f"shard-{i:06d}.tar" for i in range(3)]
    keys = [s["__key__"] for s in wds.WebDataset(sorted(str(p) for p in out.iterdir()), shardshuffle=False)]
    assert len(keys) == 16 and "s0_0001" not in keys and "s2_0005" not in keys
    v = verify_shard_set([str(out)], ShardScanOptions(**FAST))
    assert v.ok and v.bad == 0 and v.samples == 16
    r = run_cli("pack", "--from", folder, "-o", tmp_path / "clean")
    assert r.returncode == 2 and "new or empty folder" in r.stderr
    r = run_cli("pack", "--from", folder, "-o", folder / "sub")
    assert r.returncode == 2 and "inside the source" in r.stderr
    r = run_cli("pack", "-o", tmp_path / "x")
    assert r.returncode == 2 and "--from SHARDS" in r.stderr


def test_a_key_in_two_shards_is_named_with_both(tmp_path):
    folder = tmp_path / "wds"
    folder.mkdir()
    jpg = synth.jpeg(16, 16)
    (folder / "a-0.tar").write_bytes(synth.tar_bytes([("k1.jpg", jpg), ("k2.jpg", jpg), ("k2.json", b"{}")]))
    (folder / "a-1.tar").write_bytes(synth.tar_bytes([("k3.jpg", jpg), ("k2.jpg", jpg)]))
    v = verify_shard_set([str(folder)], ShardScanOptions(**FAST))
    assert v.problems == {"duplicate_key": 1} and not v.ok
    (p,) = v.listed
    assert p["key"] == "k2" and p["detail"] == "sample key k2 is in 2 shards: a-0.tar, a-1.tar"
    os.unlink(folder / "a-1.tar")
    assert verify_shard_set([str(folder)], ShardScanOptions(**FAST)).ok


def test_quality_flags_of_samples_as_the_scan_records_them(tmp_path):
    from PIL import Image

    black = io.BytesIO()
    Image.new("RGB", (64, 64)).save(black, "JPEG")
    (tmp_path / "a.tar").write_bytes(
        synth.tar_bytes([("dark.jpg", black.getvalue()), ("fine.jpg", synth.jpeg(64, 64))])
    )
    s = scan_shard_set([str(tmp_path / "a.tar")], ShardScanOptions(report_dir=str(tmp_path / "out"), **FAST))
    flags = dict(zip(*pq.read_table(s.results_path, columns=["key", "flags"]).to_pydict().values()))
    assert "dark" in flags["dark"] and "dark" not in flags["fine"] and s.flags["dark"] == 1
    s = scan_shard_set(
        [str(tmp_path / "a.tar")],
        ShardScanOptions(report_dir=str(tmp_path / "out"), check=CheckOptions(facts=False), **FAST),
    )
    assert pq.read_table(s.results_path).column("flags").to_pylist() == [None, None] and not s.flags


def test_damaged_and_cut_gzip_shards_are_broken(tmp_path):
    members = [(f"k{i}.jpg", synth.jpeg(64, 64, seed=i)) for i in range(4)]
    whole = gzip.compress(synth.tar_bytes(members))
    (tmp_path / "cut.tar.gz").write_bytes(whole[: len(whole) * 2 // 3])
    damaged = bytearray(whole)
    damaged[len(whole) // 2 : len(whole) // 2 + 64] = bytes(64)
    (tmp_path / "bad.tgz").write_bytes(bytes(damaged))
    v = verify_shard_set([str(tmp_path / "cut.tar.gz"), str(tmp_path / "bad.tgz")], ShardScanOptions(**FAST))
    assert not v.ok and v.checked < 8
    broken = {p["shard"]: p["detail"] for p in v.listed if p["reason"] == "broken_shard"}
    assert broken["cut.tar.gz"].startswith("cannot decompress: Compressed file ended")
    assert broken["bad.tgz"].startswith("bad header at byte")
