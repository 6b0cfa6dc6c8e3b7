"""Move a file aside into the quarantine, journaled before it happens; nothing is ever deleted.

Each move is announced in the journal (:mod:`.journal`) before the file moves, and its outcome after.
The file moves without ever replacing one: link the new name, unlink the old (across file systems:
copy to the temp name the entry records, created exclusively, fsync, link into place, then remove
the original). A move whose source cannot be removed afterwards (a read-only tree, another process
that moved it first) removes its own copy again: the file stays in one place and the journal says
``abort`` with the error. Right before a move the source's identity (size, mtime, inode, device) is
compared with what was checked: a file replaced since is not moved (:class:`ChangedError`).
A quarantine folder is bound to one root (``quarantine.json``); restore refuses entries naming another root.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import uuid

from ... import locations
from ...atomic import atomic_output, fsync_dir, remove_stale_temps
from ...errors import UserError
from .journal import Journal, RecoveryReport, fold_journal, in_quarantine, lock_folder, manifest_path, temp_name
from .recovery import recover_open

#: in a quarantine folder: the root its files came from (one root per folder)
BINDING_FILE = "quarantine.json"

#: (size, mtime_ns, inode, device) of a file as it was checked; None fields are not compared
Identity = tuple


class ChangedError(OSError):
    """The file is no longer the one that was checked (replaced or rewritten): it is not moved."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(errno.ESTALE, f"changed since it was checked ({what}); not moved", path)


class OutsideRootError(OSError):
    """A file reached through a symlinked folder lies outside the root: dsclean never moves it."""

    def __init__(self, path: str, real_folder: str) -> None:
        super().__init__(
            errno.EXDEV,
            f"its folder resolves to {real_folder}, outside ROOT through a symlink "
            "(dsclean moves links, never files outside ROOT)",
            path,
        )


def inside(path: str, base: str) -> bool:
    """True if ``path`` (after resolving symlinks in its folders) lies below ``base``."""
    real_base = os.path.realpath(base)
    real_parent = os.path.realpath(os.path.dirname(path))
    return real_parent == real_base or real_parent.startswith(real_base.rstrip(os.sep) + os.sep)


def _verify(path: str, expect: Identity | None) -> None:
    """Raise :class:`ChangedError` unless ``path`` still has the identity it was checked with."""
    if not expect or all(x is None for x in expect):  # nothing was seen (a broken symlink): nothing to compare
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ChangedError(path, "it is gone") from None
    seen = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    for name, want, got in zip(("size", "mtime", "inode", "device"), expect, seen):
        if want is not None and want != got:
            raise ChangedError(path, f"{name} {want} -> {got}")


def _link_then_unlink(source: str, target: str, expect: Identity | None = None) -> None:
    """Rename that fails with FileExistsError instead of replacing ``target``; undone if the source stays.

    ``os.rename`` silently replaces; a hard link cannot. Link then unlink the
    old name (between the two, both names are the same inode: recovery sees
    them as one file). The linked inode is compared with ``expect`` before the
    old name goes; if it differs, or the old name cannot be removed, the new
    name is removed again. File systems without hard links fall back to check+rename.
    """
    try:
        os.link(source, target, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "refusing to overwrite", target) from None
        _verify(source, expect)
        os.rename(source, target)
        return
    try:
        if stat.S_ISLNK(os.lstat(target).st_mode):
            _verify_link(source, target, expect)
        else:
            _verify(target, expect)
        _unlink_source(source)
    except BaseException:
        os.unlink(target)  # one copy only: the source stays where it was
        raise


def _verify_link(source: str, target: str, expect: Identity | None) -> None:
    """A symlink being moved: a relative one resolves from its folder, so its new name may point nowhere.

    Check the link where it still is (the identity it was checked with is the file it points to),
    and that the new name is the same link entry as the old one (nothing was renamed over it).
    """
    _verify(source, expect)
    try:
        same = os.path.samestat(os.lstat(source), os.lstat(target))
    except FileNotFoundError:
        raise ChangedError(source, "it is gone") from None
    if not same:
        raise ChangedError(source, "replaced by another entry while it was moved")


