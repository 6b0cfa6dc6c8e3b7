"""``dsclean scan SHARDS --shard I/N`` and ``dsclean merge`` of its parts: whole shards per part, by the file scan's
stable hash of the shard's name; the merged results are a whole scan's, the deny-list holds each bad sample once."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pyarrow.parquet as pq
import pytest
from support import synth
from support.fixtures.cli import run_cli

from dsclean import denylist, locations
from dsclean.scanning.scanner import in_part
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set

N = 3


def tar_set(folder) -> set[tuple[str, str]]:
    """6 tars of 4 JPEG samples; a truncated JPEG in shard 1 and in shard 3 (the bad samples' (shard, key))."""
    os.makedirs(folder)
    bad = set()
    for s in range(6):
        name = f"shard-{s:06d}.tar"
        with tarfile.open(os.path.join(folder, name), "w") as tar:
            for i in range(4):
                key = f"s{s}_{i}"
                data = synth.jpeg(24, 24, seed=s * 10 + i)
                if s in (1, 3) and i == 2:
                    data = synth.truncate(data, 0.5)
                    bad.add((name, key))
                info = tarfile.TarInfo(f"{key}.jpg")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return bad


def rows(path) -> list[tuple]:
    table = pq.read_table(path, columns=["shard", "member", "status", "reason"])
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_parts_merge_to_a_whole_scan(tmp_path):
    folder = tmp_path / "shards"
    bad = tar_set(folder)
    whole = scan_shard_set([str(folder)], ShardScanOptions(jobs=1, dry_run=True, report_dir=str(tmp_path / "whole")))
    assert whole.counts.get("bad") == 2

    parts = []
    for i in range(N):
        s = scan_shard_set([str(folder)], ShardScanOptions(jobs=1, part=(i, N)))
        assert s.results_path.endswith(f"scan_results{locations.part_tag((i, N))}.parquet")
        summary = os.path.join(
            os.path.dirname(s.results_path), locations.tagged(locations.SUMMARY_FILE, locations.part_tag((i, N)))
        )
        assert json.load(open(summary))["shards"] == s.shards
        parts.append(s)
    shards = [{r[0] for r in rows(p.results_path)} for p in parts]
    names = {f"shard-{s:06d}.tar" for s in range(6)}
    for i, got in enumerate(shards):  # each part: exactly the shards the name hash puts in it
        assert got == {n for n in names if in_part(n, (i, N))}
        assert got
    assert set().union(*shards) == names and sum(len(s) for s in shards) == 6  # disjoint, every shard

    entries = [json.loads(line) for line in open(denylist.denylist_path(str(folder)))]
    assert sorted((e["shard"], e["key"]) for e in entries) == sorted(bad)  # each bad sample once

    out = run_cli("merge", "--json", *[p.results_path for p in parts], ok=True)
    merged = json.loads(out.stdout)
    assert merged["parts"] == N and merged["bad"] == 2
    assert rows(merged["results_path"]) == rows(whole.results_path)
    with open(merged["problems_path"]) as f:
        assert sorted((p["shard"], p["key"]) for p in map(json.loads, f)) == sorted(bad)
    with open(os.path.join(os.path.dirname(merged["results_path"]), locations.SUMMARY_FILE)) as f:
        total = json.load(f)
    assert total["shards"] == 6 and total["samples"] == 24 and total["counts"]["bad"] == 2

    report = run_cli("report", str(folder), "-o", str(tmp_path / "report.html"), ok=True)
    assert "24 files, 2 problems" in report.stdout and "INCOMPLETE" not in report.stdout + report.stderr
    assert "last_scan.json" in report.stdout  # the merge's pointer: the whole set, not one part

    missing = run_cli("merge", parts[0].results_path, parts[1].results_path)
    assert missing.returncode == 2 and f"2/{N}" in missing.stderr


def test_bad_part_refused(tmp_path):
    folder = tmp_path / "shards"
    tar_set(folder)
    proc = run_cli("scan", str(folder), "--shard", "3/3")
    assert proc.returncode == 2 and "3/3" in proc.stderr and "Traceback" not in proc.stderr


def test_report_before_the_merge_names_the_missing_part(tmp_path):
    folder = tmp_path / "shards"
    tar_set(folder)
    for i in (0, 1):
        scan_shard_set([str(folder)], ShardScanOptions(jobs=1, part=(i, N)))
    report = run_cli("report", str(folder), "-o", str(tmp_path / "report.html"), ok=True)
    assert "INCOMPLETE" in report.stdout and f"--shard 2/{N}" in report.stdout
    assert "16 files" in report.stdout  # parts 0 and 1: 4 shards of 4 samples


def test_parts_of_a_set_in_a_bucket(bucket, s3fs_direct, s3_endpoint, tmp_path):
    pytest.importorskip("s3fs")
    from dsclean.shardsets.parts import merge_shard_parts
    from dsclean.storage.reuse import last_results

    local = tmp_path / "shards"
    bad = tar_set(local)
    for name in sorted(os.listdir(local)):
        s3fs_direct.put_file(str(local / name), f"{bucket}/set/{name}")
    url = f"s3://{bucket}/set/"
    results = str(tmp_path / "results")
    opts = {"endpoint_url": s3_endpoint}
    before = sorted(s3fs_direct.find(bucket))
    parts = [
        scan_shard_set([url], ShardScanOptions(jobs=1, part=(i, N), report_dir=results, storage_options=opts))
        for i in range(N)
    ]
    assert len({p.results_path for p in parts}) == N and all(p.denylist_path == parts[0].denylist_path for p in parts)
    assert last_results(url.rstrip("/")) is None  # no part is recorded as the prefix's scan
    merged = merge_shard_parts([p.results_path for p in parts])
    whole = scan_shard_set([str(local)], ShardScanOptions(jobs=1, dry_run=True, report_dir=str(tmp_path / "whole")))
    assert rows(merged.results_path) == rows(whole.results_path) and merged.bad == 2
    assert last_results(url.rstrip("/")) == merged.results_path  # `dsclean report URL` finds the merged results
    entries = [json.loads(line) for line in open(parts[0].denylist_path)]
    assert sorted((e["shard"], e["key"]) for e in entries) == sorted(bad)
    assert sorted(s3fs_direct.find(bucket)) == before  # nothing written into the bucket


def test_merge_refuses_parts_checked_differently(tmp_path):
    from dsclean.scanning.check import CheckOptions

    folder = tmp_path / "shards"
    tar_set(folder)
    paths = [
        scan_shard_set([str(folder)], ShardScanOptions(jobs=1, part=(i, N), check=CheckOptions(facts=i == 1)))
        for i in range(N)
    ]
    proc = run_cli("merge", *[p.results_path for p in paths])
    assert proc.returncode == 2 and "parts of different scans (options differs)" in proc.stderr
    assert "Traceback" not in proc.stderr
