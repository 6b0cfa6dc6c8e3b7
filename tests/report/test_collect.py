"""The one streaming pass over a results table agrees with a direct computation over the whole table."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pyarrow.compute as pc
import pytest
from support.resultsgen import synthetic_results

from dsclean.report.collect import BATCH_ROWS, Caps, collect
from dsclean.report.duplicates import exact_duplicates
from dsclean.report.safe import Scrubber

ROWS = BATCH_ROWS * 2 + 1234  # several batches, the last one short


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("collect") / "scan_results.parquet"
    t = synthetic_results(str(path), "/nowhere/data", ROWS, problems=3_000, classes=300, dup_share=0.02, seed=3)
    return str(path), t


@pytest.fixture(scope="module")
def data(table):
    path, t = table
    return collect(path, t.column_names, Scrubber({}), Caps(per_reason=7, table=2_500, per_outlier=10, per_flag=5))


def test_counts_and_caps(table, data):
    _, t = table
    assert data.files == ROWS and data.bytes == pc.sum(t["size"]).as_py()
    assert sum(n for c in data.counts.values() for n in c.values()) == ROWS
    truth = Counter(zip(t["status"].to_pylist(), t["reason"].to_pylist()))
    for status, by_reason in data.reasons.items():
        for reason, n in by_reason.items():
            assert truth[(status, reason)] == n
    assert data.problems_total == 3_000 and len(data.problems) == 2_500  # the table is capped, the total is not
    for g in data.reason_galleries:
        assert len(g.items) == min(7, g.total) and {i.reason for i in g.items} == {g.reason}
    assert [g.status for g in data.reason_galleries] == sorted(
        (g.status for g in data.reason_galleries), key=lambda s: s != "bad"
    )


def test_composition_matches_the_whole_table(table, data):
    _, t = table
    classes = Counter(os.fsdecode(p).split("/")[0] for p in t["path"].to_pylist())
    bad = Counter(
        os.fsdecode(p).split("/")[0] for p, s in zip(t["path"].to_pylist(), t["status"].to_pylist()) if s == "bad"
    )
    assert data.classes_total == len(classes) and len(data.classes) == 50
    for name, kept, nbad in data.classes:
        assert (kept, nbad) == (classes[name] - bad[name], bad[name])
    assert [k for _, k, _ in data.classes] == sorted((k for _, k, _ in data.classes), reverse=True)  # largest first
    assert sum(sum(h.counts) for h in data.sizes.values()) == ROWS
    images = pc.sum(pc.equal(t["kind"], "image").cast("int64")).as_py()
    assert sum(map(sum, data.resolution[2])) == images
    assert sum(data.durations.counts) == ROWS - images == sum(data.sample_rates.values())


def _extreme_paths(t, kind: str, column: str, key, k: int = 10) -> list[str]:
    kept = t.filter(pc.and_(pc.not_equal(t["status"], "bad"), pc.equal(t["kind"], kind)))
    order = np.argsort(key(kept[column].to_numpy()), kind="stable")[:k]
    return [os.fsdecode(kept["path"][int(i)].as_py()) for i in order]


def test_outliers_are_the_true_extremes(table, data):
    _, t = table
    galleries = {g.title: [i.path for i in g.items] for g in data.outliers}
    assert galleries["Darkest"] == _extreme_paths(t, "image", "brightness", lambda v: v)
    assert galleries["Brightest"] == _extreme_paths(t, "image", "brightness", lambda v: -v)
    assert galleries["Blurriest"] == _extreme_paths(t, "image", "sharpness", lambda v: v)
    assert galleries["Largest DC offset"] == _extreme_paths(t, "audio", "dc_offset", lambda v: -np.abs(v))
    darkest = next(g for g in data.outliers if g.title == "Darkest").items[0]
    assert darkest.note.startswith("brightness ") and darkest.kind == "image"


def test_flags_count_every_kept_file(table, data):
    _, t = table
    truth = Counter(
        f for fl, s in zip(t["flags"].to_pylist(), t["status"].to_pylist()) if fl and s != "bad" for f in fl
    )
    assert {g.reason: g.total for g in data.flags} == dict(truth)
    assert all(len(g.items) == min(5, g.total) for g in data.flags)


def test_exact_duplicates_match_a_group_by(table):
    path, t = table
    kept = t.filter(pc.not_equal(t["status"], "bad"))
    counts = Counter(kept["content_hash"].to_pylist())
    groups = {h: n for h, n in counts.items() if n > 1}
    seen, wasted = set(), 0  # bytes of every copy after the first, in table order
    for h, size in zip(kept["content_hash"].to_pylist(), kept["size"].to_pylist()):
        if h in groups:
            wasted += size if h in seen else 0
            seen.add(h)
    import dsclean.report.duplicates as d

    for partition_rows in (10**9, 40_000):  # one partition, and several (the bounded-memory path)
        d.PARTITION_ROWS, saved = partition_rows, d.PARTITION_ROWS
        try:
            dup = exact_duplicates(path, ROWS, Scrubber({}), max_groups=5, max_members=3)
        finally:
            d.PARTITION_ROWS = saved
        assert dup.total_groups == len(groups) and dup.total_files == sum(groups.values())
        assert len(dup.groups) == 5 and all(len(g.members) == min(3, g.total_members) for g in dup.groups)
        assert [g.total_members for g in dup.groups] == sorted(groups.values(), reverse=True)[:5]
        assert dup.wasted_bytes == wasted
