"""Duplicate groups for the report: exact duplicates from the scan's content hashes, or ``dsclean dups`` groups.

Exact duplicates are found in two streaming passes over the ``content_hash``
column (counts per hash, then the members of the groups shown), partitioned
by the hash's first byte so memory stays bounded for tens of millions of rows.
A groups file (``dsclean dups -o groups.jsonl``, format in docs/reference/facts.md) is read
line by line; only the groups shown are kept.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import reasons as R
from ..dups.quarantines import recorded_quarantines
from ..errors import UserError
from ..formats import format_of_name, kind_of
from ..jsonpaths import path_bytes
from .collect import CARD_COLUMNS, item_from_row, iter_batches
from .model import DupGroup, Duplicates, Item
from .safe import Scrubber, display
from .source import quarantined_locations, safe_rel

#: rows of hashes counted at once (one partition of the first pass)
PARTITION_ROWS = 2_000_000


def moved_by_dups(folders: list[str], root: str) -> list[bytes]:
    """Name bytes (relative to ``root``) of the files ``dsclean dups --quarantine`` moved into ``folders`` and
    that are there now, by the folders' journals (a restored copy is back in the dataset)."""
    from ..scanning.quarantine.status import quarantined_records

    out = []
    for folder in folders:
        for variant in {os.path.abspath(root), os.path.realpath(root)}:
            out += [path_bytes(line) for line in quarantined_records(folder, variant)]
    return out


