"""Move the extra copies of each group aside, through the scan's journaled quarantine.

Per group: each root (split) keeps one member, chosen by ``keep`` (``first``: the
first in the group's order, i.e. the representative when it is in that root;
``largest``: most bytes; ``most-pixels``: most width x height; ties go to the
first); its other members in that root are moved. A root's copy is never
moved because of a copy in another root, unless that root is ``drop_from``:
then all its members go, as long as another root keeps one. Each root's files
go to ``DIR/<root name>/<path>``, a quarantine of its own (journal, lock), so
``dsclean restore DIR/<root name>`` puts them back. Reason: ``duplicate``. Each subfolder is recorded
in its root's state folder (:mod:`.quarantines`), so ``dsclean report ROOT`` knows what dups moved.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .. import reasons
from ..errors import UserError
from ..scanning.quarantine.moves import Quarantine, bound_root
from ..storage.fs import Store
from ..storage.quarantine import BucketQuarantine, MoveError, ObjInfo, same_object
from ..storage.reads import ReadPolicy, classify, retried
from ..storage.urls import is_url, normalize, scheme_of
from .collect import check_outside_roots
from .finder import DupsResult
from .quarantines import record_quarantine

KEEP = ("first", "largest", "most-pixels")


@dataclass
class MoveReport:
    planned: int = 0  # extra copies chosen to move
    moved: int = 0
    errors: list[str] = field(default_factory=list)
    left_across_splits: int = 0  # copies in another root kept because no --drop-from names it
    changed: int = 0  # files that changed since their facts were taken: left in place
    destinations: dict[str, str] = field(default_factory=dict)  # root as given -> its quarantine subfolder
    notes: list[str] = field(default_factory=list)


def subfolders(roots: list[str]) -> list[str]:
    """A distinct subfolder name per root: its base name, with ~2, ~3 ... on clashes."""
    names: list[str] = []
    for root in roots:
        base = os.path.basename(os.path.normpath(os.path.abspath(root))) or "root"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}~{n}"
        names.append(name)
    return names


def check_quarantine(qdir: str, roots: list[str], dry_run: bool = False) -> None:
    """Refuse a quarantine that could not take the moves: inside a root, a file, not writable, or a root's
    subfolder bound to another root. Creates nothing; the CLI calls it before any work."""
    if is_url(qdir) or any(is_url(r) for r in roots):
        check_bucket_quarantine(qdir, roots)
        return
    check_outside_roots(qdir, roots, "the quarantine")
    if os.path.exists(qdir) and not os.path.isdir(qdir):
        raise UserError(f"the quarantine {qdir} is a file, not a folder")
    if dry_run:
        return
    for root, name in zip(roots, subfolders(roots)):
        folder = os.path.join(qdir, name)
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise UserError(f"the quarantine {folder} (for {root}) is a file, not a folder")
        existing = folder
        while not os.path.exists(existing):  # the folder that would be made must be creatable
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
            raise UserError(f"the quarantine {qdir} is not writable: {existing} cannot be written to")
        bound = bound_root(folder) if os.path.isdir(folder) else None
        if bound is not None and os.path.realpath(bound) != os.path.realpath(root):
            raise UserError(f"the quarantine {folder} holds files of {bound}, not {root}: give another --quarantine")


def resolve_split(roots: list[str], split: str) -> int:
    """The index of the root ``split`` names (as given, or the same folder)."""
    if split in roots:
        return roots.index(split)
    for i, root in enumerate(roots):
        if os.path.exists(split) and os.path.realpath(split) == os.path.realpath(root):
            return i
    raise UserError(f"--drop-from {split}: not one of the roots given ({', '.join(roots)})")


def plan_moves(result: DupsResult, keep: str = "first", drop_from: str | None = None) -> tuple[list[int], int]:
    """(files to move, copies left because they are in another split), per the rules above."""
    if keep not in KEEP:
        raise UserError(f"--keep {keep}: choose one of {', '.join(KEEP)}")
    inv = result.inventory
    drop = resolve_split(inv.roots, drop_from) if drop_from is not None else None
    moves: list[int] = []
    left = 0
    for g in result.groups:
        by_root: dict[int, list[int]] = {}
        for m in g.members:
            by_root.setdefault(int(inv.root[m]), []).append(m)
        roots_kept = [r for r in by_root if r != drop]
        for r, members in by_root.items():
            if r == drop and roots_kept:
                moves += members
                continue
            keeper = _choose(inv, members, keep)
            moves += [m for m in members if m != keeper]
        if drop is None and len(by_root) > 1:
            left += len(by_root) - 1
    return moves, left


def _choose(inv, members: list[int], keep: str) -> int:
    if keep == "first":
        return members[0]
    score = inv.size if keep == "largest" else inv.pixels
    best = members[0]
    for m in members[1:]:
        if score[m] > score[best]:
            best = m
    return best


def quarantine_duplicates(
    result: DupsResult,
    qdir: str,
    keep: str = "first",
    drop_from: str | None = None,
    dry_run: bool = False,
    state_dir: str | None = None,
) -> MoveReport:
    """Move every extra copy into ``qdir/<root name>/``, journaled; never overwrites, never deletes.
    Each subfolder is first recorded in its root's state folder (``state_dir``), for ``dsclean report``."""
    inv = result.inventory
    check_quarantine(qdir, inv.roots, dry_run)
    moves, left = plan_moves(result, keep, drop_from)
    report = MoveReport(planned=len(moves), left_across_splits=left)
    names = subfolders(inv.roots)
    report.destinations = {root: os.path.join(qdir, name) for root, name in zip(inv.roots, names)}
    if is_url(qdir):
        report.destinations = {root: f"{normalize(qdir)}/{name}" for root, name in zip(inv.roots, names)}
    if dry_run or not moves:
        return report
    by_root: dict[int, list[int]] = {}
    for m in moves:
        by_root.setdefault(int(inv.root[m]), []).append(m)
    if is_url(qdir):
        for r, files in sorted(by_root.items()):
            _move_objects(inv, r, files, report.destinations[inv.roots[r]], state_dir, report)
        return report
    for r, files in sorted(by_root.items()):
        root = os.path.abspath(inv.roots[r])
        note = record_quarantine(root, os.path.join(qdir, names[r]), state_dir)
        report.notes += [note] if note else []
        with Quarantine(os.path.join(qdir, names[r]), root) as q:
            for m in files:
                rel = os.fsdecode(inv.rel(m))
                full = os.path.join(root, rel)
                try:
                    st = os.stat(full)
                except OSError as exc:
                    report.errors.append(f"{full}: {exc.strerror or exc}")
                    continue
                if (st.st_size, st.st_mtime_ns) != (int(inv.size[m]), int(inv.mtime_ns[m])):
                    report.changed += 1
                    continue
                try:
                    q.move(rel, reasons.DUPLICATE)
                    report.moved += 1
                except OSError as exc:
                    report.errors.append(f"{full}: {exc.strerror or exc}")
    return report


