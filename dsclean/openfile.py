"""Opening a file dsclean did not just create: regular files only, and the open never blocks.

A plain ``open()`` of a FIFO blocks until a writer comes (forever, in a DataLoader
worker); of a device it may act on the device. Every open of an input (a shard, a
shard list, an index, a pack's state, a media file) goes through :func:`open_regular`:
``O_NONBLOCK`` so that the open itself returns at once whatever the path is, then
``fstat`` of the descriptor (not of the path: no window for a swap), then
:class:`NotRegularFile` for anything but a regular file, then ``O_NONBLOCK`` is
cleared so reads behave as usual. Symbolic links are followed (the file they name
is checked).
"""

from __future__ import annotations

import errno
import fcntl
import io
import mmap
import os
import stat

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def file_kind(mode: int) -> str:
    """What a file is, in words, from its ``st_mode``."""
    for test, name in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


class NotRegularFile(OSError):
    """The path names a FIFO, socket, device or directory; it was not read (``mode``: its ``st_mode``)."""

    def __init__(self, path, mode: int) -> None:
        self.mode = mode
        self.kind = file_kind(mode)
        super().__init__(errno.EINVAL, f"not a regular file (a {self.kind}): not read", os.fsdecode(path))


def open_regular(path, flags: int = os.O_RDONLY) -> int:
    """A descriptor of the regular file at ``path`` (``flags``: read-only by default), opened without blocking.

    Raises :class:`NotRegularFile` for anything else (nothing is read from it), or the open's own OSError.
    """
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | _CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EISDIR, errno.EOPNOTSUPP):  # a socket; a folder opened for writing
            try:
                mode = os.stat(path).st_mode
            except OSError:
                raise exc from None
            if not stat.S_ISREG(mode):
                raise NotRegularFile(path, mode) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular_file(path, mode: str = "rb", **kwargs) -> io.IOBase:
    """:func:`open_regular`, as a file object (``mode``: ``"rb"`` or ``"r"``; ``kwargs`` as for :func:`open`)."""
    if mode not in ("rb", "r"):
        raise ValueError(f"open_regular_file reads only, not {mode!r}")
    return os.fdopen(open_regular(path), mode, closefd=True, **kwargs)


def map_regular(path) -> mmap.mmap | None:
    """A read-only map of the regular file at ``path`` (None: it is empty, nothing to map)."""
    fd = open_regular(path)
    try:
        if os.fstat(fd).st_size == 0:
            return None
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
