"""``dsclean quarantine --from-log``: training failures back into the quarantine, after checking again.

A failure log (:mod:`dsclean.failures`) says a sample failed while training; it does not say the
file is bad (a transform can raise on a good image, a worker can die of memory). So every logged
file still on disk is checked again with the scan's checker (the same :class:`CheckOptions` and
checker version as ``dsclean scan``, each file in a fresh process as the scan's isolation does, so a
file that crashes its decoder is named, not fatal); only ``bad`` verdicts are moved, with the scan's
journal and manifest (:class:`dsclean.scanning.quarantine.moves.Quarantine`: ``dsclean restore`` and
``status`` work unchanged). Files that check ``ok`` or ``warn`` are listed with the logged error and
left in place; files missing on disk are listed. Samples inside shards (a line with ``shard`` and
``key``) are read out of their tar, checked the same way (a private temp copy, in a fresh process:
the checks of :func:`check_bytes`), and the bad ones appended to
the deny-list beside the shards (:mod:`dsclean.denylist`). Each file appears once however many lines
name it. What was re-checked is recorded in the root's state folder (:mod:`dsclean.rechecked`) so
the next ``dsclean scan`` checks those files again even if its cache says they are unchanged.
"""

from __future__ import annotations

import logging
import os
import stat
import tarfile
from dataclasses import asdict, dataclass, field

from .. import denylist, locations, rechecked
from .. import reasons as R
from ..errors import UserError
from ..failures import read_failures
from ..formats import format_of_name
from ..jsonpaths import path_bytes, path_fields
from ..scanning.check import CHECKER_VERSION, CheckOptions
from ..scanning.executors import isolate
from ..scanning.quarantine.moves import Quarantine

log = logging.getLogger("dsclean.fromlog")

#: log lines read at most (a runaway log cannot size memory; the counts still cover every line)
MAX_FAILURES = 1_000_000
#: a shard member larger than this is not read into memory for a re-check (listed as not checked)
MAX_MEMBER = 1 << 30
SOURCE = "quarantine --from-log"


@dataclass(frozen=True)
class FromLogOptions:
    """What ``dsclean quarantine --from-log`` can be told."""

    quarantine: str | None = None  # where bad files go (None: check and list only, as a dry run)
    dry_run: bool = False  # decide and list; move nothing, deny nothing
    root: str | None = None  # the dataset root logged relative paths are under (default: the log's ``root``)
    check: CheckOptions = CheckOptions()
    state_dir: str | None = None
    jobs: int = 1  # fresh checking processes at once


@dataclass
class Recheck:
    """One logged file or shard sample, checked again."""

    what: str  # "file" or "sample"
    path: str | None = None  # a file's absolute path; a sample's shard path
    key: str | None = None  # a sample's key
    row: int | None = None
    outcome: str = ""  # quarantined | would_quarantine | denied | would_deny | already_denied | left | missing | failed
    status: str | None = None
    reason: str | None = None
    detail: str | None = None
    lines: int = 0  # log lines naming it
    kind: str | None = None  # the first logged line's kind (exception / worker_died), error and message
    error: str | None = None
    message: str | None = None
    quarantined_as: str | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        if self.path is not None:
            d.update(path_fields(self.path))
        return d


@dataclass
class FromLogSummary:
    logs: list[str]
    files_read: list[str] = field(default_factory=list)
    failures: int = 0  # usable log lines
    damaged_lines: int = 0
    torn_lines: int = 0
    refused: list[str] = field(default_factory=list)
    unplaced: int = 0  # lines naming neither a file nor a shard sample dsclean can find
    root: str | None = None
    quarantine: str | None = None
    dry_run: bool = False
    checker_version: int = CHECKER_VERSION
    items: list[Recheck] = field(default_factory=list)
    denylists: list[str] = field(default_factory=list)
    recorded: str | None = None  # the state file the next scan reads
    notes: list[str] = field(default_factory=list)

    def count(self, *outcomes: str) -> int:
        return sum(1 for i in self.items if i.outcome in outcomes)

    @property
    def bad(self) -> int:
        return sum(1 for i in self.items if i.status == R.BAD)

    @property
    def failed_moves(self) -> int:
        return self.count("failed")

    def to_json(self) -> dict:
        d = asdict(self)
        d["items"] = [i.to_json() for i in self.items]
        d.update(bad=self.bad, ok=self.count("left"), missing=self.count("missing"), failed_moves=self.failed_moves)
        return d