def check_bucket_quarantine(qdir: str, roots: list[str]) -> None:
    """Bucket roots quarantine in the bucket: ``qdir`` a URL on the same storage as every root (all URLs),
    neither inside a root nor holding one (dsclean never writes into a dataset). Creates nothing."""
    if not is_url(qdir) or not all(is_url(r) for r in roots):
        raise UserError(
            f"--quarantine {qdir}: bucket roots quarantine in the bucket and folders in a folder: give URL roots with "
            "a URL quarantine (s3://BUCKET/PREFIX), or folders with a folder (mixed roots: one --quarantine cannot serve both)"
        )
    q = normalize(qdir)
    for root in roots:
        url = normalize(root)
        if scheme_of(url) != scheme_of(q):
            raise UserError(f"--quarantine {qdir}: must be on the same storage as {root}")
        if q == url or q.startswith(url + "/"):
            raise UserError(
                f"the quarantine {qdir} is inside the dataset {root}; dsclean never writes into a dataset: "
                "give a prefix outside it"
            )
        if url.startswith(q + "/"):
            raise UserError(f"the quarantine {qdir} holds the dataset {root}: give a prefix outside it")


def _move_objects(inv, r: int, files: list[int], qurl: str, state_dir: str | None, report: MoveReport) -> None:
    """Root ``r``'s extra copies moved into the bucket quarantine ``qurl`` (copy, verify, delete, journaled in
    its local state folder: ``dsclean restore qurl`` puts them back); an object changed since its facts were
    taken (size or ETag) is left in place."""
    source = inv.stores[r]
    policy = ReadPolicy()
    with BucketQuarantine(source, Store(qurl, source.options), state_dir, policy) as q:
        for m in files:
            rel = os.fsdecode(inv.rel(m))
            size, etag = int(inv.size[m]), inv.etag[m].as_py() if inv.etag is not None else None
            try:
                now = retried(lambda rel=rel: source.fs.info(source.path(rel)), rel, policy)
            except FileNotFoundError:
                report.errors.append(f"{source.url_of(rel)}: gone (404)")
                continue
            except Exception as exc:
                report.errors.append(f"{source.url_of(rel)}: {classify(rel, exc).detail}")
                continue
            listed = ObjInfo(now.get("size"), (now.get("ETag") or "").strip('"') or None)
            if not same_object(listed, size, etag):
                report.changed += 1
                continue
            try:
                q.move(rel, size, etag, kind="image" if inv.kind[m] == 0 else None, reason=reasons.DUPLICATE)
                report.moved += 1
            except MoveError as exc:
                report.errors.append(str(exc))