def _unlink_source(source: str) -> None:
    """Remove a moved file's old name; gone already means another process moved it first (ChangedError)."""
    try:
        os.unlink(source)
    except FileNotFoundError:
        raise ChangedError(source, "it is gone: another process moved or removed it") from None


def _copy_new(source: str, temp: str) -> None:
    """Copy ``source`` (a symlink as a link) to ``temp``, which must not exist (O_EXCL), with its times; fsynced.

    An existing ``temp`` raises FileExistsError and is left alone; a copy that fails
    half-way (a full disk) is removed before the error is raised.
    """
    if os.path.islink(source):
        os.symlink(os.readlink(source), temp)
        return
    with open(source, "rb") as src:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            with open(fd, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
                dst.flush()
                os.fsync(dst.fileno())
            shutil.copystat(source, temp)
        except BaseException:
            os.unlink(temp)  # created above by this call: never a user's file
            raise


def move_file(source: str, target: str, temp: str | None = None, expect: Identity | None = None) -> None:
    """Move without ever overwriting: link + unlink, or across devices copy to ``temp`` + fsync + link + unlink.

    ``temp`` (a name beside ``target``, journaled by the caller) is created
    exclusively, so it can never be a user's file; without it a cross-device
    move is refused. Whatever fails, the file ends up in exactly one place:
    a copy whose source cannot be removed is removed again.
    """
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, "refusing to overwrite", target)
    _verify(source, expect)
    try:
        _link_then_unlink(source, target, expect)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        if temp is None:
            raise
        _copy_new(source, temp)  # an existing temp name: FileExistsError, nothing touched
        try:
            _verify(source, expect)  # rewritten while it was copied?
            _link_then_unlink(temp, target)
            fsync_dir(os.path.dirname(target))
        except BaseException:
            if os.path.lexists(temp):
                os.unlink(temp)  # created by _copy_new above: never a user's file
            raise
        try:
            _verify(source, expect)
            _unlink_source(source)
        except BaseException:
            os.unlink(target)  # the source stays: remove the copy, one place only
            fsync_dir(os.path.dirname(target))
            raise
    fsync_dir(os.path.dirname(target))
    fsync_dir(os.path.dirname(source))