def _first(into: dict, key, rec: dict, new: Recheck) -> None:
    """Count a line for ``key``; its first line gives the item (``new``) its logged error."""
    item = into.get(key)
    if item is None:
        item = into[key] = new
        item.kind, item.error, item.message = rec.get("kind"), rec.get("error"), rec.get("message")
        row = rec.get("row")
        item.row = row if isinstance(row, int) and not isinstance(row, bool) and row >= 0 else None
    item.lines += 1


def _resolve(rec: dict, root: str | None, field_name: str = "path") -> str | None:
    """The absolute path a line names (relative ones against the line's ``root``, else ``root``)."""
    try:
        raw = path_bytes(rec) if field_name == "path" else os.fsencode(rec[field_name])
    except (ValueError, TypeError, KeyError):
        return None
    name = os.fsdecode(raw)
    if not name or "\0" in name:
        return None
    if os.path.isabs(name):
        return os.path.normpath(name)
    base = rec.get("root") if isinstance(rec.get("root"), str) and rec.get("root") else root
    return os.path.normpath(os.path.join(os.path.abspath(base), name)) if base else None


def quarantine_from_log(logs: list[str], options: FromLogOptions = FromLogOptions()) -> FromLogSummary:
    """Re-check every file and shard sample named in the failure ``logs``; quarantine / deny the bad ones."""
    if not logs:
        raise UserError("--from-log needs at least one failure log")
    got = read_failures(*logs, limit=MAX_FAILURES)
    if got.refused and len(got.refused) >= len(got.files):  # a file is listed, then refused when read
        raise UserError(f"cannot read the failure log: {'; '.join(got.refused)}")
    if not got.files:
        raise UserError(
            f"no failure log at {', '.join(logs)} (nor per-process files beside it, e.g. "
            f"{os.path.basename(logs[0])} -> *.rank0.worker0.jsonl)"
        )
    summary = FromLogSummary(
        logs=list(logs),
        files_read=got.files,
        failures=len(got.failures),
        damaged_lines=got.damaged_lines,
        torn_lines=got.torn_lines,
        refused=got.refused,
        dry_run=options.dry_run,
    )
    files: dict[str, Recheck] = {}
    samples: dict[tuple[str, str], Recheck] = {}
    roots = {
        r["root"] for r in got.failures if isinstance(r.get("root"), str) and r.get("root") and r.get("shard") is None
    }
    folders: dict[str, dict[str, str]] = {}  # packed set folder -> key -> shard file (a line naming the folder)
    for rec in got.failures:
        if rec.get("shard") is not None or rec.get("key") is not None:  # a sample in a shard set, never a file
            shard = (
                _resolve(rec, options.root, "shard")
                if isinstance(rec.get("shard"), str) and isinstance(rec.get("key"), str)
                else None
            )
            if shard is not None and os.path.isdir(shard):
                if shard not in folders:
                    folders[shard] = _shard_files(shard)
                shard = folders[shard].get(rec["key"])
            if shard is None:
                summary.unplaced += 1
                continue
            _first(samples, (shard, rec["key"]), rec, Recheck("sample", path=shard, key=rec["key"]))
        elif isinstance(rec.get("path"), str):
            path = _resolve(rec, options.root)
            if path is None:
                if isinstance(rec.get("path"), str) and rec["path"] and not os.path.isabs(rec["path"]):
                    raise UserError(
                        f"{rec['path']}: a relative path in the log with no root (the log line has "
                        "none): pass --root ROOT, the folder the dataset's paths are relative to"
                    )
                summary.unplaced += 1
                continue
            _first(files, path, rec, Recheck("file", path=path))
        else:
            summary.unplaced += 1
    if summary.unplaced:
        summary.notes.append(
            f"{summary.unplaced} log lines name no file or shard sample that can be placed (a "
            "relative path without a root: pass --root, or an index without a path)"
        )
    if files:
        _files(summary, files, roots, options)
    if samples:
        _samples(summary, samples, options)
    return summary


def _root_of(files: dict[str, Recheck], roots: set[str], options: FromLogOptions) -> str:
    if options.root:
        root = options.root
    elif len(roots) == 1:
        root = next(iter(roots))
    elif roots:
        raise UserError(
            f"the logs name files under {len(roots)} roots ({', '.join(sorted(roots)[:3])}); a "
            "quarantine holds one root's files: pass --root ROOT (and run once per root)"
        )
    else:
        raise UserError(
            "the logs give no dataset root for their files: pass --root ROOT (the folder the files "
            "are under, the one dsclean scan is run on)"
        )
    if not os.path.isdir(root):
        raise UserError(f"dataset root {root} is not a folder")
    return os.path.abspath(root)


