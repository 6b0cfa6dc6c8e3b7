"""Issue 28, splits: a split root (DATA/train, DATA/val) scanned once, its splits indexed without a second decode."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from support import synth
from support.files import write
from support.treegen import make_tree

import dsclean.index.checking as checking
from dsclean import locations
from dsclean.cli import main
from dsclean.index.store import open_index
from dsclean.splits import split_folders


@pytest.fixture
def decodes(monkeypatch):
    """The files each index build sent to the checker (the real one runs): ``decodes["files"]`` lists them."""
    seen: dict[str, list[str]] = {"files": []}
    real = checking.run_checks

    def spy(root, chunks, opts, workers, backend="loky", scheduler=None):
        chunks = [list(c) for c in chunks]
        seen["files"] += [os.path.join(os.path.basename(root), rel) for c in chunks for rel in c]
        return real(root, chunks, opts, workers, backend, scheduler)

    monkeypatch.setattr(checking, "run_checks", spy)
    return seen


def _split_root(tmp_path):
    """DATA/train and DATA/val, each with cats/ and dogs/, good and bad files (unique bytes)."""
    data = tmp_path / "DATA"
    expected = {
        "train": make_tree(data / "train", n_good=6, n_bad=3, seed=0),
        "val": make_tree(data / "val", n_good=4, n_bad=3, seed=500),
    }
    return data, expected


def _scan(data, tmp_path, *more):
    assert main(["scan", str(data), "--quarantine", str(tmp_path / "bad"), "--jobs", "1", "-q", *map(str, more)]) in (
        0,
        1,
    )


def _paths(index) -> list[str]:
    idx = open_index(str(index))
    return sorted(os.fsdecode(idx.path_bytes(i)) for i in range(len(idx)))


def _good(expected: dict[str, str]) -> list[str]:
    return sorted(p for p, st in expected.items() if st == "ok")


def test_scan_once_then_index_each_split_without_a_second_decode(tmp_path, decodes, capsys):
    data, expected = _split_root(tmp_path)
    _scan(data, tmp_path)
    capsys.readouterr()
    for split in ("train", "val"):
        out = tmp_path / f"{split}.arrow"
        assert main(["index", str(data / split), "-o", str(out), "--jobs", "1"]) == 0
        printed = capsys.readouterr()
        assert _paths(out) == _good(expected[split])
        assert f"the last scan of {os.path.realpath(data)} (parent)" in printed.err
        assert "never scanned" not in printed.err + printed.out
        assert open_index(str(out)).meta["classes"] == ["cats", "dogs"]
    assert decodes["files"] == []  # every verdict came from the scan of DATA: nothing decoded again


def test_a_changed_or_new_file_under_a_split_is_checked_again(tmp_path, decodes):
    data, expected = _split_root(tmp_path)
    _scan(data, tmp_path)
    changed = next(p for p, st in expected["train"].items() if st == "ok" and p.endswith(".jpg"))
    write(data / "train", changed, synth.HTML_PAGE)  # a good JPEG replaced by an error page since the scan
    write(data / "train", "cats/new.png", synth.png(12, 12, seed=77))
    assert main(["index", str(data / "train"), "-o", str(tmp_path / "t.arrow"), "--jobs", "1", "-q"]) == 0
    assert sorted(decodes["files"]) == sorted([f"train/{changed}", "train/cats/new.png"])
    assert _paths(tmp_path / "t.arrow") == sorted(
        [p for p in _good(expected["train"]) if p != changed] + ["cats/new.png"]
    )


def test_a_val_file_named_like_a_train_file_gets_its_own_verdict(tmp_path, decodes):
    """The parent's rows are restricted to the subtree: val/cats/x.jpg's verdict is not train/cats/x.jpg's."""
    data = tmp_path / "DATA"
    write(data / "train", "cats/x.jpg", synth.jpeg(24, 16, seed=1))
    write(data / "val", "cats/x.jpg", synth.HTML_PAGE)
    write(data / "val", "cats/y.jpg", synth.jpeg(24, 16, seed=2))
    assert main(["scan", str(data), "--jobs", "1", "-q"]) == 0  # found the bad one, moved nothing
    assert main(["index", str(data / "val"), "-o", str(tmp_path / "v.arrow"), "-q"]) == 0
    assert _paths(tmp_path / "v.arrow") == ["cats/y.jpg"]
    assert decodes["files"] == []


