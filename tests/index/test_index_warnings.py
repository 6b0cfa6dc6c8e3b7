"""Warnings the index leaves out: files the scan could not judge (too_large past the default ceiling) and damage
`scan --lenient` accepted (a truncated JPEG), unless --include-warn asks for them; then the default loader reads them."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from support import synth
from support.files import write
from support.fixtures.cli import run_cli
from torch.utils.data import DataLoader

import dsclean
from dsclean.errors import UserError
from dsclean.index.build import build_index
from dsclean.index.store import open_index
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.scanner import ScanOptions, scan


def rel_paths(index: str) -> list[str]:
    idx = open_index(index)
    return [os.fsdecode(idx.path_bytes(i)) for i in range(len(idx))]


@pytest.mark.slow  # fault injection: a check allocating until MemoryError, four CLI runs
def test_a_file_the_scan_could_not_judge_is_not_indexed_unless_asked(tmp_path):
    """scan && index must not ship a file whose check hit the default memory ceiling (warn/too_large, "not
    judged"): the index checks it again, still cannot judge it, leaves it out and says why and what to do."""
    root, state = tmp_path / "data", tmp_path / "state"
    for i in range(3):
        write(root, f"c/ok{i}.jpg", synth.jpeg(16, 16, seed=i))
    write(root, "c/w__oom__.jpg", synth.jpeg(16, 16, seed=9))  # the test fault hook: allocates until MemoryError
    env = {
        **os.environ,
        "DSCLEAN_TEST_FAULTS": "1",
        "DSCLEAN_DEFAULT_MAX_MEMORY": str(256 << 20),
        "DSCLEAN_STATE_DIR": str(state),
    }
    run_cli("scan", root, "--dry-run", "-q", "--jobs", "1", env=env, ok=True)
    (w,) = [v for v in _verdicts(state, root) if v.status != "ok"]
    assert (w.path, w.status, w.reason) == ("c/w__oom__.jpg", "warn", "too_large")

    out = run_cli("index", root, "-o", tmp_path / "i.arrow", "--jobs", "1", env=env, ok=True).stdout
    assert rel_paths(str(tmp_path / "i.arrow")) == ["c/ok0.jpg", "c/ok1.jpg", "c/ok2.jpg"]
    assert "left out, warn/too_large 1" in out and "--max-memory" in out and "--include-warn too_large" in out
    assert "c/w__oom__.jpg" in out and "changed since the scan" not in out  # it did not change
    # --no-check: the scan's verdict alone, the same rule
    run_cli("index", root, "-o", tmp_path / "n.arrow", "--no-check", "-q", env=env, ok=True)
    assert "c/w__oom__.jpg" not in rel_paths(str(tmp_path / "n.arrow"))
    # asked for explicitly: indexed
    run_cli(
        "index", root, "-o", tmp_path / "k.arrow", "--include-warn", "too_large", "-q", "--jobs", "1", env=env, ok=True
    )
    assert "c/w__oom__.jpg" in rel_paths(str(tmp_path / "k.arrow"))


def _verdicts(state, root):
    from dsclean.locations import find_results

    paths, _ = find_results(str(root), None, str(state))
    return [v for p in paths for v in dsclean.iter_verdicts(p)]


@pytest.fixture
def lenient_tree(tmp_path):
    root = tmp_path / "data"
    for i in range(3):
        write(root, f"a/ok{i}.jpg", synth.jpeg(64, 64, seed=i))
    write(root, "a/cut.jpg", synth.truncate(synth.jpeg(256, 256, seed=7), 0.6))
    scan(str(root), ScanOptions(check=CheckOptions(lenient=True), jobs=1, report_dir=str(tmp_path / "r")))
    (w,) = [v for v in dsclean.iter_verdicts(str(tmp_path / "r")) if v.status != "ok"]
    assert (w.path, w.status, w.reason) == ("a/cut.jpg", "warn", "truncated")
    return root


def _load_all(index: str) -> int:
    ds = dsclean.IndexedDataset(index, lambda im: torch.from_numpy(np.array(im.resize((8, 8)))))
    return sum(len(y) for _, y in DataLoader(ds, batch_size=2, num_workers=0))


def test_a_truncated_jpeg_scan_lenient_accepted_never_crashes_the_dataloader(lenient_tree, tmp_path):
    from PIL import ImageFile

    out = str(tmp_path / "i.arrow")
    s = build_index(str(lenient_tree), out)
    assert s.warned == 1 and s.warned_reasons == {"truncated": 1} and s.warned_paths == ["a/cut.jpg"]
    assert "a/cut.jpg" not in rel_paths(out)
    assert _load_all(out) == 3
    # asked for: indexed, and the default loader reads it as the scan did (nothing global switched on)
    out2 = str(tmp_path / "k.arrow")
    s2 = build_index(str(lenient_tree), out2, include_warn=["truncated"])
    assert s2.warned == 0 and "a/cut.jpg" in rel_paths(out2)
    assert _load_all(out2) == 4
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    # ... only for an index that says so: Pillow's loader (every other index's) still refuses the file
    from dsclean.data.loaders import pil_loader

    with pytest.raises(OSError, match="truncated"):
        pil_loader(str(lenient_tree / "a/cut.jpg"))


def test_include_warn_takes_only_reasons_the_index_leaves_out(tmp_path):
    write(tmp_path / "data", "a/x.jpg", synth.jpeg(16, 16))
    with pytest.raises(UserError, match="--include-warn nonconforming: not a warning the index leaves out"):
        build_index(str(tmp_path / "data"), str(tmp_path / "i.arrow"), include_warn=["nonconforming"])


@pytest.mark.parametrize("check", [True, False])
def test_a_sound_named_jpg_stays_out_of_an_image_index_unless_asked(tmp_path, monkeypatch, check):
    """Review 6, bug 4: a WAV saved as .jpg is warn/extension_mismatch (never moved); indexed, it reached the image
    transform as a (tensor, rate) tuple and killed the DataLoader worker. A PNG named .jpg (same kind) stays in."""
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "data"
    for i in range(2):
        write(root, f"cats/{i}.jpg", synth.jpeg(24, 16, seed=i))
    write(root, "cats/png.jpg", synth.png(16, 16, seed=5))
    write(root, "cats/clip.jpg", synth.encode_audio(synth.tone(0.1), 16_000, "WAV"))
    scan(str(root), ScanOptions(dry_run=True, jobs=1, progress=False))
    s = build_index(str(root), str(tmp_path / "i.arrow"), check=check)
    assert rel_paths(str(tmp_path / "i.arrow")) == ["cats/0.jpg", "cats/1.jpg", "cats/png.jpg"]
    assert s.warned_reasons == {"extension_mismatch": 1} and s.warned_paths == ["cats/clip.jpg"]
    ds = dsclean.IndexedDataset(str(tmp_path / "i.arrow"), transform=lambda img: img.resize((8, 8)).size)
    assert [ds[i][0] for i in range(len(ds))] == [(8, 8)] * 3
    build_index(str(root), str(tmp_path / "all.arrow"), check=check, include_warn=["extension_mismatch"])
    assert "cats/clip.jpg" in rel_paths(str(tmp_path / "all.arrow"))
