"""Samples inside shards: re-checked from the tar, bad ones denied beside the shards; the deny-list is
honoured by IndexedDataset over the packed set, by a re-pack, and reported by verify."""

from __future__ import annotations

import json
import os
import tarfile

import pytest
from support import synth
from support.failurelogs import log_failures
from support.files import write
from support.fixtures.cli import run_cli

from dsclean.data.dataset import IndexedDataset
from dsclean.denylist import append, read_denylist
from dsclean.fromlog import quarantine_from_log
from dsclean.index.build import build_index
from dsclean.pack.packer import PackOptions, pack_shards
from dsclean.pack.samples import sample_key
from dsclean.pack.verify import verify_shards
from dsclean.scanning.check import CHECKER_VERSION


@pytest.fixture
def packed(tmp_path):
    """A packed set of 6 images, one of them a JPEG cut in half (packed as it is: pack does not check)."""
    root = tmp_path / "data"
    for i in range(5):
        write(root, f"cls/ok{i}.jpg", synth.jpeg(30, 20 + i, seed=i))
    good = synth.jpeg(40, 30, seed=77)
    write(root, "cls/cut.jpg", good[: len(good) // 2])
    index = str(tmp_path / "data.arrow")
    build_index(str(root), index, check=False)  # as if a training set had been indexed before the damage
    out = tmp_path / "shards"
    pack_shards(index, str(out), PackOptions(samples_per_shard=2))
    return root, index, out


def _where(out, rel):
    ds = IndexedDataset(str(out))
    j = next(j for j in range(len(ds)) if ds.path(j) == rel)
    shard_of = ds._mapped() and ds._packed_set.shard_of
    return ds, j, ds._packed_set.shards[int(shard_of[j])]["url"]


def test_a_bad_sample_is_denied_an_ok_one_left_and_both_flow_downstream(packed, tmp_path):
    _, index, out = packed
    ds, bad_j, bad_shard = _where(out, "cls/cut.jpg")
    _, ok_j, ok_shard = _where(out, "cls/ok1.jpg")
    log = tmp_path / "runs" / "failures.jsonl"
    log_failures(
        log,
        [
            (
                0,
                {
                    "kind": "exception",
                    "index": bad_j,
                    "shard": str(out / bad_shard),
                    "key": sample_key(b"cls/cut.jpg"),
                    "error": "OSError",
                    "message": "image file is truncated",
                },
            ),
            (
                1,
                {
                    "kind": "exception",
                    "index": bad_j,
                    "shard": bad_shard,
                    "root": str(out),
                    "key": sample_key(b"cls/cut.jpg"),
                    "error": "OSError",
                    "message": "again",
                },
            ),  # same sample, relative
            (
                1,
                {
                    "kind": "exception",
                    "index": ok_j,
                    "shard": str(out / ok_shard),
                    "key": sample_key(b"cls/ok1.jpg"),
                    "error": "ValueError",
                    "message": "in transform",
                },
            ),
        ],
    )
    s = quarantine_from_log([str(log)])
    outcome = {i.key: i for i in s.items}
    assert outcome[sample_key(b"cls/cut.jpg")].outcome == "denied"
    assert outcome[sample_key(b"cls/cut.jpg")].lines == 2 and outcome[sample_key(b"cls/cut.jpg")].row == bad_j
    assert outcome[sample_key(b"cls/ok1.jpg")].outcome == "left"
    dl = read_denylist(out / "denylist.jsonl")
    assert [(e["shard"], e["key"], e["row"], e["path"], e["checker"]) for e in dl.entries] == [
        (bad_shard, sample_key(b"cls/cut.jpg"), bad_j, "cls/cut.jpg", CHECKER_VERSION)
    ]
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]

    # IndexedDataset over the set refuses it (skip: it is absent from what a loop sees)
    ds = IndexedDataset(str(out), on_error="skip")
    got = [ds[j] for j in range(len(ds))]
    assert got[bad_j] is None and sum(x is not None for x in got) == len(ds) - 1
    with pytest.raises(Exception, match="deny-list"):
        IndexedDataset(str(out))[bad_j]

    # verify reports it
    report = verify_shards(str(out))
    assert report.ok and report.denylist["samples"] == 1 and report.denylist["not_in_set_count"] == 0
    assert any("1 samples denied" in n for n in report.notes)

    # a re-pack of the source index with that deny-list leaves it out
    again = tmp_path / "shards2"
    summary = pack_shards(index, str(again), PackOptions(samples_per_shard=2, denylist=str(out / "denylist.jsonl")))
    assert summary.samples == 5 and any("1 samples left out" in n for n in summary.notes)
    repacked = IndexedDataset(str(again))
    assert "cls/cut.jpg" not in {repacked.path(j) for j in range(len(repacked))} and len(repacked) == 5

    # a second run does not append it again
    s2 = quarantine_from_log([str(log)])
    assert {i.outcome for i in s2.items if i.key == sample_key(b"cls/cut.jpg")} == {"already_denied"}
    assert len(read_denylist(out / "denylist.jsonl").entries) == 1


def test_verify_names_entries_not_in_the_set_and_survives_a_damaged_deny_list(packed):
    _, _, out = packed
    append(out / "denylist.jsonl", [{"shard": "data-999999.tar", "key": "0123456789abcdef", "reason": "corrupt"}])
    with open(out / "denylist.jsonl", "ab") as f:
        f.write(b"garbage\n" + b"x" * 70000 + b"\n")
    r = verify_shards(str(out))
    assert r.denylist["not_in_set_count"] == 1 and r.denylist["damaged_lines"] == 2
    assert any("data-999999.tar" in n for n in r.notes)
    ds = IndexedDataset(str(out))
    assert ds._packed_set.denied is None  # an entry naming nothing of this set denies nothing
    assert ds[next(j for j in range(len(ds)) if ds.path(j) == "cls/ok0.jpg")] is not None
    cli = run_cli("verify", str(out), "--json")
    assert cli.returncode == 0 and json.loads(cli.stdout)["denylist"]["entries"] == 1


def test_a_plain_webdataset_tar_sample_is_denied_beside_it(tmp_path):
    import webdataset as wds

    shards = tmp_path / "wds"
    shards.mkdir()
    good = synth.jpeg(30, 30, seed=3)
    with wds.TarWriter(str(shards / "part-000.tar")) as w:
        w.write({"__key__": "s/000", "jpg": good, "cls": b"1"})
        w.write({"__key__": "s/001", "jpg": good[:200], "cls": b"0"})
    log = tmp_path / "f.jsonl"
    log_failures(
        log,
        [
            (0, {"kind": "exception", "shard": str(shards / "part-000.tar"), "key": k, "error": "E"})
            for k in ("s/000", "s/001", "s/404")
        ],
    )
    out = run_cli("quarantine", "--from-log", str(log), "--json")
    assert out.returncode == 1, out.stderr
    items = {i["key"]: i for i in json.loads(out.stdout)["items"]}
    assert items["s/001"]["outcome"] == "denied" and items["s/000"]["outcome"] == "left"
    assert items["s/404"]["outcome"] == "missing"
    entries = read_denylist(shards / "denylist.jsonl").entries
    assert [(e["shard"], e["key"], e["row"]) for e in entries] == [("part-000.tar", "s/001", None)]
    with tarfile.open(shards / "part-000.tar") as tf:  # the tar itself is untouched
        assert sorted(tf.getnames()) == ["s/000.cls", "s/000.jpg", "s/001.cls", "s/001.jpg"]
    denied = {e["key"] for e in entries}
    kept = [
        s["__key__"]
        for s in wds.WebDataset(str(shards / "part-000.tar"), shardshuffle=False)
        if s["__key__"] not in denied
    ]  # how a webdataset pipeline honours it (docs/guides/from-log.md)
    assert kept == ["s/000"]


def test_a_line_naming_the_packed_folder_or_an_unusable_shard(packed, tmp_path):
    _, _, out = packed
    log = tmp_path / "f.jsonl"
    log_failures(
        log,
        [
            (0, {"kind": "exception", "shard": str(out), "key": sample_key(b"cls/cut.jpg"), "error": "E"}),
            (0, {"kind": "exception", "shard": 3, "key": "x", "path": "cls/ok0.jpg", "error": "E"}),
        ],
    )
    s = quarantine_from_log([str(log)])
    assert [(i.outcome, os.path.dirname(i.path)) for i in s.items] == [("denied", str(out))]
    assert s.unplaced == 1  # a shard number is not a place; and its path is never taken for a file


def test_the_deny_list_reader_refuses_a_fifo_without_blocking(tmp_path):
    import subprocess
    import sys

    os.mkfifo(tmp_path / "denylist.jsonl")
    code = (
        "from dsclean.denylist import read_denylist; "
        f"d = read_denylist({str(tmp_path / 'denylist.jsonl')!r}); print(bool(d.refused), len(d.entries))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False)
    assert out.stdout.split() == ["True", "0"], out.stderr
    with pytest.raises(OSError):
        append(tmp_path / "denylist.jsonl", [{"shard": "a.tar", "key": "k"}])


def test_the_deny_list_reader_counts_damage(tmp_path):
    path = tmp_path / "denylist.jsonl"
    append(path, [{"shard": "a.tar", "key": "k1", "row": 0}, {"shard": "a.tar", "key": "k2"}])
    with open(path, "ab") as f:
        f.write(b'{"v": 1, "shard": "a.tar"}\n{"v": 1, "shard": "a.tar", "key": "k3", "row": -4}\n[]\n{"v": 1, "sh')
    d = read_denylist(path)
    assert [e["key"] for e in d.entries] == ["k1", "k2"] and d.damaged_lines == 3 and d.torn_lines == 1


def test_a_sample_that_crashes_its_decoder_is_named_and_denied_not_fatal(tmp_path):
    """The worker that died in training may have died of the sample: its re-check runs in a fresh process."""
    import webdataset as wds

    shards = tmp_path / "wds"
    shards.mkdir()
    with wds.TarWriter(str(shards / "part-000.tar")) as w:
        w.write({"__key__": "x__segfault__", "jpg": synth.jpeg(20, 20, seed=1)})  # the test fault injector's cue
        w.write({"__key__": "fine", "jpg": synth.jpeg(20, 20, seed=2)})
    log = tmp_path / "f.jsonl"
    log_failures(
        log,
        [
            (None, {"kind": "worker_died", "shard": str(shards / "part-000.tar"), "key": k, "error": "SIGSEGV"})
            for k in ("x__segfault__", "fine")
        ],
    )
    out = run_cli("quarantine", "--from-log", str(log), "--json", env={"DSCLEAN_TEST_FAULTS": "1"})
    assert out.returncode == 1, out.stderr
    items = {i["key"]: i for i in json.loads(out.stdout)["items"]}
    assert items["x__segfault__"]["outcome"] == "denied" and items["x__segfault__"]["reason"] == "decoder_crash"
    assert items["fine"]["outcome"] == "left"


def _size(img):
    import torch

    return torch.tensor(img.size)


@pytest.mark.slow  # real DataLoader workers
def test_denied_samples_are_absent_from_a_real_dataloader_with_workers(packed, tmp_path):
    import torch

    from dsclean.data.collate import collate_skip_none

    _, _, out = packed
    ds, bad_j, bad_shard = _where(out, "cls/cut.jpg")
    _, ok_j, ok_shard = _where(out, "cls/ok2.jpg")
    append(
        out / "denylist.jsonl",
        [
            {"shard": bad_shard, "key": sample_key(b"cls/cut.jpg"), "row": bad_j},
            {"shard": ok_shard, "key": sample_key(b"cls/ok2.jpg")},
        ],
    )  # by key, no row
    ds = IndexedDataset(str(out), transform=_size, on_error="skip")
    loader = torch.utils.data.DataLoader(
        ds, batch_size=1, num_workers=2, collate_fn=collate_skip_none, multiprocessing_context="spawn"
    )
    seen = sum(len(y) for _, y in loader)
    assert seen == len(ds) - 2 == 4


def test_pack_denylist_user_mistakes(packed, tmp_path):
    _, index, _ = packed
    cli = run_cli("pack", index, "-o", str(tmp_path / "p"), "--denylist", str(tmp_path / "nope.jsonl"))
    assert cli.returncode == 2 and "--denylist" in cli.stderr and "Traceback" not in cli.stderr
