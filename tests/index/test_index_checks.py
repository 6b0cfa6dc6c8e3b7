"""Issue 10: `index` checks what the scan did not cover; the ImageFolder file rule; PPM/PGM; wording."""

from __future__ import annotations

import os

import pytest
from support import synth
from support.files import write
from support.fixtures.cli import run_cli
from support.treegen import make_tree

import dsclean
from dsclean.errors import UserError
from dsclean.index.build import build_index
from dsclean.index.store import open_index
from dsclean.scanning.check import CheckOptions, check_file
from dsclean.scanning.scanner import ScanOptions, scan


def rel_paths(index: str) -> list[str]:
    idx = open_index(index)
    return [os.fsdecode(idx.path_bytes(i)) for i in range(len(idx))]


def test_restored_files_are_checked_and_left_out(tmp_path):
    root, q = tmp_path / "data", tmp_path / "q"
    expected = make_tree(root)
    scan(str(root), ScanOptions(quarantine=str(q), jobs=1))
    scan(str(root), ScanOptions(quarantine=str(q), jobs=1))  # the latest results no longer list the bad files
    dsclean.restore(str(q))  # ...and now they are back in the tree
    s = build_index(str(root), str(tmp_path / "i.arrow"))
    assert s.unscanned == 6 and s.checked == 6 and s.checked_bad == 6
    assert sorted(rel_paths(str(tmp_path / "i.arrow"))) == sorted(p for p, st in expected.items() if st == "ok")


def test_changed_and_new_files_are_checked_with_the_scans_options_into_the_cache(tmp_path, monkeypatch):
    root = tmp_path / "data"
    make_tree(root, n_bad=0)
    options = CheckOptions(max_pixels=10_000)  # the scan's own rule: more pixels is a decompression bomb
    scan(str(root), ScanOptions(check=options, jobs=1, report_dir=str(tmp_path / "r")))
    write(root, "cats/new_big.jpg", synth.jpeg(200, 200))  # 40,000 pixels: fine by default, a bomb for this scan
    write(root, "dogs/good1.jpg", synth.HTML_PAGE)  # changed since the scan
    import dsclean.index.checking as checking

    seen = {}
    real = checking.run_checks

    def spy(root_, chunks, opts, workers, backend="loky", scheduler=None):
        chunks = list(chunks)
        seen.update(options=opts, workers=workers, files=sum(len(c) for c in chunks))
        return real(root_, chunks, opts, workers, backend, scheduler)

    monkeypatch.setattr(checking, "run_checks", spy)
    s = build_index(str(root), str(tmp_path / "i.arrow"), jobs=1)
    assert seen == {"options": options, "workers": 1, "files": 2}
    assert s.checked == 2 and s.changed_since_scan == 1 and s.unscanned == 1
    assert s.checked_bad_reasons == {"decompression_bomb": 1, "not_media": 1}
    assert not {"cats/new_big.jpg", "dogs/good1.jpg"} & set(rel_paths(str(tmp_path / "i.arrow")))
    # the verdicts went into the scan cache: a second index finds them there and decodes only what is new
    write(root, "cats/x.png", synth.png(8, 8))
    seen.clear()
    s2 = build_index(str(root), str(tmp_path / "j.arrow"), jobs=1)
    assert s2.checked == 3 and s2.checked_from_cache == 2 and s2.checked_bad == 2
    assert seen["files"] == 1  # only cats/x.png went to a worker
    # ... and so does the next scan with those options (nothing decoded but the new file, already cached)
    again = scan(str(root), ScanOptions(check=options, jobs=1, report_dir=str(tmp_path / "r")))
    assert again.cached == again.files == 8


def test_cli_index_errors_are_clear(tmp_path):
    from support.files import write as w

    root = tmp_path / "data"
    w(root, "c/x.jpg", synth.HTML_PAGE)
    proc = run_cli("index", root, "-o", tmp_path / "i.arrow")
    assert proc.returncode == 2 and "the index would be empty" in proc.stderr and "1 bad" in proc.stderr
    proc = run_cli("index", root, "-o", tmp_path / "x.txt")
    assert proc.returncode == 2 and "not .txt" in proc.stderr and "--format" in proc.stderr
    w(root, "c/ok.jpg", synth.jpeg(8, 8))
    assert run_cli("index", root, "-o", tmp_path / "x.txt", "--format", "arrow", "-q").returncode == 0


