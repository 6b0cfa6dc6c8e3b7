"""dsclean index --dedup: exact duplicates left out, the first in path order kept, counted."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
from support import synth
from support.files import write

from dsclean.cli import main
from dsclean.hashing import content_hash
from dsclean.index.build import build_index
from dsclean.index.store import open_index


def _paths(index):
    idx = open_index(str(index))
    return [os.fsdecode(idx.path_bytes(i)) for i in range(len(idx))]


def _tree(root):
    a, b = synth.jpeg(32, 32, seed=1), synth.png(32, 32, seed=2)
    write(root, "cats/a.jpg", a)
    write(root, "cats/z_copy.jpg", a)
    write(root, "dogs/a_again.jpg", a)
    write(root, "dogs/b.png", b)
    write(root, "dogs/c.png", synth.png(32, 32, seed=3))
    return a


def test_dedup_without_results_hashes_the_files(tmp_path, capsys):
    _tree(tmp_path / "d")
    code = main(["index", str(tmp_path / "d"), "-o", str(tmp_path / "i.arrow"), "--dedup"])
    assert code == 0
    assert _paths(tmp_path / "i.arrow") == ["cats/a.jpg", "dogs/b.png", "dogs/c.png"]
    out = capsys.readouterr().out
    assert "2  exact duplicates left out" in out and "5 files hashed for --dedup" in out


def test_without_dedup_everything_stays(tmp_path):
    _tree(tmp_path / "d")
    s = build_index(str(tmp_path / "d"), str(tmp_path / "i.arrow"))
    assert s.rows == 5 and s.duplicates == 0


def test_dedup_uses_content_hash_from_scan_results(tmp_path):
    root = tmp_path / "d"
    a = _tree(root)
    rows = []
    for rel in ("cats/a.jpg", "cats/z_copy.jpg", "dogs/a_again.jpg", "dogs/b.png", "dogs/c.png"):
        data = open(root / rel, "rb").read()
        rows.append({"path": rel.encode(), "kind": "image", "status": "ok", "size": len(data),
                     "width": 32, "height": 32, "sample_rate": None, "frames": 1, "channels": None,
                     "content_hash": content_hash(data)})
    results = tmp_path / "scan_results.parquet"
    schema = pa.schema([("path", pa.binary()), ("kind", pa.string()), ("status", pa.string()), ("size", pa.int64()),
                        ("width", pa.int32()), ("height", pa.int32()), ("sample_rate", pa.int32()),
                        ("frames", pa.int64()), ("channels", pa.int32()), ("content_hash", pa.binary(16))])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), results)
    assert content_hash(a) == rows[0]["content_hash"]
    s = build_index(str(root), str(tmp_path / "i.arrow"), scan_results=str(results), dedup=True)
    assert (s.duplicates, s.hashed, s.rows) == (2, 0, 3)
