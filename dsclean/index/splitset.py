"""One index per split of a split root (``dsclean index DATA --splits -o DIR``), with one class list for all.

A model trained on ``train.arrow`` and evaluated on ``val.arrow`` needs label 3 to mean the same class in
both: every split's index gets the same ``classes`` / ``class_to_idx``, the sorted names (as torchvision's
ImageFolder sorts them) of the class folders. A split whose class folders differ from the reference split's
(``train``, else the first) is refused unless ``allow_class_mismatch``: then the list is the union of all
splits' classes. Each split is indexed by :func:`~dsclean.index.build.build_index` on ``DATA/<split>``, which
reuses the scan of ``DATA`` (:func:`dsclean.locations.find_scan`, a scanned parent's results).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .. import locations
from ..errors import UserError
from ..splits import reference_split, split_folders
from ..storage.urls import is_url
from .bucket import BucketIndexOptions, build_bucket_index, split_prefixes, top_folders
from .build import build_index
from .labels import folder_classes
from .options import IndexOptions, with_overrides
from .store import resolve_format
from .summary import IndexSummary

_SHOWN = 10  # class names shown per difference


def build_split_indexes(
    root: str,
    output: str,
    options: IndexOptions = IndexOptions(),
    *,
    allow_class_mismatch: bool = False,
    bucket: BucketIndexOptions | None = None,
    **overrides: Any,
) -> dict[str, IndexSummary]:
    """Index each split of the split root ``root`` into the folder ``output`` (``train.arrow``, ``val.arrow``, ...).

    Returns ``{split: summary}`` in split order. ``options`` as for :func:`~dsclean.index.build.build_index`
    (``split_names`` says what splits are called; ``format="npy"`` writes ``train.npy`` folders). Raises a
    :class:`~dsclean.errors.UserError` when ``root`` is not a split root, when labels come from a CSV, or when
    a split's classes differ from the reference split's and ``allow_class_mismatch`` is not set.
    """
    options = with_overrides(options, overrides, "build_split_indexes")
    if is_url(root):
        return _bucket_splits(root, output, options, allow_class_mismatch, bucket or BucketIndexOptions())
    if not os.path.isdir(root):
        raise UserError(f"{root}: no such folder")
    splits = split_folders(root, options.split_names)
    if not splits:
        raise UserError(
            f"{root} is not a split root: --splits needs folders all named like splits "
            f"({', '.join(options.split_names)}; --split-names sets them); index it without --splits"
        )
    if options.labels_csv is not None:
        raise UserError("--splits and --labels cannot be used together: a labels CSV names one root's files")
    if os.path.exists(output) and not os.path.isdir(output):
        raise UserError(f"{output}: not a folder (with --splits, -o is the folder the split indexes are written to)")
    fmt = resolve_format(f"index.{options.format or 'arrow'}", options.format)
    roots = {
        s: os.path.join(root, s)
        for s in splits
        if not any(locations.is_inside(os.path.join(root, s), d) for d in options.exclude)  # --exclude DATA/test
    }
    classes: list[str] = []
    if not options.no_labels:
        hidden = options.files == "imagefolder"
        per = {s: folder_classes(r, _excludes(options.exclude, r), include_hidden=hidden) for s, r in roots.items()}
        _refuse_mismatch(root, per, reference_split(splits), allow_class_mismatch)
        classes = sorted(set().union(*map(set, per.values())))
    os.makedirs(output, exist_ok=True)
    out: dict[str, IndexSummary] = {}
    for split, split_root in roots.items():
        split_options = dataclasses.replace(
            options,
            format=fmt,
            classes=tuple(classes) if not options.no_labels else None,
            exclude=_excludes(options.exclude, split_root),
        )
        out[split] = build_index(split_root, os.path.join(output, f"{split}.{fmt}"), split_options)
    return out


def _bucket_splits(
    url: str, output: str, options: IndexOptions, allow_class_mismatch: bool, bucket: BucketIndexOptions
) -> dict[str, IndexSummary]:
    """``--splits`` of a bucket prefix: one index per split prefix, the same classes in each; every split judged by
    the scan of the split root (its keys under the split) or its own, as :func:`build_bucket_index` finds it."""
    from ..storage.fs import Store
    from ..storage.scan import probe_prefix

    store = Store(url, dict(bucket.storage_options))
    probe_prefix(store, bucket.policy)
    splits = split_prefixes(store, options.split_names, bucket.policy)
    if not splits:
        raise UserError(
            f"{store.url} is not a split root: --splits needs folders all named like splits "
            f"({', '.join(options.split_names)}; --split-names sets them); index it without --splits"
        )
    if options.labels_csv is not None:
        raise UserError("--splits and --labels cannot be used together: a labels CSV names one root's files")
    if os.path.exists(output) and not os.path.isdir(output):
        raise UserError(f"{output}: not a folder (with --splits, -o is the folder the split indexes are written to)")
    fmt = resolve_format(f"index.{options.format or 'arrow'}", options.format)
    classes: list[str] = []
    if not options.no_labels:
        per = {s: [n for n in top_folders(store, s, bucket.policy) or [] if not n.startswith(".")] for s in splits}
        _refuse_mismatch(store.url, per, reference_split(splits), allow_class_mismatch)
        classes = sorted(set().union(*map(set, per.values())))
    os.makedirs(output, exist_ok=True)
    out: dict[str, IndexSummary] = {}
    for split in splits:
        split_options = dataclasses.replace(
            options, format=fmt, classes=tuple(classes) if not options.no_labels else None
        )
        out[split] = build_bucket_index(
            f"{store.url}/{split}", os.path.join(output, f"{split}.{fmt}"), split_options, bucket
        )
    return out


def _excludes(exclude, split_root: str) -> tuple[str, ...]:
    """The ``--exclude`` folders under this split (each split's build checks that its own are under it)."""
    return tuple(d for d in exclude if locations.is_inside(d, split_root) and not locations.is_inside(split_root, d))


def _refuse_mismatch(root: str, per: dict[str, list[str]], ref: str, allow: bool) -> None:
    """A split whose class folders are not the reference split's: label i would name two classes. Refused."""
    want = set(per[ref])
    lines = []
    for split, names in per.items():
        have = set(names)
        if have == want:
            continue
        missing, extra = sorted(want - have), sorted(have - want)
        what = []
        if missing:
            what.append(f"lacks {len(missing)} of {ref}'s classes ({_names(missing)})")
        if extra:
            what.append(f"has {len(extra)} classes {ref} does not ({_names(extra)})")
        lines.append(f"{os.path.join(root, split)} " + " and ".join(what))
    if lines and not allow:
        raise UserError(
            "the splits' class folders differ: "
            + "; ".join(lines)
            + f". Each split's index would number its classes differently from {ref}'s; fix the folders, or pass "
            "--allow-class-mismatch to give every split the union of the classes (a class a split lacks is empty there)"
        )


def _names(names: list[str]) -> str:
    return ", ".join(names[:_SHOWN]) + (f", ... ({len(names) - _SHOWN} more)" if len(names) > _SHOWN else "")
