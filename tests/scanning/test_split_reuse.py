"""Issue 28, splits: a scan of a split reuses its scanned parent's verdicts, and a scan of the parent reuses
the verdicts a split's own runs (index, scan) decided. Checker calls are counted (the real checker runs)."""

from __future__ import annotations

import os

import pytest
from support import synth
from support.files import write
from support.treegen import make_tree

import dsclean.index.checking as checking
import dsclean.scanning.scanner as scanner
from dsclean.cli import main
from dsclean.scanning.results import read_results


@pytest.fixture
def decodes(monkeypatch):
    """The files sent to the checker by scans and index builds (``<root's name>/<rel>``), in order."""
    seen: list[str] = []
    real_scan, real_index = scanner.run_checks, checking.run_checks

    def spy_scan(root, chunks, *args, **kwargs):
        def recorded():
            for chunk in chunks:
                seen.extend(os.path.join(os.path.basename(root), rel) for rel in chunk)
                yield chunk

        return real_scan(root, recorded(), *args, **kwargs)

    def spy_index(root, chunks, *args, **kwargs):
        chunks = [list(c) for c in chunks]
        seen.extend(os.path.join(os.path.basename(root), rel) for c in chunks for rel in c)
        return real_index(root, chunks, *args, **kwargs)

    monkeypatch.setattr(scanner, "run_checks", spy_scan)
    monkeypatch.setattr(checking, "run_checks", spy_index)
    return seen


def _split_root(tmp_path):
    data = tmp_path / "DATA"
    expected = {
        "train": make_tree(data / "train", n_good=6, n_bad=3, seed=0),
        "val": make_tree(data / "val", n_good=4, n_bad=3, seed=500),
    }
    return data, expected


def _scan(root, capsys) -> str:
    """Scan without moving anything (bad files stay: their verdicts must be reused too); what it printed."""
    capsys.readouterr()
    assert main(["scan", str(root), "--jobs", "1", "--dry-run"]) in (0, 1)
    printed = capsys.readouterr()
    return printed.out + printed.err


def _statuses(root) -> dict[str, str]:
    from dsclean import locations

    paths, _ = locations.find_results(str(root))
    assert len(paths) == 1
    table = read_results(paths[0], ["path", "status"])
    return {os.fsdecode(p): s for p, s in zip(table.column("path").to_pylist(), table.column("status").to_pylist())}


def test_scan_of_a_split_takes_the_parents_verdicts_for_unchanged_files(tmp_path, decodes, capsys):
    data, expected = _split_root(tmp_path)
    _scan(data, capsys)
    assert len(decodes) == sum(map(len, expected.values()))  # the first scan decoded every file
    decodes.clear()
    printed = _scan(data / "train", capsys)
    assert decodes == []  # good and bad files alike: the verdicts of DATA's scan
    assert f"from the scan cache of {os.path.realpath(data)} (parent: its verdicts under train/)" in printed
    assert _statuses(data / "train") == expected["train"]  # re-rooted: relative to DATA/train, only its files


def test_scan_of_a_split_checks_what_changed_since_the_parents_scan(tmp_path, decodes, capsys):
    data, expected = _split_root(tmp_path)
    _scan(data, capsys)
    decodes.clear()
    changed = next(p for p, st in expected["train"].items() if st == "ok" and p.endswith(".jpg"))
    write(data / "train", changed, synth.HTML_PAGE)  # a good JPEG replaced by an error page since the scan
    write(data / "train", "cats/new.png", synth.png(12, 12, seed=77))
    _scan(data / "train", capsys)
    assert sorted(decodes) == sorted([f"train/{changed}", "train/cats/new.png"])
    statuses = _statuses(data / "train")
    assert statuses[changed] == "bad" and statuses["cats/new.png"] == "ok"
    assert {p: s for p, s in statuses.items() if p not in (changed, "cats/new.png")} == {
        p: s for p, s in expected["train"].items() if p != changed
    }


def test_a_val_file_named_like_a_train_file_is_not_answered_by_its_verdict(tmp_path, decodes, capsys):
    """Same name, size and mtime in train and val: each split gets its own verdict from the parent's cache."""
    data = tmp_path / "DATA"
    good = synth.jpeg(24, 16, seed=1)
    write(data / "train", "cats/x.jpg", good)
    write(data / "val", "cats/x.jpg", b"<html>" + good[6:])  # not a JPEG: bad, same size
    for split in ("train", "val"):
        os.utime(data / split / "cats" / "x.jpg", ns=(10**18, 10**18))
    _scan(data, capsys)
    decodes.clear()
    _scan(data / "val", capsys)
    _scan(data / "train", capsys)
    assert decodes == []
    assert _statuses(data / "val") == {"cats/x.jpg": "bad"}
    assert _statuses(data / "train") == {"cats/x.jpg": "ok"}


def test_scan_of_the_parent_reuses_what_indexing_a_split_checked(tmp_path, decodes, capsys):
    data, expected = _split_root(tmp_path)
    _scan(data, capsys)
    changed = next(p for p, st in expected["train"].items() if st == "ok" and p.endswith(".jpg"))
    write(data / "train", changed, synth.HTML_PAGE)
    write(data / "val", "dogs/new.png", synth.png(12, 12, seed=78))
    decodes.clear()
    assert main(["index", str(data / "train"), "-o", str(tmp_path / "t.arrow"), "--jobs", "1", "-q"]) == 0
    assert decodes == [f"train/{changed}"]  # the index build checked the changed file (cached under DATA/train)
    decodes.clear()
    printed = _scan(data, capsys)
    assert decodes == ["DATA/val/dogs/new.png"]  # the changed train file is answered by the split's cache
    assert f"from the scan cache of {os.path.realpath(data / 'train')} (a split" in printed
    statuses = _statuses(data)
    assert statuses[f"train/{changed}"] == "bad" and statuses["val/dogs/new.png"] == "ok"


def test_scan_of_the_parent_reuses_a_splits_own_scan(tmp_path, decodes, capsys):
    data, expected = _split_root(tmp_path)
    _scan(data / "train", capsys)
    assert len(decodes) == len(expected["train"])
    decodes.clear()
    _scan(data, capsys)
    assert sorted(decodes) == sorted(f"DATA/val/{p}" for p in expected["val"])  # only the never-scanned split
    assert _statuses(data) == {f"{s}/{p}": st for s, files in expected.items() for p, st in files.items()}


def test_rescan_and_other_check_options_take_nothing_from_the_parent(tmp_path, decodes, capsys):
    data, expected = _split_root(tmp_path)
    _scan(data, capsys)
    decodes.clear()
    assert main(["scan", str(data / "train"), "--jobs", "1", "--dry-run", "--rescan", "-q"]) in (0, 1)
    assert len(decodes) == len(expected["train"])
    decodes.clear()
    assert main(["scan", str(data / "val"), "--jobs", "1", "--dry-run", "--facts", "none", "-q"]) in (0, 1)
    assert len(decodes) == len(expected["val"])  # other check options: another cache, nothing reused