# ----------------------------------------------------------------------------- the ImageFolder file rule

#: torchvision.datasets.folder.IMG_EXTENSIONS
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def find_classes(directory: str) -> tuple[list[str], dict[str, int]]:
    """torchvision's DatasetFolder.find_classes, reimplemented (every folder, hidden included, links followed)."""
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {c: i for i, c in enumerate(classes)}


def make_dataset(directory: str, class_to_idx: dict[str, int], allow_empty: bool = False) -> list[tuple[str, int]]:
    """torchvision's make_dataset, reimplemented: IMG_EXTENSIONS by ``lower().endswith``, os.walk(followlinks=True)."""
    instances, available = [], set()
    for target_class in sorted(class_to_idx):
        target_dir = os.path.join(directory, target_class)
        if not os.path.isdir(target_dir):
            continue
        for r, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(r, fname)
                if path.lower().endswith(IMG_EXTENSIONS):
                    instances.append((path, class_to_idx[target_class]))
                    available.add(target_class)
    empty = set(class_to_idx) - available
    if empty and not allow_empty:
        raise FileNotFoundError(f"Found no valid file for the classes {', '.join(sorted(empty))}. ")
    return instances


@pytest.fixture
def folder_tree(tmp_path):
    """Every case where the two file rules differ: hidden files and folders, .gif, .ppm/.pgm, case, links."""
    root = tmp_path / "data"
    photo = synth.photo_like(12, 10)
    write(root, "cats/a.JPG", synth.jpeg(12, 10))
    write(root, "cats/.hidden.png", synth.png(8, 8, seed=1))
    write(root, "cats/sub/c.ppm", synth.encode_image(photo, "PPM"))
    write(root, "cats/sub/d.pgm", synth.encode_image(photo.convert("L"), "PPM"))
    write(root, "cats/e.bmp", synth.encode_image(photo, "BMP"))
    write(root, "dogs/f.tiff", synth.encode_image(photo, "TIFF"))
    write(root, "dogs/g.webp", synth.encode_image(photo, "WEBP"))
    write(root, "dogs/h.gif", synth.animated_gif())  # not in IMG_EXTENSIONS
    write(root, "dogs/notes.txt", b"x")
    write(root, ".thumbs/t.png", synth.png(8, 8, seed=2))  # a hidden folder: a class to ImageFolder
    write(root, "gifs_only/x.gif", synth.animated_gif(seed=3))  # an empty class under the ImageFolder rule
    write(root, "loose.png", synth.png(8, 8, seed=4))  # no class folder
    write(tmp_path, "elsewhere/birds/i.png", synth.png(8, 8, seed=5))
    os.symlink(tmp_path / "elsewhere" / "birds", root / "birds")  # a linked class folder
    return str(root)


@pytest.mark.parametrize("fmt", ["arrow", "npy"])
def test_imagefolder_rule_equals_torchvision(folder_tree, tmp_path, fmt):
    out = str(tmp_path / f"i.{fmt}")
    s = build_index(folder_tree, out, files="imagefolder")
    classes, class_to_idx = find_classes(folder_tree)
    samples = make_dataset(folder_tree, class_to_idx, allow_empty=True)
    idx = open_index(out)
    assert idx.meta["classes"] == classes == [".thumbs", "birds", "cats", "dogs", "gifs_only"]
    got = [(os.path.join(folder_tree, p), int(label)) for p, label in zip(rel_paths(out), idx.labels)]
    assert got == samples and s.checked_bad == 0
    with pytest.raises(FileNotFoundError, match="gifs_only"):
        make_dataset(folder_tree, class_to_idx)  # ImageFolder without allow_empty refuses; dsclean says so
    assert any("gifs_only" in n and "allow_empty" in n for n in s.notes)
    assert tuple(idx.meta["extensions"]) == IMG_EXTENSIONS


def test_dsclean_rule_differs_as_documented(folder_tree, tmp_path):
    out = str(tmp_path / "d.arrow")
    build_index(folder_tree, out, symlinks="all")
    paths = rel_paths(out)
    assert "dogs/h.gif" in paths and "gifs_only/x.gif" in paths  # media dsclean can check
    assert not any(p.startswith(".thumbs/") or "/.hidden" in p for p in paths)  # hidden skipped
    assert ".thumbs" not in open_index(out).meta["classes"]


