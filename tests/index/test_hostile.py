"""Hostile and damaged index files (issue 12, item 8): a clear UserError naming the index and the first bad row.

Each test writes a good index, corrupts it by hand (metadata, bytes of one column
buffer, a truncated file, npy arrays of the wrong shape) and opens it the three ways
a user does: ``open_index``, ``IndexedDataset`` and ``dsclean info``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest

from dsclean.cli import main
from dsclean.data.dataset import IndexedDataset
from dsclean.errors import UserError
from dsclean.index import store
from dsclean.index.store import index_info, index_schema, make_meta, open_index, write_arrow, write_npy

PATHS = [b"cats/a.jpg", b"cats/b.jpg", b"cats/c.jpg", b"dogs/d.jpg", b"dogs/e.jpg", b"dogs/f.jpg"]


def _table(labels=(0, 0, 0, 1, 1, 1)) -> pa.Table:
    schema = index_schema(classes=2, max_size=100, large=False, facts=False)
    n = len(PATHS)
    return pa.table(
        {"path": PATHS, "label": list(labels), "kind": [0] * n, "size": [100] * n, "mtime_ns": [1] * n}
    ).cast(schema)


def _write(tmp_path, *, meta_edit=None, fmt="arrow", labels=(0, 0, 0, 1, 1, 1), mode="folder") -> str:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    meta = make_meta(str(root), ["cats", "dogs"], mode, len(PATHS), None)
    if meta_edit:
        meta.update(meta_edit)
    out = str(tmp_path / f"i.{fmt}")
    if fmt == "arrow":
        write_arrow(_table(labels), out, meta)
    else:
        os.makedirs(out)
        write_npy(_table(labels), out, meta)
    return out


def _refused(path: str, match: str) -> None:
    """The same clear error from the API, the Dataset and the CLI (exit 2, no traceback)."""
    store._VALIDATED.clear()
    with pytest.raises(UserError, match=match):
        open_index(path)
    store._VALIDATED.clear()
    with pytest.raises(UserError, match=match):
        IndexedDataset(path)
    store._VALIDATED.clear()
    assert main(["info", path]) == 2


def _patch(path: str, column: str, buffer: int, item: int, dtype, value) -> None:
    """Overwrite one element of one buffer of ``column`` inside the Arrow file."""
    with pa.memory_map(path) as src:
        batch = pa.ipc.open_file(src).get_batch(0)
        src.seek(0)
        base = src.read_buffer().address
        where = batch.column(column).buffers()[buffer].address - base
    with open(path, "r+b") as f:
        f.seek(where + item * np.dtype(dtype).itemsize)
        f.write(np.array([value], dtype).tobytes())


def test_a_good_index_opens_and_info_and_len_agree(tmp_path, capsys):
    path = _write(tmp_path)
    assert len(IndexedDataset(path)) == index_info(path)["rows"] == 6
    assert main(["info", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 6


@pytest.mark.parametrize("rows", [10**12, 5])
def test_rows_in_the_metadata_must_match_the_columns(tmp_path, rows):
    _refused(
        _write(tmp_path, meta_edit={"rows": rows}),
        rf"i\.arrow: corrupt index: the metadata says {rows:,} rows "
        r"but the label column has 6",
    )


@pytest.mark.parametrize("rows", [-1, "6", 6.0, None])
def test_rows_of_the_wrong_type(tmp_path, rows):
    _refused(_write(tmp_path, meta_edit={"rows": rows}), r"i\.arrow: corrupt dsclean metadata \(rows is")


def test_path_offsets_out_of_range(tmp_path):
    path = _write(tmp_path)
    _patch(path, "path", 1, 6, np.int32, 10**6)  # the last row's end, far past the data
    _refused(path, r"i\.arrow: (corrupt index at row 5: its path ends at byte 1,000,000|not a readable Arrow index)")


def test_path_offsets_decreasing(tmp_path):
    path = _write(tmp_path)
    _patch(path, "path", 1, 3, np.int32, 1)  # row 2 ends before it starts
    _refused(path, r"i\.arrow: corrupt index at row 2: its path offsets decrease")


def test_label_out_of_range(tmp_path):
    path = _write(tmp_path)
    _patch(path, "label", 1, 4, np.int8, 99)
    _refused(path, r"i\.arrow: corrupt index at row 4: label outside 0\.\.1 \(the 2 classes\): 99")


def test_unlabelled_rows_only_in_an_unlabelled_index(tmp_path):
    _refused(_write(tmp_path, labels=(0, 0, -1, 1, 1, 1)), r"corrupt index at row 2: label outside 0\.\.1")
    (tmp_path / "i.arrow").unlink()
    path = _write(tmp_path, labels=(-1,) * 6, mode="none", meta_edit={"classes": []})
    assert len(IndexedDataset(path)) == 6


def test_unknown_kind(tmp_path):
    path = _write(tmp_path)
    _patch(path, "kind", 1, 5, np.int8, 7)
    _refused(path, r"i\.arrow: corrupt index at row 5: unknown kind \(known: image, audio\): 7")


def test_negative_size_in_an_old_format_index(tmp_path):
    """Format 1 (int64 labels and sizes) is still read, and validated the same way."""
    root = tmp_path / "root"
    root.mkdir()
    meta = make_meta(str(root), ["cats", "dogs"], "folder", 6, None)
    meta["format_version"] = 1
    table = _table().cast(
        pa.schema(
            [
                ("path", pa.binary()),
                ("label", pa.int64()),
                ("kind", pa.int8()),
                ("size", pa.int64()),
                ("mtime_ns", pa.int64()),
            ]
        )
    )
    path = str(tmp_path / "old.arrow")
    write_arrow(table, path, meta)
    assert open_index(path).labels.dtype == np.int64 and len(IndexedDataset(path)) == 6
    _patch(path, "size", 1, 1, np.int64, -5)
    _refused(path, r"old\.arrow: corrupt index at row 1: negative size: -5")


def test_a_future_format_is_refused_by_name(tmp_path):
    _refused(
        _write(tmp_path, meta_edit={"format_version": 99}),
        r"i\.arrow: index format 99 is newer than this "
        r"dsclean understands \(2\)",
    )


def test_truncated_file(tmp_path):
    path = _write(tmp_path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    _refused(path, r"i\.arrow: not a readable Arrow index")


def test_npy_columns_of_the_wrong_length_or_type(tmp_path):
    path = _write(tmp_path, fmt="npy")
    np.save(os.path.join(path, "labels.npy"), np.zeros(5, np.int8))
    _refused(path, r"i\.npy: corrupt index: the metadata says 6 rows but the label column has 5")
    np.save(os.path.join(path, "labels.npy"), np.zeros(6, np.float32))
    _refused(path, r"i\.npy: corrupt index \(labels\.npy is float32")


def test_validated_once_per_file_identity(tmp_path, monkeypatch):
    """Workers trust the opening process's validation for the same (dev, inode, size, mtime); a rewrite is checked."""
    path = _write(tmp_path)
    store._VALIDATED.clear()
    identity = open_index(path).identity
    calls = []
    monkeypatch.setattr(store, "validate", lambda idx: calls.append(idx.path))
    open_index(path)  # this process validated it already
    store._VALIDATED.clear()
    open_index(path, trusted=identity)  # a spawned worker: trusts the identity it was given
    assert calls == []
    os.utime(path, ns=(1, 1))  # the file changed: validated again, whatever the caller trusts
    open_index(path, trusted=identity)
    assert calls == [path]


def test_an_npy_column_swapped_for_a_fifo_after_its_check_is_never_opened(tmp_path, monkeypatch):
    """np.load maps a path: the column is mapped through the checked descriptor, so a FIFO renamed over the
    path between the check and the map neither blocks nor is read (the race the round-3 pass left open)."""
    import signal

    path = _write(tmp_path, fmt="npy")
    want = np.load(os.path.join(path, "labels.npy")).tolist()
    real = store.open_regular

    def then_swap(p, *a, **kw):
        fd = real(p, *a, **kw)
        if p.endswith("labels.npy"):
            fifo = p + ".fifo"
            os.mkfifo(fifo)
            os.rename(fifo, p)  # the checked file is now only reachable through fd
        return fd

    monkeypatch.setattr(store, "open_regular", then_swap)
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("blocked on the FIFO")))
    signal.alarm(20)
    try:
        col = store._load_npy(path, "labels")
    finally:
        signal.alarm(0)
    assert col.tolist() == want
