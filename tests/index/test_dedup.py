"""dsclean index --dedup: exact duplicates left out, the first in path order kept, counted."""

from __future__ import annotations

import os

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
    import dsclean

    root = tmp_path / "d"
    a = _tree(root)
    dsclean.scan(str(root), dsclean.ScanOptions(report_dir=str(tmp_path / "r"), jobs=1, progress=False))
    hashes = dict(
        zip(
            dsclean.read_results(str(tmp_path / "r")).column("path").to_pylist(),
            dsclean.read_results(str(tmp_path / "r")).column("content_hash").to_pylist(),
        )
    )
    assert hashes[b"cats/a.jpg"] == content_hash(a)
    s = build_index(str(root), str(tmp_path / "i.arrow"), dedup=True)
    assert (s.duplicates, s.hashed, s.rows) == (2, 0, 3)  # every hash came from the scan: nothing read again


def test_a_scan_with_facts_none_has_no_hashes_so_dedup_hashes_and_facts_are_null(tmp_path, capsys):
    import pyarrow as pa

    root = tmp_path / "d"
    _tree(root)
    assert main(["scan", str(root), "--facts", "none", "-q", "-j", "1"]) == 0
    capsys.readouterr()
    s = build_index(str(root), str(tmp_path / "i.arrow"), dedup=True)
    assert (s.duplicates, s.hashed, s.rows) == (2, 5, 3)  # no hash in the results: every file hashed here
    assert _paths(tmp_path / "i.arrow") == ["cats/a.jpg", "dogs/b.png", "dogs/c.png"]
    assert main(["index", str(root), "-o", str(tmp_path / "f.arrow"), "--facts"]) == 0
    assert "the scan ran with --facts none" in capsys.readouterr().err
    with pa.memory_map(str(tmp_path / "f.arrow")) as src:
        table = pa.ipc.open_file(src).read_all()
    assert table.num_rows == 5 and table["content_hash"].null_count == 5 and table["phash"].null_count == 5
    assert table["width"].to_pylist() == [32] * 5  # media facts come with every verdict


def test_a_file_edited_in_place_keeping_its_size_is_not_dropped_by_an_old_hash(tmp_path, monkeypatch):
    """Review 6, bug 3: uncompressed formats keep their size when edited; the scan's hash of the old bytes
    must not make a now-unique file an "exact duplicate"."""
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(tmp_path / "state"))
    img = synth.photo_like(16, 16, seed=4)
    data = synth.encode_image(img, "BMP")
    write(tmp_path / "d", "cats/a.bmp", data)
    write(tmp_path / "d", "cats/b.bmp", data)
    write(tmp_path / "d", "cats/c.bmp", synth.encode_image(synth.photo_like(16, 16, seed=5), "BMP"))
    assert main(["scan", str(tmp_path / "d"), "--dry-run", "-q"]) == 0
    edited = bytearray(data)
    edited[-10:] = bytes(255 - x for x in edited[-10:])  # new pixels, same size
    path = tmp_path / "d" / "cats" / "b.bmp"
    path.write_bytes(bytes(edited))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    assert main(["index", str(tmp_path / "d"), "-o", str(tmp_path / "i.arrow"), "--dedup"]) == 0
    assert _paths(tmp_path / "i.arrow") == ["cats/a.bmp", "cats/b.bmp", "cats/c.bmp"]
