"""Real tmpfs mounts for tests (the suite runs as root in CI): read-only trees, read-only subfolders."""

from __future__ import annotations

import contextlib
import os
import subprocess
from typing import Iterator

import pytest


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True)


@contextlib.contextmanager
def tmpfs(path, size: str = "8m") -> Iterator[str]:
    """Mount a fresh tmpfs at ``path`` (created if needed); unmounted afterwards. Skips where mounting is impossible."""
    path = str(path)
    os.makedirs(path, exist_ok=True)
    proc = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield path
    finally:
        _run("umount", "-l", path)


def make_read_only(path) -> None:
    """Remount the tmpfs at ``path`` read-only."""
    proc = _run("mount", "-o", "remount,ro", str(path))
    assert proc.returncode == 0, proc.stderr


@contextlib.contextmanager
def read_only_bind(path) -> Iterator[str]:
    """Bind-mount ``path`` onto itself read-only (root cannot write through it either); undone afterwards.

    Skips where mounting is impossible.
    """
    path = str(path)
    proc = _run("mount", "--bind", path, path)
    if proc.returncode != 0:
        pytest.skip(f"cannot bind-mount here (needs root or CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        proc = _run("mount", "-o", "remount,ro,bind", path)
        assert proc.returncode == 0, proc.stderr
        yield path
    finally:
        _run("umount", "-l", path)


@contextlib.contextmanager
def bind(source, target) -> Iterator[str]:
    """Bind-mount the folder ``source`` at ``target`` (created if needed); unmounted afterwards.

    Skips where mounting is impossible (tests of the same rule through symlinks run everywhere).
    """
    source, target = str(source), str(target)
    os.makedirs(target, exist_ok=True)
    proc = _run("mount", "--bind", source, target)
    if proc.returncode != 0:
        pytest.skip(f"cannot bind-mount here (needs root or CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield target
    finally:
        _run("umount", "-l", target)
