"""WebDataset tars checked by the workers that read them: a task names a shard (or a part of one); the results
are the ones the main process got when it read the tars and shipped every sample's bytes."""

from __future__ import annotations

import gzip
import json
import os

import pyarrow.parquet as pq
import webdataset as wds
from support import synth

from dsclean.quality.flags import FlagOptions
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.worker import check_chunk_in_thread
from dsclean.shardsets import run, webdataset
from dsclean.shardsets.detect import detect
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set, verify_shard_set
from dsclean.shardsets.tartasks import TarTask, check_tar_part, plan


def mixed_set(folder: str) -> None:
    """Good and damaged samples, a truncated tar, a gzipped one, a key in two shards, a split sample, audio."""
    os.makedirs(folder)
    for s in range(3):
        with wds.TarWriter(os.path.join(folder, f"shard-{s:06d}.tar")) as w:
            for i in range(150):
                jpg = synth.jpeg(32, 32, seed=s * 1000 + i)
                if i % 37 == 5:
                    jpg = synth.truncate(jpg, 0.5)
                key = "shared" if (s, i) in ((0, 9), (2, 9)) else f"s{s}_{i:04d}"
                w.write({"__key__": key, "jpg": jpg, "json": {"i": i}, "txt": "a caption"})
    wav = synth.encode_audio(synth.tone(0.05), 16_000, "wav")
    members = [("a.jpg", synth.jpeg(32, 32, seed=7)), ("b.wav", wav), ("a.txt", b"x"), ("c.png", b"\x89PNG junk")]
    with open(os.path.join(folder, "shard-000003.tar"), "wb") as f:
        f.write(synth.tar_bytes(members))  # a.jpg and a.txt apart: a split sample
    with open(os.path.join(folder, "shard-000004.tar.gz"), "wb") as f:
        f.write(gzip.compress(synth.tar_bytes([(f"g{i}.jpg", synth.jpeg(32, 32, seed=50 + i)) for i in range(5)])))
    whole = synth.tar_bytes([(f"t{i}.jpg", synth.jpeg(32, 32, seed=90 + i)) for i in range(6)])
    with open(os.path.join(folder, "shard-000005.tar"), "wb") as f:
        f.write(whole[: len(whole) * 2 // 3])  # cut inside a member


def results_of(summary) -> tuple[list[dict], list[str]]:
    rows = pq.read_table(summary.results_path).sort_by("path").to_pylist()
    with open(summary.problems_path) as f:
        problems = sorted(f.read().splitlines())
    return rows, problems


def test_workers_walking_the_tars_give_the_same_results_as_shipped_bytes(tmp_path, monkeypatch):
    shards = str(tmp_path / "shards")
    mixed_set(shards)
    new = scan_shard_set([shards], ShardScanOptions(jobs=2, report_dir=str(tmp_path / "new"), dry_run=True))
    monkeypatch.setattr(run, "check_events", run.check_samples)  # the main process reads and ships every sample
    old = scan_shard_set([shards], ShardScanOptions(jobs=2, report_dir=str(tmp_path / "old"), dry_run=True))
    new_rows, new_problems = results_of(new)
    old_rows, old_problems = results_of(old)
    assert len(new_rows) == 150 * 3 + 3 + 5 + 4  # the cut tar: its 4 whole members
    assert new_rows == old_rows
    assert new_problems == old_problems
    assert {p["reason"] for p in map(json.loads, new_problems)} >= {"truncated", "duplicate_key", "split_sample"}
    for field in ("kind", "shards", "samples", "checked", "counts", "bad_reasons", "warn_reasons", "problems", "flags"):
        assert getattr(new, field) == getattr(old, field), field
    assert new.bad >= 13 and new.flags


def test_the_main_process_never_reads_a_tar(tmp_path, monkeypatch):
    shards = str(tmp_path / "shards")
    mixed_set(shards)

    def refuse(*args, **kwargs):
        raise AssertionError("the main process read a shard")

    monkeypatch.setattr(webdataset, "read_shard", refuse)  # the workers are forked from the forkserver: unpatched
    summary = verify_shard_set([shards], ShardScanOptions(jobs=1))
    assert summary.checked == 150 * 3 + 3 + 5 + 4 and summary.shards == 6


def test_a_shard_cut_in_parts_checks_every_sample_once(tmp_path):
    folder = str(tmp_path / "shards")
    mixed_set(folder)
    ss = detect([folder])
    assert ss is not None
    tasks = list(plan(ss, slots=8))  # 6 shards, 8 workers: plain tars in 3 parts, the gzipped one whole
    assert [t.parts for t in tasks if t.shard == "shard-000000.tar"] == [3, 3, 3]
    assert [t for t in tasks if t.shard.endswith(".gz")] == [TarTask("shard-000004.tar.gz", 4, 0, 1)]
    options, flags = CheckOptions(), FlagOptions()
    whole = check_tar_part(folder, None, TarTask("shard-000000.tar", 0, 0, 1), options, flags, check_chunk_in_thread)
    parts = [check_tar_part(folder, None, t, options, flags, check_chunk_in_thread) for t in tasks[:3]]
    assert sum(sum(p.counts.values()) for p in parts) == sum(whole.counts.values()) == 150
    assert all(sum(p.counts.values()) > 0 for p in parts)
    assert parts[0].events == whole.events and not parts[1].events and not parts[2].events
    joined = b"".join(sorted(p.hashes[i : i + 8] for p in parts for i in range(0, len(p.hashes), 8)))
    assert joined == b"".join(sorted(whole.hashes[i : i + 8] for i in range(0, len(whole.hashes), 8)))
    one = scan_shard_set([folder], ShardScanOptions(jobs=1, backend="threads", report_dir=str(tmp_path / "a")))
    cut = scan_shard_set([folder], ShardScanOptions(jobs=8, backend="threads", report_dir=str(tmp_path / "b")))
    assert results_of(one) == results_of(cut)


def test_parquet_shards_read_by_the_workers_give_the_same_results(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq_

    folder = tmp_path / "pq"
    folder.mkdir()
    for n in range(3):
        images = [synth.jpeg(24, 24, seed=n * 10 + i) for i in range(7)]
        images[n + 1] = synth.truncate(images[n + 1], 0.5)
        images[5] = None if n == 1 else images[5]
        table = pa.table({"img": pa.array(images, type=pa.binary()), "label": list(range(7))})
        pq_.write_table(table, folder / f"part-{n}.parquet", row_group_size=3)
    (folder / "part-3.parquet").write_bytes(b"PAR1 not parquet")
    new = scan_shard_set([str(folder)], ShardScanOptions(jobs=2, column="img", report_dir=str(tmp_path / "n")))
    monkeypatch.setattr(run, "check_events", run.check_samples)
    old = scan_shard_set([str(folder)], ShardScanOptions(jobs=2, column="img", report_dir=str(tmp_path / "o")))
    assert results_of(new) == results_of(old)
    assert (new.shards, new.checked, new.bad, new.problems) == (4, 20, 3, {"empty": 1, "broken_shard": 1})
    assert (old.shards, old.checked, old.bad, old.problems) == (new.shards, new.checked, new.bad, new.problems)
