"""dsclean index: both formats, ImageFolder order, labels, scan results, atomicity, CLI."""

from __future__ import annotations

import io
import json
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from PIL import Image
from support.fixtures.cli import call_command

from dsclean.errors import UserError
from dsclean.index.build import build_index
from dsclean.index.store import index_info, open_index
from dsclean.scanning.results import SCHEMA

# ----------------------------------------------------------------------------- fixtures


def _png_bytes(color=(200, 10, 10), size=(4, 4)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


PNG = _png_bytes()


def write(root, rel, data: bytes = PNG) -> str:
    """Write ``data`` at ``root/rel`` (``rel`` may be bytes, for non-UTF-8 names)."""
    path = os.path.join(os.fsencode(str(root)), os.fsencode(rel))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return os.fsdecode(path)


def write_jpeg(root, rel, size=(6, 5)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, (0, 90, 200)).save(buf, "JPEG")
    return write(root, rel, buf.getvalue())


def write_wav(root, rel, frames=100, channels=2, rate=8000) -> str:
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sf.write(path, np.zeros((frames, channels), np.float32), rate)
    return path


@pytest.fixture
def tree(tmp_path):
    """cats (nested), dogs, an audio class, a root-level file and an HTML page named .jpg."""
    root = tmp_path / "data"
    write(root, "cats/a.png")
    write_jpeg(root, "cats/sub/b.jpg")
    write(root, "dogs/c.png")
    write(root, "dogs/fake.jpg", b"<!DOCTYPE html><html>not an image</html>")
    write_wav(root, "birds/song.wav")
    write(root, "loose.png")
    return str(root)


def rel_paths(index_path: str) -> list[str]:
    idx = open_index(index_path)
    return [os.fsdecode(idx.path_bytes(i)) for i in range(len(idx))]


def write_results(path, rows: list[dict]) -> str:
    """A hand-made scan results table in the scan's schema."""
    full = [{name: None for name in SCHEMA.names} | {"kind": "image", "status": "ok"} | r for r in rows]
    for r in full:
        r["path"] = os.fsencode(r["path"])
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(full, schema=SCHEMA), str(path))
    return str(path)


# ----------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("name", ["index.arrow", "index.npy"])
def test_round_trip(tree, tmp_path, name):
    out = str(tmp_path / name)
    s = build_index(tree, out)
    assert s.format == name.split(".")[1]
    assert s.rows == 4 and s.classes == 3
    assert s.checked == 5 and s.checked_bad_reasons == {"not_media": 1}  # never scanned: decoded here
    assert s.bad_paths == ["dogs/fake.jpg"]  # the HTML page saved as .jpg
    assert s.unlabeled == 1  # loose.png: no class folder
    idx = open_index(out)
    assert rel_paths(out) == ["birds/song.wav", "cats/a.png", "cats/sub/b.jpg", "dogs/c.png"]
    assert idx.labels.tolist() == [0, 1, 1, 2]
    assert [idx.meta["kinds"][k] for k in idx.kinds] == ["audio", "image", "image", "image"]
    for i, rel in enumerate(rel_paths(out)):
        st = os.stat(os.path.join(tree, rel))
        assert idx.sizes[i] == st.st_size and idx.mtimes[i] == st.st_mtime_ns
    meta = idx.meta
    assert meta["format_version"] == 2 and meta["dsclean_version"]
    assert meta["classes"] == ["birds", "cats", "dogs"]
    assert meta["root"] == os.path.abspath(tree) and meta["rows"] == 4
    assert meta["created"].endswith("+00:00")
    assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path))


def test_npy_folder_is_pickle_free(tree, tmp_path):
    out = str(tmp_path / "idx.npy")
    build_index(tree, out)
    names = sorted(os.listdir(out))
    assert {"paths.npy", "offsets.npy", "labels.npy", "sizes.npy", "mtimes.npy", "meta.json"} <= set(names)
    for n in names:
        if n.endswith(".npy"):
            arr = np.load(os.path.join(out, n), mmap_mode="r", allow_pickle=False)
            assert arr.dtype != object
    assert np.load(os.path.join(out, "offsets.npy")).dtype == np.int64
    assert np.load(os.path.join(out, "paths.npy")).dtype == np.uint8


