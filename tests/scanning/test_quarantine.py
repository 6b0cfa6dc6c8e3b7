"""Quarantine: journaled moves, recovery at every crash point, restore, lock, hostile manifests."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from support.files import write
from support.treegen import contents, tree_state

from dsclean.errors import UserError
from dsclean.scanning.quarantine.journal import PARTIAL_SUFFIX
from dsclean.scanning.quarantine.moves import Quarantine
from dsclean.scanning.quarantine.recovery import recover
from dsclean.scanning.quarantine.restore import restore


def _files(root, names=("a/x.jpg", "a/y.jpg", "b/z.png")):
    for i, n in enumerate(names):
        write(root, n, f"content {i} of {n}".encode())
    return list(names)


def test_move_and_restore_round_trip(tmp_path):
    root, qdir = tmp_path / "root", tmp_path / "q"
    names = _files(root)
    before = tree_state(root)
    with Quarantine(str(qdir), str(root)) as q:
        for n in names[:2]:
            assert q.move(n, "corrupt") == n
    assert not (root / "a/x.jpg").exists() and (qdir / "a/x.jpg").read_bytes() == b"content 0 of a/x.jpg"
    entries = [json.loads(line) for line in (qdir / "manifest.jsonl").read_text().splitlines()]
    assert [e["op"] for e in entries] == ["move", "done", "move", "done"]
    assert entries[0]["root"] == str(root) and entries[0]["reason"] == "corrupt"
    report = restore(str(qdir))
    assert report.restored == 2 and not report.refused
    assert tree_state(root) == before
    # A second restore finds nothing left to do.
    assert restore(str(qdir)).restored == 0


def test_colliding_name_gets_a_suffix_never_overwrites(tmp_path):
    root, qdir = tmp_path / "root", tmp_path / "q"
    write(root, "a/x.jpg", b"first")
    with Quarantine(str(qdir), str(root)) as q:
        q.move("a/x.jpg")
    write(root, "a/x.jpg", b"second")
    with Quarantine(str(qdir), str(root)) as q:
        assert q.move("a/x.jpg") == "a/x~1.jpg"
    assert (qdir / "a/x.jpg").read_bytes() == b"first" and (qdir / "a/x~1.jpg").read_bytes() == b"second"


def test_cross_device_move_copies_fsyncs_and_removes(tmp_path, monkeypatch):
    root, qdir = tmp_path / "root", tmp_path / "q"
    _files(root)
    real_rename = os.rename

    def rename(src, dst):
        if str(src).startswith(str(root)):  # only the move out of root "crosses devices"
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with Quarantine(str(qdir), str(root)) as q:
        q.move("a/x.jpg")
    assert not (root / "a/x.jpg").exists()
    assert (qdir / "a/x.jpg").read_bytes() == b"content 0 of a/x.jpg"
    assert not list(qdir.rglob("*" + PARTIAL_SUFFIX))


def test_second_process_gets_a_clear_lock_error(tmp_path):
    root, qdir = tmp_path / "root", tmp_path / "q"
    _files(root)
    with Quarantine(str(qdir), str(root)):
        with pytest.raises(UserError, match="in use by another dsclean process"):
            Quarantine(str(qdir), str(root))
    Quarantine(str(qdir), str(root)).close()  # released on close


def test_unwritable_quarantine_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="not writable"):
        Quarantine(str(blocker / "q"), str(tmp_path))


def test_quarantine_may_not_be_or_contain_the_root(tmp_path):
    with pytest.raises(UserError, match="must not be the scanned root"):
        Quarantine(str(tmp_path), str(tmp_path))
    with pytest.raises(UserError, match="must not be the scanned root"):
        Quarantine(str(tmp_path), str(tmp_path / "inner"))


# ---- crash points ----------------------------------------------------------------------------

CRASH_DRIVER = textwrap.dedent(
    """
    import errno, os, signal, sys
    from dsclean.scanning.quarantine import moves
    from dsclean.scanning.quarantine.journal import Journal
    root, qdir, point, cross = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    steps = [0]
    def step():
        steps[0] += 1
        if steps[0] == point:
            os.kill(os.getpid(), signal.SIGKILL)
    real_append, real_rename, real_unlink, real_copy, real_link = Journal.append, os.rename, os.unlink, moves._copy_new, os.link
    def append(self, entry):
        step(); real_append(self, entry); step()
    def rename(src, dst):
        if cross and str(src).startswith(root):
            raise OSError(errno.EXDEV, "cross-device")
        step(); real_rename(src, dst); step()
    def unlink(p):
        step(); real_unlink(p); step()
    def link(src, dst, **kw):
        if cross and str(src).startswith(root):
            raise OSError(errno.EXDEV, "cross-device")
        step(); real_link(src, dst, **kw); step()
    def copy_new(src, dst):
        step(); real_copy(src, dst); step()
    Journal.append, os.rename, os.unlink, moves._copy_new, os.link = append, rename, unlink, copy_new, link
    with moves.Quarantine(qdir, root) as q:
        for rel in ("a/x.jpg", "a/y.jpg", "b/z.png"):
            q.move(rel, "corrupt")
    print("finished", steps[0])
    """
)


@pytest.mark.slow  # fault injection: a kill at every step of the moves
@pytest.mark.parametrize("cross_device", [False, True], ids=["rename", "copy"])
def test_kill_at_every_step_loses_nothing(tmp_path, cross_device):
    """SIGKILL the mover at each instrumented instruction; recovery + restore must give the tree back."""
    driver = tmp_path / "driver.py"
    driver.write_text(CRASH_DRIVER)
    point = 1
    while True:
        base = tmp_path / f"run{point}"
        root, qdir = base / "root", base / "q"
        _files(root)
        original = tree_state(root)
        proc = subprocess.run(
            [sys.executable, str(driver), str(root), str(qdir), str(point), "1" if cross_device else "0"],
            capture_output=True,
            text=True,
        )
        killed = proc.returncode == -signal.SIGKILL
        assert killed or proc.returncode == 0, proc.stderr
        # Straight after the kill, before any recovery: on one device, every file is in exactly one
        # place (between link and unlink it has two names but is one inode); mid cross-device copy,
        # the original may also have a complete copy, which recovery removes.
        found = contents(root, qdir)
        if cross_device:
            assert set(found) == set(original.values())
        else:
            assert found == sorted(original.values())
        if qdir.exists():
            report = recover(str(qdir))
            assert not report.refused, report.refused
            assert not list(qdir.rglob("*" + PARTIAL_SUFFIX))
            assert contents(root, qdir) == sorted(original.values())  # exactly once each
            restore(str(qdir))
        assert tree_state(root) == original, f"kill point {point}"
        if not killed:
            break
        point += 1
    assert point > 10  # the driver really was killed at many points before it could finish


# ---- hostile manifests ---------------------------------------------------------------------


def _manifest(qdir, *entries, raw=b""):
    qdir.mkdir(parents=True, exist_ok=True)
    (qdir / ".dsclean-quarantine").touch()
    with open(qdir / "manifest.jsonl", "wb") as f:
        for e in entries:
            f.write(json.dumps(e).encode() + b"\n")
        f.write(raw)


def test_restore_refuses_paths_outside_the_root(tmp_path):
    root, qdir = tmp_path / "root", tmp_path / "q"
    root.mkdir()
    write(qdir, "evil.jpg", b"x")
    _manifest(
        qdir,
        {"op": "move", "id": "1", "root": str(root), "src": "../escaped.jpg", "dst": "evil.jpg"},
        {"op": "done", "id": "1"},
        {"op": "move", "id": "2", "root": str(root), "src": "/etc/evil.jpg", "dst": "evil.jpg"},
        {"op": "done", "id": "2"},
        {"op": "move", "id": "3", "root": "relative/root", "src": "a.jpg", "dst": "evil.jpg"},
        {"op": "done", "id": "3"},
    )
    report = restore(str(qdir))
    assert report.restored == 0 and len(report.refused) == 3
    assert not (tmp_path / "escaped.jpg").exists() and (qdir / "evil.jpg").exists()


def test_restore_refuses_a_symlink_out_of_the_root(tmp_path):
    root, qdir, outside = tmp_path / "root", tmp_path / "q", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "link")
    write(qdir, "x.jpg", b"x")
    _manifest(
        qdir,
        {"op": "move", "id": "1", "root": str(root), "src": "link/x.jpg", "dst": "x.jpg"},
        {"op": "done", "id": "1"},
    )
    report = restore(str(qdir))
    assert report.restored == 0 and "outside" in report.refused[0]
    assert not (outside / "x.jpg").exists()


def test_duplicated_and_truncated_manifest_lines(tmp_path):
    root, qdir = tmp_path / "root", tmp_path / "q"
    root.mkdir()
    write(qdir, "a.jpg", b"a")
    move = {"op": "move", "id": "1", "root": str(root), "src": "a.jpg", "dst": "a.jpg"}
    _manifest(
        qdir, move, move, {"op": "done", "id": "1"}, {"op": "done", "id": "1"}, raw=b'{"op": "move", "id": "2", "ro'
    )
    report = restore(str(qdir))
    assert report.restored == 1 and (root / "a.jpg").read_bytes() == b"a"
    assert len(report.bad_lines) == 1 and "manifest.jsonl:5" in report.bad_lines[0]
    # The cut line was closed with a newline, so later entries stay parseable.
    lines = (qdir / "manifest.jsonl").read_bytes().split(b"\n")
    assert lines[4] == b'{"op": "move", "id": "2", "ro' and json.loads(lines[5])["op"] == "restore"


def test_restore_never_overwrites_a_file_that_came_back(tmp_path):
    root, qdir = tmp_path / "root", tmp_path / "q"
    write(root, "a.jpg", b"old")
    with Quarantine(str(qdir), str(root)) as q:
        q.move("a.jpg")
    write(root, "a.jpg", b"new")
    report = restore(str(qdir))
    assert report.restored == 0 and "exists again" in report.refused[0]
    assert (root / "a.jpg").read_bytes() == b"new" and (qdir / "a.jpg").read_bytes() == b"old"


def test_restore_of_a_folder_that_is_not_a_quarantine(tmp_path):
    with pytest.raises(UserError, match="not a dsclean quarantine folder"):
        restore(str(tmp_path))


def test_non_utf8_names_round_trip(tmp_path):
    root, qdir = tmp_path / "root", tmp_path / "q"
    name = os.fsdecode(b"a/caf\xe9\nline.jpg")
    write(root, name, b"bytes")
    with Quarantine(str(qdir), str(root)) as q:
        q.move(name)
    assert os.path.exists(os.path.join(os.fsencode(qdir), b"a/caf\xe9\nline.jpg"))
    assert restore(str(qdir)).restored == 1
    assert open(os.path.join(os.fsencode(root), b"a/caf\xe9\nline.jpg"), "rb").read() == b"bytes"