def _files(summary: FromLogSummary, files: dict[str, Recheck], roots: set[str], options: FromLogOptions) -> None:
    root = _root_of(files, roots, options)
    summary.root = root
    qdir = os.path.abspath(options.quarantine) if options.quarantine else None
    summary.quarantine = qdir
    if qdir and locations.is_inside(qdir, root):
        raise UserError(
            f"the quarantine folder {qdir} is inside the dataset root {root}: torchvision's "
            "ImageFolder (and anything else that lists the tree) would see it as one more class. "
            "Choose a --quarantine outside ROOT"
        )
    if qdir and os.path.exists(qdir) and not os.path.isdir(qdir):
        raise UserError(f"quarantine folder {qdir} is a file, not a folder")
    present: list[tuple[str, Recheck]] = []
    for path, item in files.items():
        rel = os.path.relpath(path, root)
        if rel == os.curdir or rel.startswith(os.pardir + os.sep) or rel == os.pardir:
            item.outcome, item.detail = "left", f"outside the root {root}: not checked, not moved"
            summary.items.append(item)
            continue
        if not os.path.lexists(path):
            item.outcome = "missing"
        else:
            present.append((rel, item))
        summary.items.append(item)
    verdicts = isolate(root, [rel for rel, _ in present], options.check, max(1, options.jobs)) if present else []
    moving = qdir is not None and not options.dry_run
    bad = [(rel, item, v) for (rel, item), v in zip(present, verdicts) if v.status == R.BAD]
    for (rel, item), v in zip(present, verdicts):
        item.status, item.reason, item.detail = v.status, v.reason, v.detail
        item.outcome = "left" if v.status != R.BAD else "would_quarantine"
    if moving and bad:
        with Quarantine(qdir, root) as q:
            summary.notes += q.recovery.refused + q.recovery.bad_lines
            for rel, item, v in bad:
                try:
                    item.quarantined_as = q.move(rel, v.reason, detail=v.detail, kind=v.kind)
                    item.outcome = "quarantined"
                except OSError as exc:
                    item.outcome = "failed"
                    item.detail = f"{v.detail}; not moved: {exc.strerror or exc}"
    summary.recorded = rechecked.record(
        root,
        [
            {
                "rel": os.path.relpath(i.path, root),
                "status": i.status,
                "reason": i.reason,
                "detail": i.detail,
                "outcome": i.outcome,
                "kind": i.kind,
                "error": i.error,
                "message": i.message,
            }
            for i in files.values()
            if i.outcome != "left" or i.status
        ],
        options.state_dir,
    )


def _open_tar(path: str) -> tarfile.TarFile:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file")
    return tarfile.open(fileobj=os.fdopen(fd, "rb"), mode="r:*")


def _key_of(name: str) -> tuple[str, str]:
    """WebDataset's grouping: ``dir/abc.seg.jpg`` -> key ``dir/abc``, extension ``seg.jpg``."""
    folder, base = os.path.split(name)
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext


def _samples(summary: FromLogSummary, samples: dict[tuple[str, str], Recheck], options: FromLogOptions) -> None:
    by_shard: dict[str, dict[str, Recheck]] = {}
    for (shard, key), item in samples.items():
        by_shard.setdefault(shard, {})[key] = item
    by_folder: dict[str, list[dict]] = {}
    for shard, wanted in sorted(by_shard.items()):
        folder = os.path.dirname(shard)
        known = denylist.read_denylist(denylist.denylist_path(folder)).keys()
        verdicts = _check_shard(shard, wanted, options.check, options.jobs)
        rows = _packed_rows(folder, os.path.basename(shard), wanted)
        for key, item in wanted.items():
            summary.items.append(item)
            v = verdicts.get(key)
            if isinstance(v, str):
                item.outcome, item.detail = "missing", v
                continue
            item.status, item.reason, item.detail = v.status, v.reason, v.detail
            if item.row is None and key in rows:
                item.row, path = rows[key]
            else:
                path = rows.get(key, (None, None))[1]
            if v.status != R.BAD:
                item.outcome = "left"
            elif (os.path.basename(shard), key) in known:
                item.outcome = "already_denied"
            elif options.dry_run:
                item.outcome = "would_deny"
            else:
                item.outcome = "denied"
                entry = {
                    "shard": os.path.basename(shard),
                    "key": key,
                    "row": item.row,
                    "reason": v.reason,
                    "detail": v.detail,
                    "error": item.error,
                    "checker": CHECKER_VERSION,
                    "source": SOURCE,
                }
                if path is not None:
                    entry["path"] = path
                by_folder.setdefault(folder, []).append(entry)
    for folder, entries in by_folder.items():
        target = denylist.denylist_path(folder)
        denylist.append(target, entries)
        summary.denylists.append(target)