def test_an_empty_index_is_refused_with_the_reason(tmp_path):
    (tmp_path / "empty").mkdir()
    for name in ("e.arrow", "e.npy"):
        with pytest.raises(UserError, match="the index would be empty.*no media files found"):
            build_index(str(tmp_path / "empty"), str(tmp_path / name), no_labels=True)
        assert not os.path.exists(tmp_path / name)
    write(tmp_path / "bad", "cats/x.jpg", b"<html>not an image</html>")
    write(tmp_path / "bad", "loose.png")
    with pytest.raises(UserError, match=r"would be empty.*1 bad; 1 without a label"):
        build_index(str(tmp_path / "bad"), str(tmp_path / "b.arrow"))


# ----------------------------------------------------------------------------- ImageFolder equivalence


EXTS = (".png", ".jpg", ".jpeg")


def imagefolder_reference(root: str):
    """torchvision's documented DatasetFolder rules, reimplemented (find_classes + make_dataset)."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    class_to_idx = {c: i for i, c in enumerate(classes)}
    samples = []
    for target_class in sorted(class_to_idx.keys()):
        target_dir = os.path.join(root, target_class)
        for r, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                if fname.lower().endswith(EXTS):
                    samples.append((os.path.relpath(os.path.join(r, fname), root), class_to_idx[target_class]))
    return class_to_idx, samples


def _random_tree(root: str, seed: int) -> None:
    rng = random.Random(seed)
    alphabet = ["a", "b", "B", "-", "_", " ", ".", "0", "é", "z", "ü"]

    def name() -> str:
        while True:
            n = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3)))
            if not n.startswith(".") and n not in (".", ".."):
                return n

    folders = [""]
    for _ in range(12):
        parent = rng.choice(folders)
        folders.append(f"{parent}{name()}/" if parent else f"{name()}/")
    for _ in range(60):
        d = rng.choice(folders[1:])
        write(root, d + name() + rng.choice([".png", ".PNG", ".jpeg"]))


@pytest.mark.parametrize("fmt", ["arrow", "npy"])
def test_imagefolder_equivalence_tricky_names(tmp_path, fmt):
    root = str(tmp_path / "data")
    # a/b vs a/b-c: os.walk order puts a/b/x before a/b-c/y; plain path order does the opposite
    for rel in [
        "a/b/x.png",
        "a/b-c/y.png",
        "a/z.png",
        "a/b/c/d.png",
        "a/b.png",
        "a-b/q.png",
        "a b/q.png",
        "B/up.png",
        "é/e.png",
        "a/B/k.PNG",
        "a/b/c-d/e.png",
        "a/b/c d/e.png",
    ]:
        write(root, rel)
    out = str(tmp_path / f"i.{fmt}")
    build_index(root, out)
    class_to_idx, samples = imagefolder_reference(root)
    idx = open_index(out)
    assert {c: i for i, c in enumerate(idx.meta["classes"])} == class_to_idx
    assert list(zip(rel_paths(out), idx.labels.tolist())) == samples
    a_paths = [p for p, _ in samples if p.startswith("a/")]
    assert a_paths != sorted(a_paths), "the tree must exercise walk order != lexicographic order"
    assert a_paths.index("a/b/x.png") < a_paths.index("a/b-c/y.png")


@pytest.mark.parametrize("seed", range(4))
def test_imagefolder_equivalence_generated(tmp_path, seed):
    root = str(tmp_path / "data")
    _random_tree(root, seed)
    out = str(tmp_path / "i.arrow")
    build_index(root, out)
    class_to_idx, samples = imagefolder_reference(root)
    # ImageFolder keeps empty class folders; so do we (the class list is the folder list)
    idx = open_index(out)
    assert {c: i for i, c in enumerate(idx.meta["classes"])} == class_to_idx
    assert list(zip(rel_paths(out), idx.labels.tolist())) == samples


def test_root_files_skipped_with_count(tree, tmp_path):
    s = build_index(tree, str(tmp_path / "i.arrow"))
    assert s.unlabeled == 1
    assert "loose.png" not in rel_paths(str(tmp_path / "i.arrow"))


# ----------------------------------------------------------------------------- labels


def test_labels_csv_strings_to_sorted_ids(tmp_path):
    root = str(tmp_path / "flat")
    for n in ("x.png", "y.png", "z.png", "w.png"):
        write(root, n)
    csv = tmp_path / "labels.csv"
    csv.write_text("path,label\nz.png,zebra\nx.png,ant\ny.png,zebra\n")
    out = str(tmp_path / "i.arrow")
    s = build_index(root, out, labels_csv=str(csv))
    assert s.labels == "csv" and s.unlabeled == 1  # w.png is not in the CSV
    idx = open_index(out)
    assert idx.meta["classes"] == ["ant", "zebra"]
    assert dict(zip(rel_paths(out), idx.labels.tolist())) == {"x.png": 0, "y.png": 1, "z.png": 1}


def test_labels_csv_integer_labels(tmp_path):
    root = str(tmp_path / "flat")
    write(root, "x.png")
    write(root, "sub/y.png")
    csv = tmp_path / "labels.csv"
    csv.write_text("label,path\n3,x.png\n0,sub/y.png\n")
    out = str(tmp_path / "i.npy")
    build_index(root, out, labels_csv=str(csv))
    idx = open_index(out)
    assert dict(zip(rel_paths(out), idx.labels.tolist())) == {"x.png": 3, "sub/y.png": 0}
    assert idx.meta["classes"] == ["0", "1", "2", "3"]


@pytest.mark.parametrize(
    "text, match",
    [
        ("file,label\nx.png,a\n", "line 1.*path"),
        ("path,label\nx.png,a\nmissing.png,b\n", "line 3.*missing.png"),
        ("path,label\nx.png,a\nx.png,b\n", "line 3.*twice"),
        ("path,label\nx.png,a\n../x.png,b\n", "line 3"),
        ("path,label\nx.png,a,extra\n", "labels.csv"),
    ],
)
def test_labels_csv_errors(tmp_path, text, match):
    root = str(tmp_path / "flat")
    write(root, "x.png")
    write(str(tmp_path), "x.png")  # ../x.png exists, but outside the root
    csv = tmp_path / "labels.csv"
    csv.write_text(text)
    with pytest.raises(UserError, match=match):
        build_index(root, str(tmp_path / "i.arrow"), labels_csv=str(csv))
    assert not os.path.exists(tmp_path / "i.arrow")


def test_labels_csv_may_list_files_the_scan_quarantined(tmp_path):
    """The usual order: a labels CSV made first, then `scan --quarantine`, then `index --labels`. The
    CSV still names the quarantined files: a note, not a refusal; a path no scan knows is still refused."""
    from support import synth

    from dsclean.scanning.scanner import ScanOptions, scan

    root = str(tmp_path / "flat")
    write(root, "x.png")
    write(root, "y.png")
    with open(os.path.join(root, "bad.jpg"), "wb") as f:
        f.write(synth.truncate(synth.jpeg(64, 64), 0.5))
    state = str(tmp_path / "state")
    s = scan(
        root, ScanOptions(jobs=1, backend="threads", quarantine=str(tmp_path / "q"), progress=False, state_dir=state)
    )
    assert s.quarantined == 1 and not os.path.exists(os.path.join(root, "bad.jpg"))
    csv = tmp_path / "labels.csv"
    csv.write_text("path,label\nx.png,a\nbad.jpg,b\ny.png,b\n")
    out = str(tmp_path / "i.arrow")
    summary = build_index(root, out, labels_csv=str(csv), state_dir=state)
    assert sorted(rel_paths(out)) == ["x.png", "y.png"]
    assert any("found bad" in n and "bad.jpg" in n for n in summary.notes)
    csv.write_text("path,label\nx.png,a\nbad.jpg,b\nnever.png,b\n")
    with pytest.raises(UserError, match="line 4.*never.png"):
        build_index(root, out, labels_csv=str(csv), state_dir=state)


def test_no_labels(tree, tmp_path):
    out = str(tmp_path / "i.arrow")
    s = build_index(tree, out, no_labels=True)
    idx = open_index(out)
    assert s.rows == 5 and set(idx.labels.tolist()) == {-1}  # root files count without labels
    assert idx.meta["classes"] == []


def test_labels_and_no_labels_conflict(tree, tmp_path):
    with pytest.raises(UserError, match="--no-labels"):
        build_index(tree, str(tmp_path / "i.arrow"), labels_csv="x.csv", no_labels=True)


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize("fmt", ["arrow", "npy"])
def test_non_utf8_name_round_trips(tmp_path, fmt):
    root = str(tmp_path / "data")
    write(root, b"cats/caf\xe9.png")
    write(root, b"cats/cafe.png")
    write(root, "cats/café.png")
    out = str(tmp_path / f"i.{fmt}")
    build_index(root, out)
    idx = open_index(out)
    got = {idx.path_bytes(i) for i in range(len(idx))}
    assert got == {b"cats/caf\xe9.png", b"cats/cafe.png", "cats/café.png".encode()}
    # order is Python str order of the surrogateescape names, like ImageFolder
    assert rel_paths(out) == sorted(rel_paths(out))
    json.dumps(index_info(out))


# ----------------------------------------------------------------------------- scan results


def _seen(tree, rel) -> dict:
    """The size and mtime a scan records for a file as it is now."""
    st = os.stat(os.path.join(tree, rel))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _hand_made_results(tree, tmp_path) -> str:
    return write_results(
        tmp_path / "report" / "scan_results.parquet",
        [
            {"path": "cats/a.png", "status": "bad", "reason": "corrupt", **_seen(tree, "cats/a.png")},
            {"path": "cats/sub/b.jpg", "status": "warn", "width": 6, "height": 5, **_seen(tree, "cats/sub/b.jpg")},
            {"path": "dogs/c.png", "status": "ok", "width": 40, "height": 40, "size": 1, "mtime_ns": 1},  # changed
            {
                "path": "birds/song.wav",
                "status": "ok",
                "kind": "audio",
                "sample_rate": 8000,
                "frames": 100,
                "channels": 2,
                **_seen(tree, "birds/song.wav"),
            },
            {"path": "dogs/fake.jpg", "status": "bad", "reason": "not_media", **_seen(tree, "dogs/fake.jpg")},
        ],
    )


def _facts(out) -> dict:
    with pa.memory_map(out) as src:
        t = pa.ipc.open_file(src).read_all()
    return {os.fsdecode(r["path"]): r for r in t.to_pylist()}


def test_bad_files_excluded_facts_joined_and_a_changed_file_checked_again(tree, tmp_path):
    results = _hand_made_results(tree, tmp_path)
    out = str(tmp_path / "i.arrow")
    s = build_index(tree, out, scan_results=results, facts=True)
    assert s.excluded_bad == 2 and s.changed_since_scan == 1 and s.unscanned == 0
    assert s.checked == 1 and s.checked_bad == 0  # dogs/c.png changed since the scan: decoded again here
    assert rel_paths(out) == ["birds/song.wav", "cats/sub/b.jpg", "dogs/c.png"]
    facts = _facts(out)
    assert facts["cats/sub/b.jpg"]["width"] == 6 and facts["cats/sub/b.jpg"]["height"] == 5
    assert (facts["dogs/c.png"]["width"], facts["dogs/c.png"]["height"]) == (4, 4)  # from the new check
    assert (facts["birds/song.wav"]["sample_rate"], facts["birds/song.wav"]["frames"]) == (8000, 100)
    assert facts["birds/song.wav"]["channels"] == 2


def test_no_check_keeps_the_magic_bytes_mode(tree, tmp_path):
    results = _hand_made_results(tree, tmp_path)
    out = str(tmp_path / "i.arrow")
    s = build_index(tree, out, scan_results=results, check=False, facts=True)
    assert s.checked == 0 and s.excluded_bad == 2 and s.changed_since_scan == 1
    assert rel_paths(out) == ["birds/song.wav", "cats/sub/b.jpg", "dogs/c.png"]
    assert _facts(out)["dogs/c.png"]["width"] is None  # changed since the scan: facts not trusted, not re-checked


def test_legacy_results_inside_the_root_are_read_and_unscanned_files_checked(tree, tmp_path):
    write_results(
        os.path.join(tree, ".dsclean", "scan_results.parquet"),
        [
            {"path": "cats/a.png", "status": "bad", **_seen(tree, "cats/a.png")},
            {"path": "dogs/c.png", "status": "ok", **_seen(tree, "dogs/c.png")},
        ],
    )
    listing = sorted(os.walk(tree))
    out = str(tmp_path / "i.npy")
    s = build_index(tree, out)
    assert s.scan_results == os.path.join(tree, ".dsclean", "scan_results.parquet")
    assert "older dsclean" in s.results_source and "you may delete" in s.results_source
    assert s.excluded_bad == 1
    # files missing from the results are decoded here: the HTML .jpg goes, as bad
    assert s.unscanned == 3 and s.checked == 3 and s.checked_bad_reasons == {"not_media": 1}
    assert rel_paths(out) == ["birds/song.wav", "cats/sub/b.jpg", "dogs/c.png"]
    assert sorted(os.walk(tree)) == listing  # the legacy folder is read, never written


def test_never_scanned_root_is_fully_checked_and_says_so(tree, tmp_path, capsys):
    out = str(tmp_path / "i.arrow")
    assert call_command(["index", tree, "-o", out]) == 0
    captured = capsys.readouterr()
    assert f"scan results: none: no recorded scan of {tree}" in captured.err
    assert f"{tree} was never scanned: checking every file (5)" in captured.err
    assert "dogs/fake.jpg" not in rel_paths(out)
    assert "indexed 4 files in 3 classes" in captured.out
    assert "bad, found by that check and left out" in captured.out and "bad: dogs/fake.jpg" in captured.out


def test_no_results_and_no_check_sniffs_magic_bytes(tree, tmp_path, capsys):
    out = str(tmp_path / "i.arrow")
    assert call_command(["index", tree, "-o", out, "--no-check"]) == 0
    captured = capsys.readouterr()
    assert "--no-check: indexing by extension/magic bytes only (no decoding)" in captured.err
    assert "dogs/fake.jpg" not in rel_paths(out)
    assert "not media (magic bytes, --no-check)" in captured.out


def test_missing_scan_results_file(tree, tmp_path):
    with pytest.raises(UserError, match="nope.parquet"):
        build_index(tree, str(tmp_path / "i.arrow"), scan_results=str(tmp_path / "nope.parquet"))


def test_quarantine_folder_not_indexed(tree, tmp_path):
    write(tree, "quarantine/cats/x.png")
    write(tree, "quarantine/.dsclean-quarantine", b"")
    out = str(tmp_path / "i.arrow")
    build_index(tree, out)
    assert not any(p.startswith("quarantine") for p in rel_paths(out))
    assert "quarantine" not in open_index(out).meta["classes"]


def test_npy_index_inside_root_is_refused_unless_allowed_and_then_not_a_class(tree):
    out = os.path.join(tree, "index.npy")
    with pytest.raises(UserError, match="inside the dataset root.*--allow-inside-root"):
        build_index(tree, out)
    assert not os.path.exists(out)
    build_index(tree, out, allow_inside_root=True)
    build_index(tree, out, allow_inside_root=True)  # rebuilt over itself: the old index folder is not a class either
    assert open_index(out).meta["classes"] == ["birds", "cats", "dogs"]


# ----------------------------------------------------------------------------- atomicity


@pytest.mark.parametrize("fmt", ["arrow", "npy"])
def test_failed_write_leaves_old_index(tree, tmp_path, monkeypatch, fmt):
    import dsclean.index.write as index_mod

    out = str(tmp_path / f"i.{fmt}")
    build_index(tree, out)
    before = rel_paths(out)
    write(tree, "cats/new.png")

    def half_write(tmp, *args):
        with open(tmp if fmt == "arrow" else os.path.join(tmp, "paths.npy"), "wb") as f:
            f.write(b"ARROW1\0\0half")  # something half-written in the temp output...
        raise OSError(28, "No space left on device")  # ...then the disk fills up

    monkeypatch.setattr(index_mod, "write_one_batch" if fmt == "arrow" else "write_npy_columns", half_write)
    with pytest.raises(OSError, match="No space"):
        build_index(tree, out)
    assert rel_paths(out) == before
    assert sorted(os.listdir(tmp_path)) == ["data", f"i.{fmt}"]  # no temp left behind


def test_refuses_to_replace_a_non_index_folder(tree, tmp_path):
    (tmp_path / "stuff.npy").mkdir()
    (tmp_path / "stuff.npy" / "precious.txt").write_text("keep me")
    with pytest.raises(UserError, match="not a dsclean npy index"):
        build_index(tree, str(tmp_path / "stuff.npy"))
    assert (tmp_path / "stuff.npy" / "precious.txt").read_text() == "keep me"


# ----------------------------------------------------------------------------- large offsets, compression


def test_large_offsets_npy(tree, tmp_path):
    out = str(tmp_path / "big.npy")
    build_index(tree, out, large_path_bytes=10)
    assert rel_paths(out) == rel_paths_of_small(tree, tmp_path)


def test_large_offsets_forced_threshold(tree, tmp_path):
    out = str(tmp_path / "big.arrow")
    s = build_index(tree, out, large_path_bytes=10)
    assert s.large_paths
    with pa.memory_map(out) as src:
        assert pa.ipc.open_file(src).schema.field("path").type == pa.large_binary()
    idx = open_index(out)
    assert idx.offsets.dtype == np.int64
    assert rel_paths(out) == rel_paths_of_small(tree, tmp_path)
    assert index_info(out)["large_paths"] is True


def rel_paths_of_small(tree, tmp_path) -> list[str]:
    small = str(tmp_path / "small.arrow")
    build_index(tree, small)
    assert open_index(small).offsets.dtype == np.int32
    return rel_paths(small)


def test_compressed_arrow_refused(tree, tmp_path):
    good = str(tmp_path / "good.arrow")
    build_index(tree, good)
    with pa.memory_map(good) as src:
        table = pa.ipc.open_file(src).read_all()
    bad = str(tmp_path / "zstd.arrow")
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.OSFile(bad, "wb") as sink, pa.ipc.new_file(sink, table.schema, options=opts) as w:
        w.write_table(table)
    with pytest.raises(UserError, match=r"zstd.arrow.*compressed.*dsclean index"):
        open_index(bad)
    with pytest.raises(UserError, match="compressed"):
        call_command(["info", bad])


def test_corrupt_and_foreign_index_files(tmp_path):
    junk = tmp_path / "junk.arrow"
    junk.write_bytes(b"not arrow at all")
    with pytest.raises(UserError, match="junk.arrow"):
        index_info(str(junk))
    plain = str(tmp_path / "plain.arrow")
    with pa.OSFile(plain, "wb") as sink, pa.ipc.new_file(sink, pa.schema([("x", pa.int8())])) as w:
        w.write_table(pa.table({"x": pa.array([1], pa.int8())}))
    with pytest.raises(UserError, match="not a dsclean index"):
        index_info(plain)
    with pytest.raises(UserError, match="not found"):
        index_info(str(tmp_path / "missing.arrow"))


# ----------------------------------------------------------------------------- CLI


def test_cli_info_human_and_json(tree, tmp_path, capsys):
    out = str(tmp_path / "i.arrow")
    assert call_command(["index", tree, "-o", out, "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    assert call_command(["info", out]) == 0
    text = capsys.readouterr().out
    assert "rows:      4" in text and "cats" in text and "image 3, audio 1" in text
    assert call_command(["info", out, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rows"] == 4
    assert [(c["name"], c["count"]) for c in info["classes"]] == [("birds", 1), ("cats", 2), ("dogs", 1)]
    assert info["kinds"] == {"image": 3, "audio": 1}
    media = sum(os.path.getsize(os.path.join(tree, p)) for p in rel_paths(out))
    assert info["media_bytes"] == media and info["index_bytes"] == os.path.getsize(out)
    assert info["metadata"]["rows"] == 4 and info["metadata"]["classes"] == ["birds", "cats", "dogs"]


@pytest.mark.parametrize(
    "argv, match",
    [
        (["index", "{tmp}/nope", "-o", "{tmp}/i.arrow"], "nope: no such folder"),
        (["index", "{tree}", "-o", "{tmp}/i.arrow", "--format", "npy"], "i.arrow.*--format npy"),
        (["index", "{tree}", "-o", "{tmp}/i.npy", "--format", "arrow"], "i.npy"),
        (["index", "{tree}", "-o", "{tmp}/i.arrow", "--labels", "{tmp}/l.csv", "--no-labels"], "--no-labels"),
        (["index", "{tree}", "-o", "{tmp}/i.arrow", "--labels", "{tmp}/l.csv"], "l.csv: labels CSV not found"),
        (["index", "{tree}", "-o", "{tmp}/nodir/i.arrow"], "does not exist"),
        (["info", "{tmp}/none.arrow"], "none.arrow: index not found"),
    ],
)
def test_cli_user_errors(tree, tmp_path, argv, match):
    argv = [a.format(tmp=tmp_path, tree=tree) for a in argv]
    with pytest.raises(UserError, match=match):
        call_command(argv)


def test_cli_format_from_flag_and_name(tree, tmp_path):
    assert call_command(["index", tree, "-o", str(tmp_path / "plain"), "--format", "npy", "-q"]) == 0
    assert os.path.isdir(tmp_path / "plain")
    assert call_command(["index", tree, "-o", str(tmp_path / "noext"), "-q"]) == 0
    assert os.path.isfile(tmp_path / "noext")  # arrow by default