def test_from_folder_of_a_split_reuses_the_parent_scan(tmp_path, decodes):
    from dsclean import IndexedDataset

    data, expected = _split_root(tmp_path)
    _scan(data, tmp_path)
    ds = IndexedDataset.from_folder(str(data / "train"))
    assert len(ds) == len(_good(expected["train"])) and ds.class_to_idx == {"cats": 0, "dogs": 1}
    assert decodes["files"] == []


def test_scan_results_of_the_parent_given_by_hand_are_restricted(tmp_path, decodes):
    data, expected = _split_root(tmp_path)
    _scan(data, tmp_path)
    found = locations.find_scan(str(data))
    found_val = locations.find_scan(str(data / "val"))
    assert found_val.paths == found.paths and found_val.subdir == "val" and found_val.prefix == b"val/"
    args = ["index", str(data / "val"), "-o", str(tmp_path / "v.arrow"), "-q", "--scan-results", *found.paths]
    assert main(args) == 0
    assert _paths(tmp_path / "v.arrow") == _good(expected["val"]) and decodes["files"] == []
    # find_results keeps its contract (paths relative to the root): no parent's rows from it
    assert locations.find_results(str(data / "val"))[0] == []


def test_index_of_a_split_root_is_refused_naming_the_splits(tmp_path, capsys):
    data, _ = _split_root(tmp_path)
    assert main(["index", str(data), "-o", str(tmp_path / "all.arrow")]) == 2
    err = capsys.readouterr().err
    assert "split root" in err and "train, val" in err and "--splits" in err and os.path.join(str(data), "train") in err
    assert not (tmp_path / "all.arrow").exists()
    # a class that happens to be called "train" among other classes is a class (CIFAR-100 has one)
    cifar = tmp_path / "cifar"
    write(cifar, "train/a.png", synth.png(8, 8, seed=1))
    write(cifar, "tractor/b.png", synth.png(8, 8, seed=2))
    assert split_folders(str(cifar)) == []
    assert main(["index", str(cifar), "-o", str(tmp_path / "c.arrow"), "-q"]) == 0
    assert open_index(str(tmp_path / "c.arrow")).meta["classes"] == ["tractor", "train"]
    # --split-names: other names make other split roots
    hold = tmp_path / "hold"
    write(hold, "train/cats/a.png", synth.png(8, 8, seed=3))
    write(hold, "holdout/cats/b.png", synth.png(8, 8, seed=4))
    assert split_folders(str(hold)) == []
    assert main(["index", str(hold), "-o", str(tmp_path / "h.arrow"), "--split-names", "train,holdout"]) == 2
    assert "holdout" in capsys.readouterr().err


def test_splits_writes_one_index_per_split_with_the_same_classes(tmp_path, decodes):
    data, expected = _split_root(tmp_path)
    write(data / "train", "birds/b0.png", synth.png(10, 10, seed=900))
    write(data / "val", "birds/b1.png", synth.png(10, 10, seed=901))
    _scan(data, tmp_path)
    out = tmp_path / "idx"
    assert main(["index", str(data), "--splits", "-o", str(out), "-q"]) == 0
    assert sorted(os.listdir(out)) == ["train.arrow", "val.arrow"]
    metas = {s: open_index(str(out / f"{s}.arrow")).meta for s in ("train", "val")}
    assert metas["train"]["classes"] == metas["val"]["classes"] == ["birds", "cats", "dogs"]
    assert _paths(out / "val.arrow") == sorted(_good(expected["val"]) + ["birds/b1.png"])
    assert decodes["files"] == []
    val = open_index(str(out / "val.arrow"))
    labels = {os.fsdecode(val.path_bytes(i)).split("/")[0]: int(val.labels[i]) for i in range(len(val))}
    assert labels == {"birds": 0, "cats": 1, "dogs": 2}