def exact_duplicates(
    results_path: str | list[str],
    rows: int,
    scrub: Scrubber,
    max_groups: int = 50,
    max_members: int = 8,
    moved: list[bytes] = (),
    prefix: bytes = b"",
) -> Duplicates | None:
    """Groups of files (not marked bad) with the same ``content_hash``; None when nothing was hashed.
    ``results_path``: a results file, or every part's of a job array. ``moved``: paths no longer in the
    dataset (moved out by ``dsclean dups``, :func:`moved_by_dups`), left out of the groups and counts."""
    paths = [results_path] if isinstance(results_path, str) else list(results_path)
    gone = pa.array(moved, pa.binary()) if moved else None
    names = pq.ParquetFile(paths[0]).schema_arrow.names
    parts = max(1, -(-rows // PARTITION_ROWS))
    dup_counts: dict[bytes, int] = {}
    hashed = 0
    for p in range(parts):
        chunks = []
        for batch in iter_batches(paths, ["content_hash", "status", "path"], prefix):
            hashes = _kept_hashes(batch, gone)
            hashed += len(hashes) if p == 0 else 0
            if parts > 1 and len(hashes):
                first = np.frombuffer(
                    hashes.buffers()[1], dtype=np.uint8, count=len(hashes) * 16, offset=hashes.offset * 16
                )[::16]
                hashes = hashes.filter(pa.array(first % parts == p))
            chunks.append(hashes)
        if not chunks:
            continue
        counts = pc.value_counts(pa.chunked_array(chunks, pa.binary(16)))
        many = counts.filter(pc.greater(counts.field("counts"), 1))
        dup_counts.update(zip(many.field("values").to_pylist(), many.field("counts").to_pylist()))
    if not hashed:
        return None
    out = Duplicates(
        source="hashes",
        total_groups=len(dup_counts),
        exact_groups=len(dup_counts),
        total_files=sum(dup_counts.values()),
    )
    if moved:
        out.notes.append(
            f"{len(moved):,} extra copies that dsclean dups --quarantine moved out of the dataset "
            "(by its journal) are not counted."
        )
    if not dup_counts:
        return out
    shown = sorted(dup_counts, key=lambda h: (-dup_counts[h], h))[:max_groups]
    members: dict[bytes, list[Item]] = {h: [] for h in shown}
    dup_set = pa.array(list(dup_counts), pa.binary(16))
    seen: set[bytes] = set()
    columns = ["content_hash", *[c for c in CARD_COLUMNS if c in names]]
    for batch in iter_batches(paths, columns, prefix):
        t = pa.Table.from_batches([batch])
        keep = pc.and_(pc.not_equal(t["status"], R.BAD), pc.is_in(t["content_hash"].cast(pa.binary(16)), dup_set))
        if gone is not None:
            keep = pc.and_(keep, _not_gone(t["path"], gone))
        t = t.filter(keep)
        for row in t.to_pylist():
            h = bytes(row["content_hash"])
            size = row.get("size") or 0
            if h in seen:
                out.wasted_bytes += size
            else:
                seen.add(h)
            if h in members and len(members[h]) < max_members:
                members[h].append(item_from_row(row, scrub))
    for h in shown:
        items = sorted(members[h], key=lambda i: i.rel)
        out.groups.append(DupGroup(kind="exact", members=items, total_members=dup_counts[h]))
    out.groups.sort(key=lambda g: (-g.total_members, g.members[0].rel if g.members else ""))
    return out


def _kept_hashes(batch: pa.RecordBatch, gone: pa.Array | None = None) -> pa.Array:
    """The non-null 16-byte hashes of rows not marked bad (nor in ``gone``), as a fixed-size binary array."""
    hashes = batch.column(batch.schema.get_field_index("content_hash"))
    keep = pc.and_(pc.is_valid(hashes), pc.not_equal(batch.column(batch.schema.get_field_index("status")), R.BAD))
    if gone is not None:
        keep = pc.and_(keep, _not_gone(batch.column(batch.schema.get_field_index("path")), gone))
    hashes = hashes.filter(keep)
    if hashes.type != pa.binary(16):
        hashes = hashes.cast(pa.binary(16))
    return hashes


def _not_gone(paths, gone: pa.Array):
    """True where a path is not in ``gone`` (name bytes); a results file with text paths is compared as bytes."""
    if paths.type != pa.binary():
        paths = paths.cast(pa.binary())
    return pc.invert(pc.is_in(paths, value_set=gone))


def read_groups(
    path: str, scrub: Scrubber, max_groups: int = 50, max_members: int = 8, state_dir: str | None = None
) -> Duplicates:
    """The first groups of a ``dsclean dups`` groups file (groups spanning splits first), and totals of all.
    A member no longer in its root is looked for where ``dsclean dups --quarantine`` moved it (``state_dir``:
    where the roots' state folders are)."""
    out = Duplicates(source=display(os.path.basename(path)))
    missing: dict[str, dict[str, list[Item]]] = {}  # root -> rel -> shown members not found there
    leaking: list[DupGroup] = []
    others: list[DupGroup] = []
    base = os.path.dirname(os.path.abspath(path))
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise UserError(f"--dups {path}: cannot read: {exc.strerror or exc}") from exc
    with f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(
                    f"--dups {path}:{number}: not UTF-8 text; --dups takes the JSON lines file of "
                    "`dsclean dups -o groups.jsonl`"
                ) from None
            if not line.strip():
                continue
            try:
                g = json.loads(line)
                members = g["members"]
                kind = str(g.get("kind", "exact"))
                splits = [str(s) for s in g.get("splits") or []]
                if not isinstance(members, list):
                    raise TypeError("members is not a list")
                for k, m in enumerate(members):
                    if not isinstance(m, dict) or not isinstance(m.get("path", m.get("path_b64")), str):
                        raise ValueError(f"member {k} has no path")
            except (ValueError, KeyError, TypeError) as exc:
                raise UserError(f"--dups {path}:{number}: not a dsclean dups group ({exc})") from exc
            out.total_groups += 1
            out.total_files += len(members)
            out.exact_groups += kind == "exact"
            out.near_groups += kind == "near"
            leak = len(set(splits)) > 1
            out.leaking_groups += leak
            bucket = leaking if leak else others
            if len(bucket) < max_groups:
                items = [_member(m, base, scrub, missing) for m in members[:max_members]]
                bucket.append(
                    DupGroup(
                        kind=kind,
                        members=items,
                        splits=[_shown_root(s, scrub) for s in splits],
                        leak=leak,
                        total_members=len(members),
                    )
                )
    out.groups = (leaking + others)[:max_groups]
    _find_moved(missing, state_dir)
    return out


def _find_moved(missing: dict[str, dict[str, list[Item]]], state_dir: str | None) -> None:
    """Members moved out by ``dsclean dups --quarantine``: found through each root's recorded quarantines
    and their journals (one read per root), shown from there."""
    for root, by_rel in missing.items():
        for folder in recorded_quarantines(root, state_dir):
            for variant in {os.path.abspath(root), os.path.realpath(root)}:
                for rel, where in quarantined_locations(folder, variant, set(by_rel)).items():
                    for item in by_rel.pop(rel, []):
                        item.source = where
                        item.note = " · ".join(filter(None, [item.note, "moved out by dsclean dups"]))


def _shown_root(root: str, scrub: Scrubber) -> str:
    """A split as the report shows it: its folder's name (the groups file holds the paths dups was given,
    often absolute), the whole path only with ``--absolute-paths``."""
    return display(root if scrub.keep else os.path.basename(root.rstrip("/")) or scrub(root))


def _member(m: dict, base: str, scrub: Scrubber, missing: dict[str, dict[str, list[Item]]]) -> Item:
    """A group member: shown as split + path, read from its root (``root_abs``, else as given to dsclean dups,
    relative to here or to the groups file's folder)."""
    root = str(m.get("root", ""))
    try:
        raw = path_bytes(m)
    except (ValueError, TypeError):
        raw = os.fsencode(str(m.get("path", "")))
    rel = os.fsdecode(raw)
    distance = m.get("distance")
    note = " · ".join(filter(None, [_shown_root(root, scrub), f"distance {distance}" if distance else ""]))
    fmt = format_of_name(rel)
    item = Item(
        path=display(rel),
        note=note,
        kind=kind_of(fmt) if fmt else "unknown",  # no rel: not under the scan root
        missing="file not found where the groups file of dsclean dups says it is",
    )
    absolute = m.get("root_abs")  # written by dsclean dups for a root given relative
    if isinstance(absolute, str) and os.path.isabs(absolute):
        folders: tuple[str, ...] = (absolute,)
    elif os.path.isabs(root):
        folders = (root,)
    else:  # an older groups file: relative to here, else to the groups file's folder
        folders = (root, os.path.join(base, root))
    if safe_rel(rel):
        for folder in folders:
            candidate = os.path.join(folder, rel)
            if os.path.isfile(candidate):
                item.source = os.path.abspath(candidate)
                break
        else:
            missing.setdefault(os.path.abspath(folders[0]), {}).setdefault(rel, []).append(item)
    return item
