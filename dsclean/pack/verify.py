"""``dsclean verify DIR``: fsck for a packed shard set. Reads only; never modifies a shard.

Checks, per shard: the tar structure (every header, nothing past the end, the
end-of-archive blocks), member names (``<16 hex>.<ext>``), the members of a
sample adjacent and ordered by name, one media member and one ``.json`` per
sample, ``.cls`` exactly when labelled and equal to the label, each ``.json``
against the sample's other members (checksum of the media bytes, size, label
as in the ``.cls``, a path that gives the sample's key), and against the packed
index: the same samples in the same order, every media member's offset, size
and checksum (:func:`dsclean.hashing.content_hash` of its bytes) and every field
of the ``.json`` (the record pack writes for that row). Across the set: the
shard list against the packed index (names, counts, file sizes), missing
shards, extra ``.tar`` files in the folder, sample keys unique. A killed pack's
temp files are notes. A set in class blocks (:mod:`.mixing`) is a warning, not a problem.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import denylist, locations
from .. import reasons as R
from ..data.shards import open_packed_index, packed_index, read_shard_list, refuse_unfinished_pack, release
from ..errors import UserError
from ..hashing import content_hash
from ..index.store import KINDS, read_table
from ..interrupts import stop_on_signals
from ..jsonpaths import path_bytes
from ..openfile import open_regular_file
from . import names as templates
from .bulk import FACT_NAMES, json_members
from .mixing import class_blocks
from .runner import run_tasks
from .samples import KEY_RE, sample_key
from .tarformat import BLOCK, TarError, iter_members, sidecar_bytes

#: problems listed per shard at most (the count says how many more)
MAX_PROBLEMS = 50
#: pages of a shard read so far are unmapped every this many bytes (see dsclean.data.shards.release)
_RELEASE_EVERY = 64 << 20
_TEMP_RE = re.compile(r"^\..+\.tmp$")
#: rows of the packed index whose expected ``.json`` records are built at once
_JSON_ROWS = 4096
_ABSENT = object()


@dataclass
class ShardReport:
    shard: str
    ok: bool = True
    samples: int = 0
    problems: list[dict] = field(default_factory=list)
    more_problems: int = 0  # beyond MAX_PROBLEMS

    def add(self, problem: str, key: str | None = None, member: str | None = None, field: str | None = None) -> None:
        """One problem; ``field``: the ``.json`` field it is about (None: not about one field)."""
        self.ok = False
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append({"key": key, "member": member, "field": field, "problem": problem})
        else:
            self.more_problems += 1

    def to_json(self) -> dict:
        out = {"shard": self.shard, "ok": self.ok, "samples": self.samples, "problems": self.problems}
        if self.more_problems:
            out["more_problems"] = self.more_problems
        return out


@dataclass
class VerifyReport:
    folder: str
    ok: bool = True
    samples: int = 0
    bytes: int = 0
    shards: list[ShardReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # about the set: index, shard list, keys
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # not problems (the exit code ignores them): class blocks
    denylist: dict | None = None  # the deny-list beside the shards (dsclean.denylist.report), if any

    def to_json(self) -> dict:
        d = asdict(self)
        d["shards"] = [s.to_json() for s in self.shards]
        return d


@dataclass(frozen=True)
class _Task:
    folder: str
    name: str
    number: int
    filesize: int | None  # from the shard list (None: not known)
    nsamples: int | None
    start: int  # the shard's rows in the packed index: [start, end)
    end: int
    have_index: bool


def verify_shards(
    folder: str, *, jobs: int = 1, decode=None, fetch=None, storage_options: dict | None = None
) -> VerifyReport:
    """Check the shard set in ``folder``; a :class:`UserError` when it is not a shard set at all.

    ``decode``: also run the scan's checks on every sample's bytes (:mod:`.decode`); a ``bad``
    verdict is a problem, a ``warn`` a note. True: with the check options the packed index recorded
    (the scan's, and ``--lenient`` when the index ships ``--include-warn truncated``/``corrupt``), so a
    sample the index included on purpose is judged as it was; or a
    :class:`dsclean.scanning.check.CheckOptions` to judge with.

    ``fetch``: the shards are not in ``folder`` (which holds the set's metadata) but in a bucket
    (:mod:`.remoteverify`): ``fetch.get(name)`` brings one into ``folder``, ``fetch.drop(name)`` removes
    it, ``fetch.names()`` lists the prefix; at most ``jobs`` shards are on local disk at a time.

    ``folder`` may be a bucket prefix holding a dsclean pack (``s3://BUCKET/SHARDS``, opened with
    ``storage_options``): :func:`.remote.verify_bucket`.
    """
    if re.match(r"^[a-z][a-z0-9+.-]*://", folder, re.IGNORECASE) and not folder.startswith("file://"):
        from .remote import verify_bucket

        return verify_bucket(folder, storage_options or {}, verify_shards, jobs=jobs, decode=decode)
    _is_shard_set(folder)
    report = VerifyReport(folder=folder)
    shardlist = _try(report, lambda: read_shard_list(folder))
    idx = _try(report, lambda: open_packed_index(folder))
    names = _names(report, shardlist, idx)
    bounds = _bounds(report, idx, len(names)) if idx is not None else None
    tasks = []
    for k, name in enumerate(names):
        entry = shardlist[k] if shardlist is not None and k < len(shardlist) else {}
        start, end = (int(bounds[k]), int(bounds[k + 1])) if bounds is not None else (0, 0)
        tasks.append(
            _Task(folder, name, k, entry.get("filesize"), entry.get("nsamples"), start, end, bounds is not None)
        )
    if decode is True:
        from .decode import recorded_options

        decode = recorded_options(idx.meta if idx is not None else None)
    keys = []
    held: dict[str, np.ndarray] = {}
    size = 0
    window = len(tasks) if fetch is None else max(1, jobs)  # a bucket's shards: ``jobs`` on local disk at once
    for lo in range(0, len(tasks), max(1, window)):
        part = tasks[lo : lo + window]
        if fetch is not None:
            for t in part:
                fetch.get(t.name)
        try:
            with stop_on_signals() as stop:
                for shard_report, shard_keys in run_tasks(
                    verify_shard, part, backend="loky", jobs=jobs, scheduler=None, stop=stop
                ):
                    report.shards.append(shard_report)
                    keys.append(shard_keys)
                    held[shard_report.shard] = shard_keys
                if stop.signum:
                    raise KeyboardInterrupt
            if decode not in (None, False):
                by_name = {s.shard: s for s in report.shards}
                _decode(report, [t.name for t in part], decode, jobs, by_name)
            size += sum(
                os.path.getsize(os.path.join(folder, t.name))
                for t in part
                if os.path.isfile(os.path.join(folder, t.name))
            )
        finally:
            if fetch is not None:
                for t in part:
                    fetch.drop(t.name)
    position = {n: i for i, n in enumerate(names)}
    report.shards.sort(key=lambda s: position[s.shard])
    report.samples = sum(s.samples for s in report.shards)
    if idx is not None and report.samples != len(idx) and not any(not s.ok for s in report.shards):
        report.problems.append(f"the shards hold {report.samples} samples, the packed index {len(idx)}")
    _unique_keys(report, keys)
    if idx is not None and bounds is not None:
        blocks = class_blocks(idx.labels, bounds)
        if blocks:
            report.warnings.append(blocks)
    _other_files(report, set(names), fetch.names() if fetch is not None else None)
    report.denylist = denylist.report(folder, held, report.notes)
    report.bytes = size
    report.ok = not report.problems and all(s.ok for s in report.shards)
    return report


def _is_shard_set(folder: str) -> None:
    if not os.path.isdir(folder):
        raise UserError(f"{folder}: not a folder; dsclean verify takes a folder written by dsclean pack")
    has = {
        n: os.path.isfile(os.path.join(folder, n))
        for n in (locations.SHARD_LIST_FILE, locations.PACKED_INDEX_FILE, locations.PACK_STATE_FILE)
    }
    if not has[locations.SHARD_LIST_FILE] and not has[locations.PACKED_INDEX_FILE]:
        refuse_unfinished_pack(folder)  # (a pack.json there: the message every command gives)
        raise UserError(f"{folder}: not a shard set (no {locations.SHARD_LIST_FILE} nor {locations.PACKED_INDEX_FILE})")


def _try(report: VerifyReport, fn):
    try:
        return fn()
    except UserError as exc:
        report.problems.append(str(exc))
        return None


def _names(report: VerifyReport, shardlist: list[dict] | None, idx) -> list[str]:
    """Shard file names: the shard list's, checked against the packed index's name template and count.

    Both are data from the index's metadata: the template is parsed by :mod:`.names` (never
    ``str.format``-ed) and the count is checked against the shard list (or, without one, the index's
    rows: a shard holds at least one sample) before a name is built."""
    packed = idx.meta.get("packed", {}) if idx is not None else {}
    packed = packed if isinstance(packed, dict) else {}
    from_index = None
    template, count = packed.get("name"), packed.get("shards")
    if idx is not None and (not isinstance(template, str) or not isinstance(count, int) or isinstance(count, bool)):
        report.problems.append("the packed index's metadata has no shard name format and count")
    elif idx is not None:
        try:
            shard_names = templates.parse(template)
        except templates.NameTemplateError as exc:
            report.problems.append(f"the packed index's shard name format {template!r} is unusable: {exc}")
        else:
            limit = len(shardlist) if shardlist is not None else max(len(idx), 1)
            wrong = count != limit if shardlist is not None else not 0 < count <= limit
            if wrong:
                report.problems.append(
                    f"the packed index's metadata says {count} shards, "
                    + (
                        f"the shard list names {limit}"
                        if shardlist is not None
                        else f"more than its {len(idx)} samples could fill"
                    )
                )
            else:
                from_index = [shard_names.name(k) for k in range(count)]
    if shardlist is None:
        return from_index or []
    listed = [s["url"] for s in shardlist]
    if from_index is not None and listed != from_index:
        first = next((a, b) for a, b in zip(listed, from_index) if a != b)
        report.problems.append(
            f"the shard list's names differ from the packed index's name format (first difference: {first})"
        )
    return listed


def _bounds(report: VerifyReport, idx, shards: int) -> np.ndarray | None:
    """Each shard's rows in the packed index (which lists samples in shard order)."""
    col = np.asarray(idx.extra["shard"], np.int64)
    if len(col) and (np.any(np.diff(col) < 0) or col[0] < 0 or col[-1] >= shards):
        report.problems.append(
            "the packed index's shard column is not in shard order or names shards outside the shard list"
        )
        return None
    return np.searchsorted(col, np.arange(shards + 1), side="left")


def verify_shard(task: _Task) -> tuple[ShardReport, np.ndarray]:
    """Check one shard (a worker task); returns its report and the keys it holds."""
    rep = ShardReport(task.name)
    path = os.path.join(task.folder, task.name)
    keys: list[int] = []
    try:
        f = open_regular_file(path)
    except FileNotFoundError:
        rep.add("missing: the shard list names it but there is no such file")
        return rep, np.zeros(0, np.uint64)
    except OSError as exc:  # NotRegularFile (a FIFO, device, folder): never read, never waited on
        rep.add(f"unreadable: {exc.strerror}")
        return rep, np.zeros(0, np.uint64)
    idx = open_packed_index(task.folder) if task.have_index else None
    with f:
        size = os.fstat(f.fileno()).st_size
        if task.filesize is not None and size != task.filesize:
            rep.add(f"the file is {size} bytes, the shard list says {task.filesize}")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        try:
            _check_samples(task, rep, mm, idx, keys)
        except TarError as exc:
            rep.add(f"broken tar: {exc}")
        finally:
            if size:
                mm.close()
    if task.nsamples is not None and rep.samples != task.nsamples:
        rep.add(f"{rep.samples} samples in the shard, the shard list says {task.nsamples}")
    if task.have_index and rep.samples != task.end - task.start:
        rep.add(f"{rep.samples} samples in the shard, the packed index lists {task.end - task.start}")
    return rep, np.asarray(keys, np.uint64)


def _groups(mm, rep: ShardReport):
    """``(key, [members])`` per sample; names and adjacency checked."""
    seen: set[str] = set()
    key, members = None, []
    end = 0
    for m in iter_members(mm):
        end = m.offset + m.size + (-m.size % BLOCK)
        if mm[m.offset + m.size : end].count(0) != end - m.offset - m.size:
            rep.add("non-zero bytes in the padding after the member's data", member=m.name)
        k, dot, ext = m.name.partition(".")
        if not dot or not KEY_RE.fullmatch(k) or not ext:
            rep.add("member name is not <16 hex digits>.<ext>", member=m.name)
            continue
        if k != key:
            if key is not None:
                yield key, members
            if k in seen:
                rep.add("the members of this sample are not adjacent", key=k, member=m.name)
            seen.add(k)
            key, members = k, []
        members.append(m)
    if key is not None:
        yield key, members
    at = _first_non_zero(mm, end + 2 * BLOCK, len(mm))
    if at is not None:
        rep.add(f"non-zero bytes after the end-of-archive blocks (the first at byte {at})")


#: bytes of a shard's tail compared with zeros at a time
_ZERO_CHUNK = 1 << 20
_ZERO_BLOCK = bytes(_ZERO_CHUNK)


def _first_non_zero(mm, start: int, stop: int) -> int | None:
    """The offset of the first non-zero byte in ``mm[start:stop]``, or None; in bounded chunks (a sparse
    or preallocated shard's tail of zeros may be many GiB), each chunk's pages released once read."""
    pos = start
    while pos < stop:
        n = min(_ZERO_CHUNK, stop - pos)
        chunk = mm[pos : pos + n]  # (a 1 MiB copy compared with memcmp: 20x faster than a memoryview compare)
        if chunk != (_ZERO_BLOCK if n == _ZERO_CHUNK else bytes(n)):
            return pos + n - len(chunk.lstrip(b"\0"))
        if isinstance(mm, mmap.mmap):
            release(mm, pos, pos + n)
        pos += n
    return None


def _check_samples(task: _Task, rep: ShardReport, mm, idx, keys: list[int]) -> None:
    row = task.start
    released = 0
    expected = _ExpectedJson(task.folder, idx) if idx is not None else None
    for key, members in _groups(mm, rep):
        if members[0].offset - released > _RELEASE_EVERY:  # keep this process's resident size flat
            release(mm, released, members[0].offset - _RELEASE_EVERY // 2)
            released = members[0].offset - _RELEASE_EVERY // 2
        rep.samples += 1
        keys.append(int(key, 16))
        names = [m.name for m in members]
        if names != sorted(names):
            rep.add(f"members out of order: {names}", key=key)
        by_ext = {m.name.partition(".")[2]: m for m in members}
        media = [m for e, m in by_ext.items() if e not in ("cls", "json")]
        if len(media) != 1 or "json" not in by_ext or len(by_ext) != len(members):
            rep.add(f"a sample needs one media member and one .json, has {names}", key=key)
            continue
        m, cls = media[0], by_ext.get("cls")
        digest = content_hash(memoryview(mm)[m.offset : m.offset + m.size])  # hashed in place, no copy
        want_json = None
        if idx is not None:
            if row >= task.end:
                rep.add("a sample the packed index does not list for this shard", key=key, member=m.name)
            else:
                if _against_index(rep, key, m, cls, mm, idx, row, digest):
                    want_json = expected(row)
                row += 1
        _check_json(rep, key, mm, by_ext["json"], m, cls, digest, want_json)


class _ExpectedJson:
    """The ``.json`` member pack writes for a row of the packed index, built by pack's own formatter
    (:func:`.bulk.json_members`) for a block of rows at a time (bounded memory for any shard size)."""

    def __init__(self, folder: str, idx) -> None:
        self.path = packed_index(folder)
        self.idx = idx
        self.classes = list(idx.meta.get("classes", []))
        self.lo = self.hi = 0
        self.text, self.starts, self.lengths = b"", np.zeros(0, np.int64), np.zeros(0, np.int64)

    def __call__(self, row: int) -> bytes:
        if not self.lo <= row < self.hi:
            self._load(row)
        i = row - self.lo
        return self.text[self.starts[i] : self.starts[i] + self.lengths[i]]

    def _load(self, lo: int) -> None:
        idx, hi = self.idx, min(len(self.idx), lo + _JSON_ROWS)
        table = read_table(self.path, np.arange(lo, hi, dtype=np.int64))
        facts = {
            name: (
                np.asarray(table.column(name).fill_null(0).to_numpy(), np.int64),
                np.asarray(table.column(name).is_valid().to_numpy(), bool),
            )
            for name in FACT_NAMES
            if name in table.column_names
        }
        self.text, self.starts, self.lengths = json_members(
            [idx.path_bytes(r) for r in range(lo, hi)],
            np.asarray(idx.labels[lo:hi], np.int64),
            self.classes,
            np.asarray(idx.kinds[lo:hi], np.int64),
            KINDS,
            np.asarray(idx.sizes[lo:hi], np.int64),
            np.asarray(idx.extra["checksum"][lo:hi]),
            facts,
        )
        self.lo, self.hi = lo, hi


def _check_json(rep: ShardReport, key: str, mm, member, media, cls, digest: bytes, expected: bytes | None) -> None:
    """The sample's ``.json`` against its media bytes and other members, then field by field against
    ``expected`` (the record pack writes for the packed index's row; None: no matching row)."""
    try:
        raw = sidecar_bytes(mm, member)
        cls_text = _cls_text(mm, cls)
    except TarError as exc:
        rep.add(str(exc), key=key, member=member.name)
        return
    try:
        meta = json.loads(raw)
        if not isinstance(meta, dict):
            raise TypeError(f"a JSON {type(meta).__name__}, not an object")
    except (ValueError, TypeError) as exc:
        rep.add(f"unreadable sample json ({exc})", key=key, member=member.name)
        return
    wrong: dict[str, str] = {}  # field -> problem (the first found)
    recorded = meta.get("checksum", _ABSENT)
    if recorded != digest.hex():
        wrong["checksum"] = f"the media bytes' checksum {digest.hex()} differs from the json's {_shown(recorded)}"
    if meta.get("size", _ABSENT) != media.size:
        wrong["size"] = (
            f"the json's size is {_shown(meta.get('size', _ABSENT))}, the media member has {media.size} bytes"
        )
    label = meta.get("label", _ABSENT)
    if (cls_text is None and label is not _ABSENT) or (cls_text is not None and _shown(label) != cls_text):
        wrong["label"] = f"the json's label is {_shown(label)}, " + (
            f"the .cls member says {cls_text}" if cls else "the sample has no .cls member"
        )
    try:
        named = path_bytes(meta)
    except (KeyError, TypeError, ValueError):
        wrong["path"] = "the json has no readable path (path, or path_b64 when the name is not UTF-8)"
    else:
        if sample_key(named) != key:
            wrong["path"] = (
                f"the json's path {_shown(meta.get('path', _ABSENT))} is not this sample's (its key "
                f"would be {sample_key(named)}, the members are named {key})"
            )
    if expected is not None and raw != expected:
        want = json.loads(expected)
        for name in sorted(meta.keys() | want.keys()):
            have, should = meta.get(name, _ABSENT), want.get(name, _ABSENT)
            if have == should and type(have) is type(should):
                continue
            if name not in wrong:
                wrong[name] = f"the json's {name} is {_shown(have)}, the packed index says {_shown(should)}"
            elif name != "checksum":  # (the index's checksum is compared with the bytes' in _against_index)
                wrong[name] += f"; the packed index says {_shown(should)}"
        if not wrong:
            rep.add(
                "the json has the expected fields but not the bytes pack writes for them", key=key, member=member.name
            )
    for name, problem in sorted(wrong.items()):
        rep.add(problem, key=key, member=member.name, field=name)


def _cls_text(mm, cls) -> str | None:
    """The text of a sample's ``.cls`` member (None: it has none); TarError past the sidecar cap."""
    return sidecar_bytes(mm, cls).decode("ascii", "replace") if cls else None


def _shown(value) -> str:
    """A JSON value as it reads in the JSON text (``absent`` for a missing field)."""
    return "absent" if value is _ABSENT else json.dumps(value)


def _against_index(rep: ShardReport, key: str, m, cls, mm, idx, row: int, digest: bytes) -> bool:
    """The sample against its row of the packed index; False when the row is another sample's."""
    want_key = sample_key(idx.path_bytes(row))
    if want_key != key:
        rep.add(
            f"the packed index lists {want_key} ({os.fsdecode(idx.path_bytes(row))}) here: samples are "
            "missing, extra or out of order",
            key=key,
            member=m.name,
        )
        return False
    offset, size = int(idx.extra["offset"][row]), int(idx.sizes[row])
    if (m.offset, m.size) != (offset, size):
        rep.add(
            f"at byte {m.offset}, {m.size} bytes; the packed index says byte {offset}, {size} bytes",
            key=key,
            member=m.name,
        )
    want = bytes(idx.extra["checksum"][row])
    if digest != want:
        rep.add(
            f"checksum mismatch: the bytes hash to {digest.hex()}, the packed index recorded {want.hex()}",
            key=key,
            member=m.name,
        )
    label = int(idx.labels[row])
    if label >= 0:
        try:
            text = _cls_text(mm, cls)
        except TarError as exc:
            rep.add(str(exc), key=key, member=cls.name if cls else None)
            return True
        if text != str(label):
            rep.add(f"label {text!r}, the packed index says {label}", key=key, member=cls.name if cls else None)
    elif cls is not None:
        rep.add("a .cls member for a sample the packed index has no label for", key=key, member=cls.name)
    return True


#: decode warnings listed one by one at most; past this they are counted by reason
MAX_DECODE_NOTES = 50


def _decode(report: VerifyReport, names: list[str], options, jobs: int, by_name: dict) -> None:
    from . import extnames
    from .decode import decode_members
    from .state import read_state

    # under --ext-policy by-kind every image is named .jpg and every sound .flac on purpose (docs/how-to/shards.md):
    # a member whose extension is not its format is what the pack meant, counted once, not a note each
    by_kind = ((read_state(report.folder) or {}).get("layout") or {}).get("ext_policy") == extnames.BY_KIND
    named_by_kind = 0
    counted: dict[str, int] = {}
    with stop_on_signals() as stop:
        for shard, member, v in decode_members(report.folder, names, options, jobs):
            if v.status == "bad":
                by_name[shard].add(f"decode: {v.reason}: {v.detail}", key=member.partition(".")[0], member=member)
            elif v.status == "warn" and by_kind and v.reason == R.EXTENSION_MISMATCH:
                named_by_kind += 1
            elif v.status == "warn" and sum(counted.values()) < MAX_DECODE_NOTES:
                counted[str(v.reason)] = counted.get(str(v.reason), 0) + 1
                report.notes.append(f"{shard}: {member}: decode warning: {v.reason}: {v.detail}")
            elif v.status == "warn":
                counted[str(v.reason)] = counted.get(str(v.reason), 0) + 1
            if stop.signum:
                raise KeyboardInterrupt
    if named_by_kind:
        report.notes.append(
            f"{named_by_kind} members are named by kind (pack.json: --ext-policy by-kind), not by their format "
            "(e.g. a PNG as .jpg): readers that decode by content read them; a reader that trusts the name must "
            "sniff the bytes (docs/how-to/shards.md)"
        )
    if sum(counted.values()) > MAX_DECODE_NOTES:
        more = ", ".join(f"{n} {reason}" for reason, n in sorted(counted.items()))
        report.notes.append(f"decode warnings: the first {MAX_DECODE_NOTES} are listed above; in all: {more}")


def _unique_keys(report: VerifyReport, keys: list[np.ndarray]) -> None:
    allkeys = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
    if not len(allkeys):
        return
    s = np.sort(allkeys)
    dup = s[1:][s[1:] == s[:-1]]
    if dup.size:
        report.problems.append(
            f"{dup.size} sample keys appear more than once across the shards (e.g. {int(dup[0]):016x})"
        )


def _other_files(report: VerifyReport, names: set[str], listed: list[str] | None = None) -> None:
    """Files of the folder (``listed``: the names under a bucket prefix) that are not the set's."""
    own = {locations.SHARD_LIST_FILE, locations.PACKED_INDEX_FILE, locations.PACK_STATE_FILE, locations.DENYLIST_FILE}
    for entry in sorted(os.listdir(report.folder)) if listed is None else listed:
        if entry in names or entry in own:
            continue
        if _TEMP_RE.match(entry):
            report.notes.append(
                f"{entry}: a temp file a killed dsclean left (harmless; pack removes it when it writes that file again)"
            )
        elif entry.endswith(".tar"):
            extra = ShardReport(entry)
            extra.add("extra shard: a .tar file the shard list does not name")
            report.shards.append(extra)
        elif not (entry.startswith(".dsclean") or entry.startswith("pack.part-")):
            report.notes.append(f"{entry}: not part of the shard set")
