"""The streamed build: external sort runs, window joins with the scan results, the one-batch column writer, --facts."""

from __future__ import annotations

import io
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from dsclean.index import build, judge, spill, walk
from dsclean.index.build import build_index
from dsclean.index.columns import ColumnSink, write_npy_columns, write_one_batch
from dsclean.index.store import FACTS, SCAN_FACTS, open_index
from dsclean.scanning.results import SCHEMA


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


PNG = _png()


def _tree(root: str, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    rels = []
    for i in range(n):
        rel = f"{rng.choice(['a', 'b', 'a-b', 'B'])}/{rng.choice(['', 'x/', 'x-y/', 'x/y/'])}{rng.randint(0, 10**6)}_{i}.png"
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(PNG)
        rels.append(rel)
    return rels


def _rows(path: str) -> list[tuple]:
    idx = open_index(path)
    return [(os.fsdecode(idx.path_bytes(i)), int(idx.labels[i]), int(idx.sizes[i])) for i in range(len(idx))]


def _tiny_runs(monkeypatch) -> None:
    """Runs of 5 rows, blocks of 2, 2 runs merged at once, walk batches of 3: every merge and window path is taken."""
    monkeypatch.setattr(spill, "RUN_ROWS", 5)
    monkeypatch.setattr(spill, "BLOCK_ROWS", 2)
    monkeypatch.setattr(spill, "FAN_IN", 2)  # 40 rows: 8 runs, merged in passes
    monkeypatch.setattr(walk, "CHUNK_ROWS", 3)
    monkeypatch.setattr(judge, "CHUNK_ROWS", 3)  # the scan results read in batches of 3 too
    monkeypatch.setattr(build, "STALE_ROWS", 4)


def _results(root: str, rels: list[str], path: str, extra=None) -> str:
    rows = []
    for i, rel in enumerate(rels):
        st = os.stat(os.path.join(root, rel))
        row = {name: None for name in SCHEMA.names} | {
            "path": rel.encode(),
            "kind": "image",
            "status": "ok",
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
        }
        if i % 7 == 3:
            row.update(status="bad", reason="corrupt")
        if i % 11 == 5:
            row.update(mtime_ns=1)  # changed since the scan: checked again here
        rows.append(row | (extra(i) if extra else {}))
    names = list(rows[0])
    table = pa.Table.from_pylist(
        rows, schema=pa.schema([SCHEMA.field(n) if n in SCHEMA.names else pa.field(n, FACTS[n]) for n in names])
    )
    pq.write_table(table, path, row_group_size=4)
    return path


@pytest.mark.parametrize("check", [True, False])
def test_tiny_runs_give_the_same_index_as_one_run(tmp_path, monkeypatch, check):
    root = str(tmp_path / "data")
    rels = _tree(root, 40)
    results = _results(root, rels, str(tmp_path / "r.parquet"))
    one = build_index(root, str(tmp_path / "one.arrow"), scan_results=results, check=check)
    _tiny_runs(monkeypatch)
    many = build_index(root, str(tmp_path / "many.arrow"), scan_results=results, check=check)
    assert _rows(str(tmp_path / "one.arrow")) == _rows(str(tmp_path / "many.arrow"))
    assert (
        many.rows
        == one.rows
        == 40 - len(range(3, 40, 7)) + (sum(1 for i in range(3, 40, 7) if i % 11 == 5) if check else 0)
    )
    for field in ("excluded_bad", "changed_since_scan", "checked", "unscanned"):
        assert getattr(many, field) == getattr(one, field), field
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".dsclean-index-")]  # the spill is gone


def test_tiny_runs_keep_imagefolder_order_without_results(tmp_path, monkeypatch):
    root = str(tmp_path / "data")
    rels = _tree(root, 30, seed=1)
    _tiny_runs(monkeypatch)
    build_index(root, str(tmp_path / "i.npy"), check=False)
    classes = sorted({r.split("/")[0] for r in rels})
    expected = []
    for c in classes:  # torchvision: sorted(os.walk(class folder)), sorted file names
        for d, _, names in sorted(os.walk(os.path.join(root, c))):
            expected += [(os.path.relpath(os.path.join(d, n), root), classes.index(c)) for n in sorted(names)]
    assert [(p, lab) for p, lab, _ in _rows(str(tmp_path / "i.npy"))] == expected


