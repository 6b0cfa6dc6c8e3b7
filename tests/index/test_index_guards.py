"""The index stage's guards: --exclude must name a folder under ROOT, -q is quiet, a killed build's temp folder is
removed by the next one, from_folder refuses a state folder inside ROOT before writing anything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from support import synth
from support.files import write
from support.fixtures.cli import DSCLEAN

import dsclean
from dsclean.errors import UserError
from dsclean.index.build import build_index
from dsclean.index.store import open_index


def _tree(root):
    for c in ("cats", "dogs", "junk"):
        for i in range(2):
            write(root, f"{c}/{i}.jpg", synth.jpeg(16, 16, seed=i + 10 * len(c)))


def _classes(index: str) -> list[str]:
    return list(open_index(index).meta["classes"])


def test_exclude_names_an_existing_folder_under_the_root(tmp_path, monkeypatch):
    root, out = tmp_path / "data", tmp_path / "i.arrow"
    _tree(root)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"--exclude junk: does not exist .*did you mean --exclude data/junk\?"):
        build_index("data", str(out), exclude=["junk"], check=False)  # relative to ROOT, run from outside it
    with pytest.raises(UserError, match="--exclude data/jnuk: does not exist"):
        build_index("data", str(out), exclude=["data/jnuk"], check=False)  # a typo
    with pytest.raises(UserError, match="--exclude elsewhere: not a folder under the root data"):
        build_index("data", str(out), exclude=["elsewhere"], check=False)
    with pytest.raises(UserError, match="--exclude data/cats/0.jpg: is not a folder"):
        build_index("data", str(out), exclude=["data/cats/0.jpg"], check=False)
    assert not out.exists()
    proc = subprocess.run(
        [*DSCLEAN, "index", "data", "-o", str(out), "--exclude", "junk", "--no-check"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2 and "--exclude junk: does not exist" in proc.stderr and not out.exists()
    build_index("data", str(out), exclude=["data/junk"], check=False)
    assert _classes(str(out)) == ["cats", "dogs"]


def test_quiet_index_prints_nothing_but_errors(tmp_path):
    root = tmp_path / "data"
    write(root, "cats/a.jpg", synth.jpeg(16, 16))
    (root / "empty_class").mkdir()  # a note: a class folder with no files
    env = {**os.environ, "DSCLEAN_STATE_DIR": str(tmp_path / "state")}
    loud = subprocess.run(
        [*DSCLEAN, "index", str(root), "-o", str(tmp_path / "a.arrow"), "--jobs", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert loud.returncode == 0 and "note:" in loud.stderr and "class folders have no files" in loud.stderr
    quiet = subprocess.run(
        [*DSCLEAN, "index", str(root), "-o", str(tmp_path / "b.arrow"), "-q", "--jobs", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    # errors still print
    bad = subprocess.run(
        [*DSCLEAN, "index", str(root / "nope"), "-o", str(tmp_path / "c.arrow"), "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and "no such folder" in bad.stderr


def test_the_next_index_removes_the_temp_folder_of_a_killed_one_only(tmp_path):
    from dsclean.index.spill import SPILL_PREFIX, make_spill_folder

    root, out_dir = tmp_path / "data", tmp_path / "out"
    _tree(root)
    out_dir.mkdir()
    # a build killed with kill -9 while it held its temp folder
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom dsclean.index.spill import "
            f"make_spill_folder\nprint(make_spill_folder({str(out_dir)!r})[0], flush=True)\n"
            "time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    dead = child.stdout.readline().strip()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert os.path.isdir(dead)
    live, fd = make_spill_folder(str(out_dir))  # a build still running (this process holds its lock)
    other = out_dir / ".dsclean-index-unlocked"  # no lock file, just made: not judged dead
    other.mkdir()
    mine = out_dir / "keep-me"
    mine.mkdir()
    try:
        build_index(str(root), str(out_dir / "i.arrow"), check=False)
        left = sorted(os.listdir(out_dir))
        assert left == sorted(["i.arrow", "keep-me", os.path.basename(live), ".dsclean-index-unlocked"])
        assert not any(n.startswith(SPILL_PREFIX) and n not in (os.path.basename(live), other.name) for n in left)
    finally:
        os.close(fd)


def test_from_folder_refuses_a_state_folder_inside_the_root_before_writing(tmp_path):
    root = tmp_path / "data"
    write(root, "cats/a.jpg", synth.jpeg(16, 16))
    write(root, "dogs/b.jpg", synth.jpeg(16, 16, seed=1))
    for check in (True, False):
        with pytest.raises(UserError, match="is inside the dataset root"):
            dsclean.IndexedDataset.from_folder(str(root), state_dir=str(root / "state"), check=check)
        assert sorted(os.listdir(root)) == ["cats", "dogs"]


def test_index_uses_the_parts_of_a_job_array_that_ran_and_names_the_missing_ones(tmp_path, monkeypatch):
    from dsclean.scanning.scanner import ScanOptions, in_part, scan

    root, state = tmp_path / "data", tmp_path / "state"
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(state))
    for i in range(12):
        write(root, f"c{i % 2}/{i:02d}.jpg", synth.jpeg(16, 16, seed=i))
    for i in range(4):
        write(root, f"c{i % 2}/cut{i}.jpg", synth.truncate(synth.jpeg(64, 64, seed=50 + i), 0.5))
    scan(str(root), ScanOptions(shard=(0, 3), jobs=1, report_dir=str(tmp_path / "r")))  # parts 1/3 and 2/3 never ran
    files = sorted(f"{c}/{n}" for c in ("c0", "c1") for n in os.listdir(root / c))
    part0 = [f for f in files if in_part(f, (0, 3))]
    assert part0 and len(part0) < len(files)
    s = build_index(str(root), str(tmp_path / "i.arrow"), jobs=1)
    assert "1 of the 3 parts" in s.results_source and "parts 1/3, 2/3 never ran" in s.results_source
    assert s.unscanned == len(files) - len(part0) == s.checked  # only the missing parts' files were decoded
    assert s.excluded_bad + s.checked_bad == 4
    idx = open_index(str(tmp_path / "i.arrow"))
    assert sorted(os.fsdecode(idx.path_bytes(i)) for i in range(len(idx))) == [f for f in files if "cut" not in f]


def test_a_fifo_named_like_media_is_counted_as_not_regular_not_unreadable(tmp_path):
    """Review 6: the index called a FIFO "unreadable" where the scan says warn/not_regular."""
    _tree(tmp_path / "data")
    os.mkfifo(tmp_path / "data" / "cats" / "pipe.jpg")
    s = build_index(str(tmp_path / "data"), str(tmp_path / "i.arrow"), check=False)
    assert (s.not_regular, s.unreadable) == (1, 0) and s.rows == 6