def test_ppm_and_pgm_get_a_decode_check(tmp_path):
    photo = synth.photo_like(20, 10)
    ppm = synth.encode_image(photo, "PPM")
    write(tmp_path, "ok.ppm", ppm)
    write(tmp_path, "ok.pgm", synth.encode_image(photo.convert("L"), "PPM"))
    write(tmp_path, "cut.ppm", ppm[:-40])
    write(tmp_path, "bomb.pgm", b"P5\n100000 100000\n255\n" + b"\0" * 64)
    write(tmp_path, "html.pgm", synth.HTML_PAGE)
    verdicts = {n: check_file(str(tmp_path), n) for n in ("ok.ppm", "ok.pgm", "cut.ppm", "bomb.pgm", "html.pgm")}
    assert verdicts["ok.ppm"].status == "ok" and (verdicts["ok.ppm"].width, verdicts["ok.ppm"].height) == (20, 10)
    assert verdicts["ok.pgm"].status == "ok" and verdicts["ok.pgm"].mode == "L"
    assert (verdicts["cut.ppm"].status, verdicts["cut.ppm"].reason) == ("bad", "truncated")
    assert verdicts["bomb.pgm"].reason == "decompression_bomb"
    assert verdicts["html.pgm"].reason == "not_media"


def test_a_state_folder_inside_the_root_is_refused(tmp_path):
    root = tmp_path / "data"
    write(root, "c/a.jpg", synth.jpeg(8, 8))
    with pytest.raises(UserError, match="state folder .* is inside the dataset root"):
        build_index(str(root), str(tmp_path / "i.arrow"), state_dir=str(root / ".state"))
    assert sorted(os.listdir(root)) == ["c"]


def test_scanned_files_keep_the_kind_of_their_content(tmp_path):
    """A WAV named .jpg and a PNG named .wav: the scan keeps them (extension_mismatch is a warning) and records what
    they are; the index built on that scan must say the same, or the loader decodes a WAV as a picture."""
    root = tmp_path / "data"
    write(root, "a/sound.jpg", synth.encode_audio(synth.tone(0.05, 8000), 8000, "WAV"))
    write(root, "a/ok.jpg", synth.jpeg(24, 24))
    write(root, "b/picture.wav", synth.png(8, 8))
    write(root, "b/ok.wav", synth.encode_audio(synth.tone(0.05, 8000, seed=1), 8000, "WAV"))
    scan(str(root), ScanOptions(jobs=1, report_dir=str(tmp_path / "r")))
    out = str(tmp_path / "i.arrow")
    # by default a file whose content is another kind than its extension stays out (test_index_warnings);
    # asked for, it is indexed with its content's kind
    s = build_index(
        str(root), out, scan_results=str(tmp_path / "r" / "scan_results.parquet"), include_warn=["extension_mismatch"]
    )
    assert s.checked == 0  # every row came from the scan
    idx = open_index(out)
    kinds = {os.fsdecode(idx.path_bytes(i)): idx.meta["kinds"][idx.kinds[i]] for i in range(len(idx))}
    assert kinds == {"a/ok.jpg": "image", "a/sound.jpg": "audio", "b/ok.wav": "audio", "b/picture.wav": "image"}
    ds = dsclean.IndexedDataset(out, root=str(root))
    loaded = {ds.path(i): type(ds[i][0]).__name__ for i in range(len(ds))}
    assert loaded["a/sound.jpg"] == loaded["b/ok.wav"] and loaded["b/picture.wav"] == loaded["a/ok.jpg"]


def test_no_check_sniffs_a_file_changed_since_the_scan(tmp_path, monkeypatch):
    """Review 6, bug 2: a good JPEG replaced after the scan by an HTML error page must not ride on its old
    "ok" into the index under --no-check: changed files get the magic-byte check of never-scanned ones."""
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "data"
    for i in range(3):
        write(root, f"cats/{i}.jpg", synth.jpeg(16, 16, seed=i))
    scan(str(root), ScanOptions(dry_run=True, jobs=1, progress=False))
    page = root / "cats" / "1.jpg"
    page.write_bytes(b"<!DOCTYPE html><html>404 Not Found</html>")
    st = os.stat(page)
    os.utime(page, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    s = build_index(str(root), str(tmp_path / "i.arrow"), check=False)
    assert s.changed_since_scan == 1
    assert rel_paths(str(tmp_path / "i.arrow")) == ["cats/0.jpg", "cats/2.jpg"]