class Quarantine:
    """An open, locked quarantine folder that bad files can be moved into.

    Opening recovers any half-done move from an earlier run. Only one process
    may hold a quarantine folder at a time, except that each part of a
    job-array scan (``tag``, see :func:`dsclean.locations.part_tag`) has a
    journal and a lock of its own: parts move disjoint sets of files.
    """

    def __init__(self, qdir: str, root: str, tag: str = "") -> None:
        self.qdir = os.path.abspath(qdir)
        self.root = os.path.abspath(root)
        _check_placement(self.qdir, self.root)
        self._lock_fd = lock_folder(self.qdir, tag)
        try:
            bind_root(self.qdir, self.root)
            self.journal = Journal(manifest_path(self.qdir, tag))
            self.recovery = recover_open(self.qdir, self.journal)
        except BaseException:
            os.close(self._lock_fd)  # release the lock: this process is not using the folder after all
            raise
        # Reports default to this folder; a killed scan leaves their temp files behind.
        remove_stale_temps(
            self.qdir,
            tuple(
                locations.tagged(name, tag)
                for name in (locations.RESULTS_FILE, locations.PROBLEMS_FILE, locations.SUMMARY_FILE)
            ),
        )
        self.moved = 0
        self.moved_ids: set[str] = set()  # journal ids of the moves done through this object

    def move(
        self,
        rel: str,
        reason: str | None = None,
        *,
        detail: str | None = None,
        kind: str | None = None,
        expect: Identity | None = None,
    ) -> str:
        """Move ``root/rel`` into the quarantine; returns its path relative to the quarantine.

        If another process takes the chosen name first (parts share the folder),
        the move is journaled as aborted and retried under the next free name. A
        failed move is journaled as aborted with its error. A file whose folder
        resolves outside the root (a symlinked folder) is never moved: an
        :class:`OutsideRootError`. A symlink is moved as the link, never its target.
        ``expect``: the identity the file was checked with; a file that no longer
        has it is not moved (:class:`ChangedError`, journaled as aborted).
        """
        source = os.path.join(self.root, rel)
        if not inside(source, self.root):
            raise OutsideRootError(source, os.path.realpath(os.path.dirname(source)))
        while True:
            dst = self._free_name(rel)
            ident = uuid.uuid4().hex
            entry = {"op": "move", "id": ident, "root": self.root, "src": rel, "dst": dst, "tmp": temp_name(ident)}
            entry.update({k: v for k, v in (("reason", reason), ("kind", kind), ("detail", detail)) if v})
            self.journal.append(entry)
            target = os.path.join(self.qdir, dst)
            try:
                move_file(source, target, os.path.join(os.path.dirname(target), entry["tmp"]), expect)
            except FileExistsError:
                self.journal.append({"op": "abort", "id": ident})
                continue
            except ChangedError as exc:  # not a failure: the file is not the one that was judged
                self.journal.append({"op": "abort", "id": ident, "changed": exc.strerror})
                raise
            except OSError as exc:
                self.journal.append({"op": "abort", "id": ident, "error": exc.strerror or str(exc)})
                raise
            self.journal.append({"op": "done", "id": ident})
            self.moved += 1
            self.moved_ids.add(ident)
            return dst

    def _free_name(self, rel: str) -> str:
        """``rel``, or ``stem~N.ext`` if something already has that name (never overwrite)."""
        candidate, n = rel, 0
        stem, ext = os.path.splitext(rel)
        while os.path.lexists(os.path.join(self.qdir, candidate)):
            n += 1
            candidate = f"{stem}~{n}{ext}"
        return candidate

    def close(self) -> None:
        self.journal.close()
        os.close(self._lock_fd)

    def __enter__(self) -> "Quarantine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_placement(qdir: str, root: str) -> None:
    if locations.is_inside(root, qdir):
        raise UserError(f"quarantine folder {qdir} must not be the scanned root or contain it ({root})")


def bound_root(qdir: str) -> str | None:
    """The root a quarantine folder is bound to (its ``quarantine.json``), or None for an older, unbound folder."""
    try:
        with open(os.path.join(qdir, BINDING_FILE), encoding="utf-8") as f:
            root = json.load(f).get("root")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError) as exc:
        raise UserError(
            f"{os.path.join(qdir, BINDING_FILE)} is damaged ({exc}); it names the root this "
            "quarantine's files came from"
        ) from None
    if not isinstance(root, str) or not os.path.isabs(root):
        raise UserError(f"{os.path.join(qdir, BINDING_FILE)} names no absolute root")
    return root


def same_root(a: str, b: str) -> bool:
    """True if two spellings name the same root (as given, or after resolving symlinks)."""
    return os.path.abspath(a) == os.path.abspath(b) or os.path.realpath(a) == os.path.realpath(b)


def bind_root(qdir: str, root: str) -> None:
    """Bind ``qdir`` to ``root`` on first use; a folder bound to (or holding files of) another root is refused."""
    bound = bound_root(qdir)
    if bound is None:
        held = set()
        stem, ext = os.path.splitext(locations.MANIFEST_FILE)
        for name in os.listdir(qdir):
            if name.startswith(stem) and name.endswith(ext):
                state = fold_journal(os.path.join(qdir, name), RecoveryReport())
                held |= {e.get("root") for _, e in in_quarantine(state) if isinstance(e.get("root"), str)}
        others = sorted(r for r in held if not same_root(r, root))
        if others:
            bound = others[0]
        else:
            with atomic_output(os.path.join(qdir, BINDING_FILE)) as tmp:
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump({"root": root}, f)
            return
    if not same_root(bound, root):
        raise UserError(
            f"quarantine folder {qdir} holds files of {bound}, not {root}: one quarantine folder per "
            f"root (e.g. {os.path.join(qdir, os.path.basename(root) or 'root')}), so restore can "
            "tell where each file belongs"
        )
