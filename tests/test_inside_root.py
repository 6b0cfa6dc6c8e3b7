"""One "inside ROOT" rule (locations.is_inside): folders compared by (st_dev, st_ino) along the output's
ancestors, so a bind mount of a class folder is caught as a symlink is (issue 24, item 8)."""

from __future__ import annotations

import os

import pytest
from support import synth
from support.files import write
from support.mounts import bind
from support.packing import make_indexed

from dsclean import locations
from dsclean.cli import main


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "ROOT"
    write(root, "cats/a.jpg", synth.jpeg(16, 16, seed=1))
    write(root, "cats/bad.jpg", synth.jpeg(16, 16, seed=2)[:60])
    write(root, "dogs/b.jpg", synth.jpeg(16, 16, seed=3))
    (tmp_path / "elsewhere").mkdir()
    return root


def _views(tmp_path, root, how):
    """``M``: ROOT/cats seen through a bind mount or a symlink."""
    m = tmp_path / "M"
    if how == "symlink":
        m.symlink_to(root / "cats")
        return _nothing(m)
    return bind(root / "cats", m)


class _nothing:
    def __init__(self, value):
        self.value = value

    def __enter__(self):
        return str(self.value)

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("how", ["bind", "symlink"])
def test_is_inside_sees_through_bind_mounts_and_symlinks(tmp_path, tree, how):
    with _views(tmp_path, tree, how) as m:
        assert locations.is_inside(os.path.join(m, "Q", "deeper"), str(tree))  # not there yet: nearest ancestor
        assert locations.is_inside(m, str(tree / "cats")) and locations.is_inside(m, str(tree))
        assert not locations.is_inside(os.path.join(m, "Q"), str(tree / "dogs"))
        assert not locations.is_inside(str(tmp_path / "elsewhere" / "Q"), str(tree))
        assert locations.is_inside(str(tree / "cats" / "Q"), m)  # the root given through the view


def test_nested_and_reverse_bind_mounts(tmp_path, tree):
    with bind(tree / "cats", tmp_path / "M"), bind(tmp_path / "M", tmp_path / "M2"):
        assert locations.is_inside(str(tmp_path / "M2" / "Q"), str(tree))  # a bind mount of a bind mount
    outside = tmp_path / "elsewhere"
    with bind(outside, tree / "dogs" / "mnt"):  # a foreign folder mounted inside ROOT: writing there is inside
        assert locations.is_inside(str(tree / "dogs" / "mnt" / "Q"), str(tree))
        assert locations.is_inside(str(outside / "Q"), str(tree))  # ... and so is its other name
    assert not locations.is_inside(str(outside / "Q"), str(tree))  # unmounted: not any more


@pytest.mark.parametrize("how", ["bind", "symlink"])
def test_scan_quarantine_through_a_view_of_a_class_folder_is_refused(tmp_path, tree, how, capsys):
    with _views(tmp_path, tree, how) as m:
        code = main(["scan", str(tree), "--quarantine", os.path.join(m, "Q")])
        err = capsys.readouterr().err
        assert code == 2 and "inside the dataset root" in err, err
        assert not (tree / "cats" / "Q").exists() and (tree / "cats" / "bad.jpg").exists()


@pytest.mark.parametrize("how", ["bind", "symlink"])
def test_pack_output_through_a_view_of_a_class_folder_is_refused(tmp_path, how, capsys):
    root, index = make_indexed(tmp_path)
    with _views(tmp_path, root, how) as m:
        code = main(["pack", index, "-o", os.path.join(m, "shards")])
        err = capsys.readouterr().err
        assert code == 2 and "inside the dataset" in err, err
        assert not (root / "cats" / "shards").exists()


def test_every_other_output_through_a_bind_mount_is_refused(tmp_path, tree, capsys):
    with bind(tree / "cats", tmp_path / "M") as m:
        for argv, what in (
            (["index", str(tree), "-o", os.path.join(m, "i.arrow")], "inside the dataset root"),
            (["dups", str(tree), "-o", os.path.join(m, "g.jsonl")], "inside the dataset"),
            (["dups", str(tree), "--quarantine", os.path.join(m, "Q")], "inside the dataset"),
            (["scan", str(tree), "--state-dir", os.path.join(m, "state")], "inside the dataset root"),
            (["scan", str(tree), "--report", os.path.join(m, "rep")], "inside the dataset root"),
        ):
            code = main(argv)
            err = capsys.readouterr().err
            assert code == 2 and what in err, (argv, err)
        assert sorted(os.listdir(tree / "cats")) == ["a.jpg", "bad.jpg"]


def test_from_folder_refuses_a_state_folder_behind_a_bind_mount(tmp_path, tree):
    from dsclean import IndexedDataset
    from dsclean.errors import UserError

    with bind(tree / "dogs", tmp_path / "M") as m:
        with pytest.raises(UserError, match="inside the dataset root"):
            IndexedDataset.from_folder(str(tree), state_dir=os.path.join(m, "state"))
        assert os.listdir(tree / "dogs") == ["b.jpg"]