def _check_shard(shard: str, wanted: dict[str, Recheck], options: CheckOptions, jobs: int = 1) -> dict[str, object]:
    """key -> the worst verdict of its media members, or a str saying why there is none.

    Each wanted member's bytes are copied (one at a time) into a private temp folder and checked
    there by :func:`isolate`, as logged files are: a member that crashes its decoder (the worker
    that died in training may have died of exactly that) gets a ``decoder_crash`` verdict instead
    of taking this command down. The copies are removed afterwards; the shard is only read.
    """
    import shutil
    import tempfile

    out: dict[str, object] = {}
    copies: list[tuple[str, str]] = []  # (key, rel in the temp folder)
    tmp = tempfile.mkdtemp(prefix="dsclean-fromlog-")
    try:
        try:
            with _open_tar(shard) as tf:
                for m in tf:  # streamed: one member at a time
                    key, ext = _key_of(m.name)
                    if key not in wanted or not m.isfile() or format_of_name("x." + ext.rsplit(".", 1)[-1]) is None:
                        continue
                    if m.size > MAX_MEMBER:
                        out.setdefault(key, f"member {m.name} is {m.size:,} bytes: not re-checked")
                        continue
                    rel = os.path.join(str(len(copies)), os.path.basename(m.name))
                    os.makedirs(os.path.join(tmp, str(len(copies))))
                    f = tf.extractfile(m)
                    with open(os.path.join(tmp, rel), "wb") as dst:
                        if f is not None:
                            shutil.copyfileobj(f, dst, 1 << 20)
                    copies.append((key, rel))
        except (OSError, tarfile.TarError, EOFError) as exc:
            for key in wanted:
                if key not in {k for k, _ in copies}:
                    out.setdefault(key, f"shard {shard} could not be read: {getattr(exc, 'strerror', None) or exc}")
        verdicts = isolate(tmp, [rel for _, rel in copies], options, max(1, jobs)) if copies else []
        for (key, rel), v in zip(copies, verdicts):
            v.path = os.path.basename(rel)
            old = out.get(key)
            if not hasattr(old, "status") or _worse(v.status, old.status):
                out[key] = v
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for key in wanted:
        out.setdefault(key, f"no media member with key {key} in {shard}")
    return out


def _worse(a: str, b: str) -> bool:
    rank = {R.OK: 0, R.WARN: 1, R.BAD: 2}
    return rank.get(a, 0) > rank.get(b, 0)


def _shard_files(folder: str) -> dict[str, str]:
    """key -> shard file of every sample of the packed set in ``folder`` ({} for anything else)."""
    from ..data.shards import is_packed_set, open_packed_index, read_shard_list
    from ..pack.samples import key_numbers

    if not is_packed_set(folder):
        return {}
    try:
        names = [s["url"] for s in read_shard_list(folder)]
        idx = open_packed_index(folder)
    except (UserError, OSError, ValueError):
        return {}
    import numpy as np

    keys = key_numbers(np.asarray(idx.offsets, np.int64), idx.data)
    shard_of = np.asarray(idx.extra["shard"])
    return {
        f"{int(k):016x}": os.path.join(folder, names[int(s)])
        for k, s in zip(keys.tolist(), shard_of.tolist())
        if 0 <= int(s) < len(names)
    }


def _packed_rows(folder: str, shard_name: str, wanted: dict[str, Recheck]) -> dict[str, tuple[int, str]]:
    """key -> (packed index row, original path) for a dsclean pack's shard; {} for other shard sets."""
    from ..data.shards import is_packed_set, open_packed_index, read_shard_list
    from ..pack.samples import sample_key

    if not is_packed_set(folder):
        return {}
    try:
        names = [s["url"] for s in read_shard_list(folder)]
        idx = open_packed_index(folder)
    except (UserError, OSError, ValueError) as exc:
        log.warning("%s: packed index unreadable (%s): deny-list rows left unknown", folder, exc)
        return {}
    if shard_name not in names:
        return {}
    import numpy as np

    k = names.index(shard_name)
    out = {}
    for row in np.flatnonzero(np.asarray(idx.extra["shard"]) == k).tolist():
        raw = idx.path_bytes(row)
        key = sample_key(raw)
        if key in wanted:
            out[key] = (row, os.fsdecode(raw))
    return out
