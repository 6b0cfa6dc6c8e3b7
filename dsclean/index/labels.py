"""Labels: ImageFolder classes and order, or a ``path,label`` CSV for flat layouts.

Folder labels follow torchvision's documented ``ImageFolder`` rules: classes are
``sorted(entry.name for entry in os.scandir(root) if entry.is_dir())`` (minus
quarantine folders, which discovery never enters, and dot-folders unless the
ImageFolder file rule is used), and samples
come in ``sorted(os.walk(class_dir))`` order with ``sorted(fnames)`` per folder.
:func:`sort_key` turns that order into one byte string per file, so the build
can sort millions of rows with Arrow instead of Python.

CSV labels: integer labels are used as they are (classes ``"0".."max"``);
string labels map to ids in sorted order. Every CSV path must be a file under
the root; indexed files missing from the CSV are skipped (and counted). Paths are
normalised first (``./cats/x.jpg`` and ``cats//x.jpg`` are ``cats/x.jpg``); a CSV
none of whose paths names an indexed file is refused (it would give an empty index).

Files directly in the root have no class folder, so ImageFolder does not see
them: with folder labels they are skipped and counted (``IndexSummary.unlabeled``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UserError
from ..locations import LEGACY_STATE_DIR
from ..scanning.discover import QUARANTINE_MARKER

#: folder labels past this many classes are refused (a bucket index keeps one set entry a class while listing)
MAX_FOLDER_CLASSES = 100_000


def folder_classes(root: str, exclude: Iterable[str], *, include_hidden: bool = False) -> list[str]:
    """ImageFolder classes: sorted names of the folders directly under the root (symlinks followed).

    Like discovery, quarantine folders, a legacy ``.dsclean`` and ``exclude`` are left
    out, and so are dot-folders unless ``include_hidden`` (torchvision's rule keeps them).
    """
    excluded = {os.path.realpath(d) for d in exclude}
    names = []
    with os.scandir(root) as it:
        for entry in it:
            if entry.name == LEGACY_STATE_DIR or (entry.name.startswith(".") and not include_hidden):
                continue
            if not entry.is_dir():
                continue
            if os.path.realpath(entry.path) in excluded:
                continue
            if os.path.lexists(os.path.join(entry.path, QUARANTINE_MARKER)):
                continue
            names.append(entry.name)
    return sorted(names)


def sort_key(rel: str) -> bytes:
    """Bytes that sort like torchvision's walk order: ``(directory, file name)`` as Python strs.

    ``"dir\\0name"``: NUL sorts before every other character, so a directory's own
    files come before its subfolders' and ``a/b`` sorts before ``a/b-c``. UTF-8
    with ``surrogatepass`` keeps code-point order even for non-UTF-8 names
    (``surrogateescape`` characters), so byte order == Python ``str`` order.
    """
    d, _, name = rel.rpartition("/")
    return (d + "\0" + name).encode("utf-8", "surrogatepass")


@dataclass
class CsvLabels:
    """A labels CSV, parsed and checked before the (long) walk: compact Arrow columns."""

    source: str
    paths: pa.Array  # binary, as written in the CSV
    ids: pa.Array  # int64 label per row
    classes: list[str]


def read_labels_csv(csv_path: str) -> CsvLabels:
    """Parse ``path,label``; errors name the file and line (empty cells, duplicates, bad labels)."""
    paths, raw_labels = _read_labels_csv(csv_path)
    ids, classes = _label_ids(csv_path, raw_labels)
    return CsvLabels(csv_path, paths, ids, classes)


def apply_csv_labels(root: str, table: pa.Table, labels: CsvLabels) -> tuple[pa.Table, int]:
    """Join the CSV labels onto ``table`` (vectorized); returns it and how many rows had no label."""
    _check_csv_paths(root, labels.source, labels.paths, table.column("path"))
    where = pc.index_in(table.column("path"), value_set=labels.paths)
    col = labels.ids.take(where)
    listed = pc.is_valid(col)
    unlabeled = int(pc.sum(pc.invert(listed)).as_py() or 0)
    if len(labels.paths) and len(table) and unlabeled == len(table):
        example = os.fsdecode(labels.paths[0].as_py())
        raise UserError(
            f"{labels.source}: none of its {len(labels.paths):,} paths names a file being indexed "
            f"under {root} (e.g. line 2: {example!r}); paths must be relative to the root, "
            "like cats/x.jpg; an index of 0 rows is not written"
        )
    table = table.set_column(table.schema.get_field_index("label"), "label", col).filter(listed)
    return table, unlabeled


def _read_labels_csv(csv_path: str) -> tuple[pa.Array, pa.Array]:
    """The ``path`` (bytes, as written) and ``label`` (str) columns of a labels CSV."""
    import pyarrow.csv as pacsv

    if not os.path.isfile(csv_path):
        raise UserError(f"{csv_path}: labels CSV not found")
    try:
        t = pacsv.read_csv(
            csv_path,
            convert_options=pacsv.ConvertOptions(
                column_types={"path": pa.binary(), "label": pa.string()}, strings_can_be_null=False
            ),
        )
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"{csv_path}: cannot read labels CSV: {exc}") from exc
    missing = {"path", "label"} - set(t.column_names)
    if missing:
        raise UserError(
            f"{csv_path}: line 1: the header must name the columns path,label (missing {', '.join(sorted(missing))})"
        )
    paths = normalise_paths(t.column("path").combine_chunks())
    labels = t.column("label").combine_chunks()
    for name, col in (("path", paths), ("label", labels)):
        empty = pc.fill_null(pc.equal(pc.binary_length(col), 0), True)
        if pc.any(empty).as_py():
            line = _first_true(empty) + 2
            raise UserError(f"{csv_path}: line {line}: empty {name}")
    if len(pc.unique(paths)) != len(paths):
        line = _first_duplicate(paths) + 2
        raise UserError(f"{csv_path}: line {line}: the path is listed twice")
    return paths, labels


def normalise_paths(paths: pa.Array) -> pa.Array:
    """``./a/b.jpg``, ``a//b.jpg``, ``a/./b.jpg`` -> ``a/b.jpg`` (vectorised; bytes, so any name survives)."""
    for pattern, replacement in ((r"//+", "/"), (r"^(\./)+", ""), (r"/(\./)+", "/")):
        paths = pc.replace_substring_regex(paths, pattern=pattern, replacement=replacement)
    return paths


def _first_true(mask: pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


def _first_duplicate(values: pa.Array) -> int:
    """Row of the first value seen before (only called on the error path)."""
    order = pc.sort_indices(values).to_numpy()
    sorted_vals = values.take(pa.array(order))
    same = pc.equal(sorted_vals.slice(1), sorted_vals.slice(0, len(sorted_vals) - 1)).to_numpy(zero_copy_only=False)
    dup_rows = np.maximum(order[1:][same], order[:-1][same])
    return int(dup_rows.min())


def _check_csv_paths(root: str, csv_path: str, paths: pa.Array, indexed: pa.ChunkedArray) -> None:
    """Every CSV path must name a file under the root; only unindexed ones are stat'ed."""
    from .store import one_chunk

    unknown = pc.invert(pc.is_in(paths, value_set=one_chunk(indexed)))
    rows = np.flatnonzero(unknown.to_numpy(zero_copy_only=False))
    for row in rows:  # files excluded as bad, hidden, ... are fine; nonexistent ones are a mistake
        rel = os.fsdecode(paths[int(row)].as_py())
        if os.path.isabs(rel) or ".." in rel.split("/") or not os.path.isfile(os.path.join(root, rel)):
            raise UserError(
                f"{csv_path}: line {int(row) + 2}: {rel!r} is not a file under {root} "
                "(paths must be relative to the root, with /)"
            )


def _label_ids(csv_path: str, labels: pa.Array) -> tuple[pa.Array, list[str]]:
    """Integer labels as they are (classes "0".."max"); string labels -> ids in sorted order."""
    try:
        ints = labels.cast(pa.int64())
    except pa.ArrowInvalid:
        classes = pc.unique(labels).sort()
        return pc.index_in(labels, value_set=classes).cast(pa.int64()), classes.to_pylist()
    if len(ints) and pc.min(ints).as_py() < 0:
        line = _first_true(pc.less(ints, 0)) + 2
        raise UserError(f"{csv_path}: line {line}: negative label")
    top = pc.max(ints).as_py() if len(ints) else -1
    if top >= 10_000_000:
        line = _first_true(pc.equal(ints, top)) + 2
        raise UserError(f"{csv_path}: line {line}: label {top} is too large for a class id")
    return ints, [str(i) for i in range(top + 1)]