def test_facts_only_with_facts(tmp_path, monkeypatch):
    root = str(tmp_path / "data")
    rels = _tree(root, 12, seed=2)

    def facts(i: int) -> dict:
        return {
            "content_hash": bytes([i]) * 16,
            "phash": 2**63 + i,
            "brightness": i / 100,
            "grayscale": None if i % 3 else bool(i % 2),
            "orientation": 1 + i % 8,
            "flags": [] if i % 2 else ["dark", "blurry"],
            "silent_channels": None,
            "width": 4,
            "height": 4,
        }

    results = _results(root, rels, str(tmp_path / "r.parquet"), facts)
    _tiny_runs(monkeypatch)
    plain = str(tmp_path / "plain.arrow")
    build_index(root, plain, scan_results=results, check=False)
    with pa.memory_map(plain) as f:
        assert pa.ipc.open_file(f).schema.names == ["path", "label", "kind", "size", "mtime_ns"]
    full = str(tmp_path / "facts.arrow")
    build_index(root, full, scan_results=results, check=False, facts=True)
    with pa.memory_map(full) as f:
        table = pa.ipc.open_file(f).read_all()
    table.validate(full=True)
    assert table.schema.names == ["path", "label", "kind", "size", "mtime_ns", *FACTS]
    assert all(table.schema.field(n).type == t for n, t in FACTS.items())
    by_path = {os.fsdecode(r["path"]): r for r in table.to_pylist()}
    for i, rel in enumerate(rels):
        if i % 7 == 3:
            assert rel not in by_path  # bad
            continue
        row, want = by_path[rel], facts(i)
        if i % 11 == 5:  # changed since the scan: its facts are not trusted
            assert row["phash"] is None and row["flags"] is None
            continue
        for name in ("content_hash", "phash", "grayscale", "orientation", "flags", "silent_channels", "width"):
            assert row[name] == want[name], (rel, name)
        assert row["brightness"] == pytest.approx(want["brightness"])
        assert row["contrast"] is None  # not in these results
    assert os.path.getsize(plain) < os.path.getsize(full)


def test_facts_needs_an_arrow_index(tmp_path):
    from dsclean.errors import UserError

    root = str(tmp_path / "data")
    _tree(root, 2)
    with pytest.raises(UserError, match="--facts needs an arrow index"):
        build_index(root, str(tmp_path / "i.npy"), facts=True, check=False)


@pytest.mark.parametrize("large", [False, True])
def test_column_writer_round_trip(tmp_path, large):
    """Every facts type, nulls, nested lists, blocks of odd sizes: read back equal and valid."""
    n = 1003
    rng = np.random.default_rng(0)
    path_type = pa.large_binary() if large else pa.binary()
    cols = {
        "path": pa.array([f"c{i % 7}/x{i}.jpg".encode() for i in range(n)], path_type),
        "label": pa.array(rng.integers(-1, 7, n), pa.int8()),
        "size": pa.array(rng.integers(0, 2**32, n, dtype=np.int64), pa.uint32()),
    }
    for name, typ in SCAN_FACTS.items():
        if name == "flags":
            vals = [None if i % 5 == 0 else ["dark", "blurry", "tiny"][: i % 4] for i in range(n)]
        elif name == "content_hash":
            vals = [None if i % 4 == 0 else bytes([i % 256]) * 16 for i in range(n)]
        elif name == "grayscale":
            vals = [None if i % 3 == 0 else bool(i % 2) for i in range(n)]
        elif pa.types.is_floating(typ):
            vals = [None if i % 6 == 0 else i / 7 for i in range(n)]
        else:
            vals = [None if i % 6 == 0 else i % 100 for i in range(n)]
        cols[name] = pa.array(vals, typ)
    table = pa.table(cols).replace_schema_metadata({b"dsclean": b"{}"})
    folder = str(tmp_path / "cols")
    os.makedirs(folder)
    sinks = [ColumnSink(folder, f.name, f.type) for f in table.schema]
    start = 0
    for size in [1, 2, 3, 5, 64, 7, 900, 21]:
        block = table.slice(start, size)
        for sink, col in zip(sinks, block.columns):
            for chunk in col.chunks:
                sink.append(chunk)
        start += size
    assert start == n
    for sink in sinks:
        sink.finish()
    out = str(tmp_path / "x.arrow")
    write_one_batch(out, table.schema, sinks)
    with pa.memory_map(out) as f:
        reader = pa.ipc.open_file(f)
        assert reader.num_record_batches == 1
        back = reader.read_all()
    back.validate(full=True)
    assert back.equals(table) and back.schema.metadata == table.schema.metadata
    npy = str(tmp_path / "x.npy")
    os.makedirs(npy)
    write_npy_columns(npy, {s.name: s for s in sinks}, {"labels": "label", "sizes": "size"})
    offsets = np.load(os.path.join(npy, "offsets.npy"))
    assert offsets.dtype == np.int64 and offsets[-1] == len(np.load(os.path.join(npy, "paths.npy")))
    assert np.load(os.path.join(npy, "labels.npy")).tolist() == cols["label"].to_pylist()
    assert np.load(os.path.join(npy, "sizes.npy")).dtype == np.uint32


def test_the_index_copies_exactly_the_scan_facts_columns():
    """store.SCAN_FACTS is derived from dsclean.schema (the index stage may not import quality/, and
    DataLoader workers import store): it must stay equal to quality's fact columns."""
    from dsclean.quality.columns import FACT_COLUMNS

    assert SCAN_FACTS == FACT_COLUMNS