def test_splits_refuses_a_class_mismatch_unless_told(tmp_path, capsys):
    data, _ = _split_root(tmp_path)
    write(data / "train", "birds/b0.png", synth.png(10, 10, seed=900))  # val has no birds
    write(data / "val", "frogs/f0.png", synth.png(10, 10, seed=901))  # and train no frogs
    out = tmp_path / "idx"
    assert main(["index", str(data), "--splits", "-o", str(out), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "lacks 1 of train's classes (birds)" in err and "frogs" in err and "--allow-class-mismatch" in err
    assert not out.exists() or os.listdir(out) == []
    assert main(["index", str(data), "--splits", "-o", str(out), "--allow-class-mismatch", "-q", "--jobs", "1"]) == 0
    for split in ("train", "val"):
        assert open_index(str(out / f"{split}.arrow")).meta["classes"] == ["birds", "cats", "dogs", "frogs"]
    assert main(["index", str(data / "train"), "-o", str(tmp_path / "t.arrow"), "--allow-class-mismatch"]) == 2


def test_scan_summary_counts_each_split(tmp_path, capsys):
    data, expected = _split_root(tmp_path)
    report = tmp_path / "r"
    assert main(["scan", str(data), "--jobs", "1", "-q", "--report", str(report)]) == 0
    with open(report / locations.SUMMARY_FILE, encoding="utf-8") as f:
        splits = json.load(f)["splits"]
    assert splits == {
        s: {"files": len(e), "bad": sum(st == "bad" for st in e.values()), "warn": 0} for s, e in expected.items()
    }
    capsys.readouterr()
    assert main(["scan", str(data), "--jobs", "1", "--report", str(report)]) == 0
    assert f"Splits: train {len(expected['train'])} files (3 bad, 0 warn); val {len(expected['val'])} files" in (
        capsys.readouterr().out
    )
    # --split-names: a holdout split is counted too
    write(data, "holdout/cats/h.png", synth.png(9, 9, seed=4))
    names = ["--split-names", "train,val,holdout"]
    assert main(["scan", str(data), "--jobs", "1", "-q", "--report", str(tmp_path / "r3"), *names]) == 0
    with open(tmp_path / "r3" / locations.SUMMARY_FILE, encoding="utf-8") as f:
        assert json.load(f)["splits"]["holdout"] == {"files": 1, "bad": 0, "warn": 0}
    # another root: no splits recorded
    assert main(["scan", str(data / "train"), "--jobs", "1", "-q", "--report", str(tmp_path / "r2")]) == 0
    with open(tmp_path / "r2" / locations.SUMMARY_FILE, encoding="utf-8") as f:
        assert json.load(f)["splits"] == {}


def test_dups_on_a_split_root_checks_leakage_across_its_splits(tmp_path, capsys):
    data, expected = _split_root(tmp_path)
    leaked = _good(expected["train"])[0]
    shutil.copyfile(data / "train" / leaked, data / "val" / "cats" / "leaked_copy.jpg")
    _scan(data, tmp_path)
    capsys.readouterr()
    groups = tmp_path / "groups.jsonl"
    assert main(["dups", str(data), "--near", "0", "--jobs", "1", "--check", "-o", str(groups)]) == 1
    printed = capsys.readouterr()
    assert "split root: comparing its splits train, val" in printed.err
    assert "1 groups span splits" in printed.out
    assert (
        f"facts: {len(_good(expected['train'])) + len(_good(expected['val'])) + 1} from scan results, 0 computed"
        in (printed.out)
    )  # the scan of DATA answered for both splits
    with open(groups, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    spanning = [g for g in rows if len(g["splits"]) > 1]
    assert len(spanning) == 1
    assert sorted((os.path.basename(m["root"]), m["path"]) for m in spanning[0]["members"]) == [
        ("train", leaked),
        ("val", "cats/leaked_copy.jpg"),
    ]
    # --no-splits: DATA as one root, nothing spans roots
    assert main(["dups", str(data), "--near", "0", "--jobs", "1", "--check", "--no-splits", "-q"]) == 0


def test_pack_of_a_split_index_reuses_the_parent_scans_hashes(tmp_path):
    from dsclean.pack.packer import PackOptions, pack_shards

    data, expected = _split_root(tmp_path)
    _scan(data, tmp_path)
    index = tmp_path / "train.arrow"
    assert main(["index", str(data / "train"), "-o", str(index), "-q"]) == 0
    s = pack_shards(str(index), str(tmp_path / "shards"), PackOptions(samples_per_shard=3))
    assert s.complete and s.hashed == 0 and s.scan_hashes == len(_good(expected["train"]))
    assert "(parent)" in s.scan_results


def test_status_and_report_of_a_split_name_the_parent_scan(tmp_path, capsys):
    data, expected = _split_root(tmp_path)
    _scan(data, tmp_path)
    capsys.readouterr()
    assert main(["status", str(data / "val"), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["scanned_root"] == os.path.realpath(data) and st["subdir"] == "val"
    assert st["summary"]["splits"]["val"]["files"] == len(expected["val"])
    assert main(["status", str(data / "val")]) == 0
    out = capsys.readouterr().out
    bad = sum(st == "bad" for st in expected["val"].values())
    assert f"this folder (val/ of {os.path.realpath(data)}): {len(expected['val'])} files, {bad} bad" in out
    assert main(["status", str(data)]) == 0
    assert f"splits: train {len(expected['train'])} files" in capsys.readouterr().out
    # the report of a split is the parent's scan restricted to the split's rows (paths relative to the split)
    from dsclean.report.build import ReportOptions, write_report
    from dsclean.report.source import open_source

    html = tmp_path / "r.html"
    assert main(["report", str(data / "train"), "-o", str(html), "-q"]) == 0
    page = html.read_text(encoding="utf-8")
    assert "This report covers train only: the rows under train/ of the scan of" in page
    assert "A split root:" not in page  # the parent's per-split counts are not this report's
    src = open_source(str(data / "train"))
    assert src.root == os.path.abspath(data / "train") and src.prefix == b"train/" and "(parent)" in src.results_source
    for split in ("train", "val"):
        got = write_report(str(data / split), str(tmp_path / f"{split}.html"), ReportOptions(jobs=1))
        assert got.files == len(expected[split])  # not the 16 files of DATA
        assert got.problems == sum(st == "bad" for st in expected[split].values())
        assert got.thumbnails == sum(st == "ok" for st in expected[split].values())  # found under the split
    whole = write_report(str(data), str(tmp_path / "all.html"), ReportOptions(jobs=1))
    assert whole.files == len(expected["train"]) + len(expected["val"])


def test_build_split_indexes_from_python_and_its_refusals(tmp_path):
    import dsclean
    from dsclean.errors import UserError

    data, expected = _split_root(tmp_path)
    write(data, "holdout/cats/h.png", synth.png(9, 9, seed=4))
    with pytest.raises(UserError, match="not a split root"):  # holdout/ is no split by default
        dsclean.build_split_indexes(str(data), str(tmp_path / "none"))
    names = ("train", "holdout", "val")
    with pytest.raises(UserError, match="holdout lacks 1 of train's classes"):
        dsclean.build_split_indexes(str(data), str(tmp_path / "npy"), split_names=names)
    out = dsclean.build_split_indexes(
        str(data), str(tmp_path / "npy"), split_names=names, format="npy", allow_class_mismatch=True
    )
    assert list(out) == ["train", "holdout", "val"]  # in --split-names order
    assert sorted(os.listdir(tmp_path / "npy")) == ["holdout.npy", "train.npy", "val.npy"]
    assert out["holdout"].rows == 1 and out["holdout"].classes == out["train"].classes == 2  # dogs is empty there
    with pytest.raises(UserError, match="--labels"):
        dsclean.build_split_indexes(str(data), str(tmp_path / "x"), split_names=names, labels_csv="l.csv")
    with pytest.raises(SystemExit):  # argparse: a usage error, exit 2
        main(["index", str(data), "--splits", "-o", str(tmp_path / "y"), "--split-names", " , "])


def test_split_roots_and_a_flat_folder(tmp_path, monkeypatch):
    from dsclean import splits

    data, _ = _split_root(tmp_path)
    assert splits.split_roots([str(data)]) == [str(data / "train"), str(data / "val")]
    assert splits.split_roots([str(data / "train"), str(data / "val")]) == [str(data / "train"), str(data / "val")]
    assert splits.split_roots([str(data / "train")]) == [str(data / "train")]
    for i in range(5):  # loose files beside the splits do not matter ...
        write(data, f"notes{i}.txt", b"x")
    assert splits.split_folders(str(data)) == ["train", "val"]
    monkeypatch.setattr(splits, "MAX_TOP_ENTRIES", 4)  # ... until there are too many to be a split root's
    assert splits.split_folders(str(data)) == []


def test_dups_of_one_split_skips_the_files_the_parents_scan_found_bad(tmp_path):
    """Bad files left in place (no quarantine): ``dups DATA/train`` takes the parent's verdicts, so they are
    left out, and the good ones' facts come from the parent's results (nothing hashed again)."""
    from dsclean.dups.collect import collect

    data, expected = _split_root(tmp_path)
    assert main(["scan", str(data), "--jobs", "1", "-q"]) == 0  # no quarantine: the bad files stay in place
    inv = collect([str(data / "train")])
    assert inv.excluded_bad == sum(st == "bad" for st in expected["train"].values())
    assert (inv.from_results, inv.computed) == (len(_good(expected["train"])), 0)
    assert sorted(os.fsdecode(p) for p in inv.path.to_pylist()) == _good(expected["train"])
    assert "(parent)" in inv.results_sources[0]
