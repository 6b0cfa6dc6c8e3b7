"""Outputs never replace what is not theirs: devices, FIFOs, sockets, other people's files (review 6, bug 1)."""

from __future__ import annotations

import os

import pytest
from support import synth
from support.files import write
from support.fixtures.cli import run_cli

from dsclean.atomic import atomic_output, output_target
from dsclean.errors import UserError


def _tree(root) -> None:
    for c in ("cats", "dogs"):
        for i in range(2):
            write(root, f"{c}/{i}.jpg", synth.jpeg(16, 16, seed=i + 3 * len(c)))


def _run(*args, tmp_path):
    return run_cli(*args, env={"DSCLEAN_STATE_DIR": str(tmp_path / "state")})


def test_a_fifo_is_refused_and_left_alone(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="is a FIFO"):
        with atomic_output(str(fifo)) as tmp:
            open(tmp, "w").close()
    assert os.path.exists(fifo) and not os.path.isfile(fifo)
    assert os.listdir(tmp_path) == ["pipe"]  # no temp file left behind


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_node_is_never_renamed_over(tmp_path):
    import stat

    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers, in a private folder
    with pytest.raises(UserError, match="character device"):
        output_target(str(null))
    tree = tmp_path / "data"
    _tree(tree)
    out = _run("index", tree, "-o", null, "-q", tmp_path=tmp_path)
    assert out.returncode == 2 and "character device" in out.stderr and "Traceback" not in out.stderr
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_symbolic_link_is_written_through(tmp_path):
    (tmp_path / "v1.txt").write_text("old")
    os.symlink("v1.txt", tmp_path / "current.txt")
    with atomic_output(str(tmp_path / "current.txt")) as tmp:
        with open(tmp, "w") as f:
            f.write("new")
    assert os.readlink(tmp_path / "current.txt") == "v1.txt"
    assert (tmp_path / "v1.txt").read_text() == "new"


def test_index_refuses_a_file_that_is_not_an_index_and_replaces_one_that_is(tmp_path):
    tree = tmp_path / "data"
    _tree(tree)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not an index")
    out = _run("index", tree, "-o", notes, "--format", "arrow", "-q", tmp_path=tmp_path)
    assert out.returncode == 2 and "not an Arrow index" in out.stderr
    assert notes.read_text() == "my notes, not an index"
    index = tmp_path / "i.arrow"
    assert _run("index", tree, "-o", index, "-q", tmp_path=tmp_path).returncode == 0
    os.symlink("i.arrow", tmp_path / "current.arrow")
    assert _run("index", tree, "-o", tmp_path / "current.arrow", "-q", tmp_path=tmp_path).returncode == 0
    assert os.path.islink(tmp_path / "current.arrow") and os.path.isfile(index)


def test_report_refuses_a_file_that_is_not_a_report(tmp_path):
    tree = tmp_path / "data"
    _tree(tree)
    notes = tmp_path / "notes.html"
    notes.write_text("<html>my page</html>")
    out = _run("scan", tree, "--dry-run", "-q", "--html", notes, tmp_path=tmp_path)
    assert out.returncode == 2 and "not a dsclean report" in out.stderr
    assert notes.read_text() == "<html>my page</html>"
    report = tmp_path / "r.html"
    assert _run("scan", tree, "--dry-run", "-q", "--html", report, tmp_path=tmp_path).returncode == 0
    assert _run("report", tree, "-o", report, "-q", tmp_path=tmp_path).returncode == 0  # a report: replaced
