"""Write-to-temp-then-rename, so a crash or a full disk never leaves half an output in place."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from typing import Iterator

from .errors import UserError


def fsync_dir(path: str) -> None:
    """Make a rename or create inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask, read without changing it where Linux allows (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", "rb") as f:  # bytes: no codec import (works after a setuid, too)
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass  # no /proc (or an unexpected format): ask the classic way below
    mask = os.umask(0o022)  # elsewhere: the classic set-and-restore
    os.umask(mask)
    return mask


def temp_next_to(final: str) -> str:
    """A new empty temp file in ``final``'s folder (so the rename is atomic), named after it.

    Created with the user's umask (``mkstemp`` alone makes it 0600), so a team on a
    shared file system can read results, reports and indexes.
    """
    parent = os.path.dirname(os.path.abspath(final)) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(final)}.", suffix=".tmp", dir=parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    finally:
        os.close(fd)
    return tmp


def publish(tmp: str, final: str, *, sync_dir: bool = True) -> None:
    """fsync ``tmp`` and rename it over ``final``, durably (``sync_dir=False``: the rename is made
    durable by a later fsync of the folder; ``final`` still only ever names a complete file)."""
    _fsync_file(tmp)
    os.replace(tmp, final)
    if sync_dir:
        fsync_dir(os.path.dirname(os.path.abspath(final)) or ".")


def output_target(final: str, *, directory: bool = False) -> str:
    """The path an output named ``final`` is really written to; refuses what must never be replaced.

    A symbolic link is written through (the link stays, its target gets the new output: ``current.arrow
    -> v1.arrow`` keeps pointing at an up-to-date file). Anything else that is not a regular file (a
    device such as ``/dev/null``, a FIFO, a socket), or a folder where a file goes, is refused with a
    :class:`~dsclean.errors.UserError`: a rename over it would destroy it (as root, ``-o /dev/null``
    would replace the machine's device node with a file).
    """
    target = os.path.realpath(final) if os.path.islink(final) else final
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return target
    if directory and stat.S_ISDIR(mode) or not directory and stat.S_ISREG(mode):
        return target
    what = _kind(mode)
    via = f" (the target of the link {final})" if target != final else ""
    raise UserError(
        f"{target}{via} exists and is {what}, not {'a folder' if directory else 'a regular file'}: "
        "dsclean will not replace it; choose another output path"
    )


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "a special file"


@contextlib.contextmanager
def atomic_output(final: str, *, directory: bool = False, sync_dir: bool = True) -> Iterator[str]:
    """Yield a temp path next to ``final``; on success fsync it and rename it over ``final``.

    On an exception the temp output is removed and ``final`` is untouched.
    With ``directory=True`` the temp path is a fresh folder (for multi-file outputs).
    ``sync_dir=False`` (files only) skips the fsync of the parent folder after the rename:
    for many outputs in one folder whose last one is written with it (pack's shards).
    ``final`` goes through :func:`output_target` first (symbolic links written through; devices,
    FIFOs and sockets refused).
    """
    final = output_target(final, directory=directory)
    parent = os.path.dirname(os.path.abspath(final)) or "."
    base = os.path.basename(final)
    if directory:
        tmp = tempfile.mkdtemp(prefix=f".{base}.", suffix=".tmp", dir=parent)
        os.chmod(tmp, 0o777 & ~current_umask())
    else:
        tmp = temp_next_to(final)
    try:
        yield tmp
        if directory:
            for name in os.listdir(tmp):
                _fsync_file(os.path.join(tmp, name))
            fsync_dir(tmp)
            if os.path.isdir(final):
                # Swap folders: move the old one aside, rename the new one in, then remove the old.
                old = tempfile.mkdtemp(prefix=f".{base}.", suffix=".old", dir=parent)
                os.rename(final, os.path.join(old, base))
                os.rename(tmp, final)
                shutil.rmtree(old)
            else:
                os.rename(tmp, final)
            fsync_dir(parent)
        else:
            publish(tmp, final, sync_dir=sync_dir)
    except BaseException as exc:
        if directory:
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not exc.filename:
            exc.filename = final  # a failed write() names no file: the error message names the output
        raise


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def describe_write_error(exc: OSError, path: str | None = None) -> str:
    """``No space left on device (ENOSPC) writing /x/index.arrow``: an OSError for a person.

    Libraries word a full disk their own way (numpy: "69000 requested and 16256 written",
    pyarrow: "Error writing bytes to file"); when the error carries no errno and the file
    system of ``path`` has (almost) no space left, say so.
    """
    where = path or exc.filename
    code = exc.errno
    if code is None and where:
        try:
            st = os.statvfs(os.path.dirname(os.path.abspath(where)) or ".")
        except OSError:
            st = None  # no file system to ask: the library's own words stay
        if st is not None and st.f_bavail * st.f_frsize < (1 << 20):
            code = errno.ENOSPC
    text = (
        os.strerror(code)
        if code is not None and (exc.errno is None or not exc.strerror)
        else (exc.strerror or str(exc))
    )
    name = errno.errorcode.get(code or 0, "")
    return f"{text}{f' ({name})' if name else ''}" + (f" writing {where}" if where else "")


def remove_stale_temps(folder: str, final_names: tuple[str, ...]) -> list[str]:
    """Remove temp outputs a killed process left for these names; only call while holding the folder's lock."""
    removed = []
    prefixes = tuple(f".{name}." for name in final_names)
    for entry in os.scandir(folder):
        if entry.name.startswith(prefixes) and entry.name.endswith((".tmp", ".old")):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(entry.name)
    return removed
